package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// loadDoc loads and validates openapi.yaml. kin-openapi reads the document's
// own "openapi: 3.1.0" and validates it as OpenAPI 3.1 (JSON Schema 2020-12
// keywords, type arrays, webhooks) without an option.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("load openapi.yaml: %v", err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	// Validate also checks every example against its schema.
	if err := doc.Validate(context.Background(), openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("openapi.yaml does not validate: %v", err)
	}
	return doc
}

func TestOpenAPIValidates(t *testing.T) {
	doc := loadDoc(t)
	if doc.Webhooks["outcome"] == nil || doc.Webhooks["outcome"].Post == nil {
		t.Fatal("webhooks.outcome.post missing")
	}
	if got := doc.Webhooks["outcome"].Post.RequestBody.Value.Content.Get("application/json").Schema.Ref; got != "#/components/schemas/Webhook" {
		t.Errorf("webhooks.outcome body schema = %q, want the Webhook component", got)
	}
	ss := doc.Components.SecuritySchemes["bearerAuth"]
	if ss == nil || ss.Value.Type != "http" || ss.Value.Scheme != "bearer" || ss.Value.BearerFormat != "JWT" {
		t.Fatalf("securitySchemes.bearerAuth = %+v, want http bearer JWT", ss)
	}
	for _, word := range []string{"outcomes:write", "endpoints:write", "outbox:read", "admin", "`ns`"} {
		if !strings.Contains(ss.Value.Description, word) {
			t.Errorf("bearerAuth description does not mention %s", word)
		}
	}
}

// route is one route of /tmp/relay-api.md.
type route struct {
	method, path, operationID string
	// scopes are the alternative scopes that grant the route (admin
	// implies all); nil for the routes without authentication.
	scopes []string
}

var routes = []route{
	{http.MethodPost, "/v1/namespaces/{ns}/outcomes", "ingestOutcomes", []string{"outcomes:write", "admin"}},
	{http.MethodPut, "/v1/namespaces/{ns}/endpoints/{id}", "putEndpoint", []string{"endpoints:write", "admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/endpoints/{id}", "getEndpoint", []string{"endpoints:write", "outbox:read", "admin"}},
	{http.MethodDelete, "/v1/namespaces/{ns}/endpoints/{id}", "deleteEndpoint", []string{"endpoints:write", "admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/enable", "enableEndpoint", []string{"endpoints:write", "admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/disable", "disableEndpoint", []string{"endpoints:write", "admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/test", "testEndpoint", []string{"endpoints:write", "admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/retry", "retryEndpoint", []string{"admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/endpoints", "listEndpoints", []string{"endpoints:write", "outbox:read", "admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/outbox", "getOutbox", []string{"outbox:read", "admin"}},
	{http.MethodGet, "/v1/namespaces", "listNamespaces", []string{"admin"}},
	{http.MethodGet, "/v1/fleet", "getFleet", []string{"admin"}},
	{http.MethodPost, "/v1/admin/namespaces/{ns}/endpoints/{id}/outcomes/{rid}/replay", "replayOutcome", []string{"admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/outcomes", "listOutcomes", []string{"outbox:read", "admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/outcomes/{rid}", "getOutcome", []string{"outbox:read", "admin"}},
	{http.MethodDelete, "/v1/namespaces/{ns}/outcomes/{rid}", "eraseOutcome", []string{"admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/outcomes/{rid}/resend", "resendOutcome", []string{"admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/endpoints/{id}/recover", "recoverEndpoint", []string{"admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/endpoints/{id}/recover", "previewRecovery", []string{"outbox:read", "admin"}},
	{http.MethodGet, "/v1/namespaces/{ns}/endpoints/{id}/recoveries/{job}", "getRecovery", []string{"outbox:read", "admin"}},
	{http.MethodPost, "/v1/namespaces/{ns}/console-links", "createConsoleLink", []string{"admin"}},
	{http.MethodGet, "/healthz", "healthz", nil},
	{http.MethodGet, "/readyz", "readyz", nil},
	{http.MethodGet, "/metrics", "metrics", nil},
	{http.MethodGet, "/.well-known/mkit-hook-keys.json", "hookKeys", nil},
}

func TestRoutes(t *testing.T) {
	doc := loadDoc(t)
	want := map[string]route{}
	for _, r := range routes {
		want[r.method+" "+r.path] = r
	}
	// No operation beyond the listed ones.
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if _, ok := want[method+" "+path]; !ok {
				t.Errorf("%s %s is not a route of the API", method, path)
			}
		}
	}
	for _, r := range routes {
		t.Run(r.operationID, func(t *testing.T) {
			item := doc.Paths.Value(r.path)
			if item == nil {
				t.Fatalf("path %s missing", r.path)
			}
			op := item.GetOperation(r.method)
			if op == nil {
				t.Fatalf("%s %s missing", r.method, r.path)
			}
			if op.OperationID != r.operationID {
				t.Errorf("operationId = %q, want %q", op.OperationID, r.operationID)
			}
			if op.Summary == "" || op.Description == "" {
				t.Error("summary or description missing")
			}
			checkSecurity(t, op, r.scopes)
			checkParameters(t, item, op, r.path)
			checkResponses(t, op, r.scopes != nil)
		})
	}
}

func checkSecurity(t *testing.T, op *openapi3.Operation, scopes []string) {
	t.Helper()
	if op.Security == nil {
		t.Fatal("security not set on the operation")
	}
	if scopes == nil {
		if len(*op.Security) != 0 {
			t.Errorf("security = %v, want none", *op.Security)
		}
		return
	}
	var got []string
	for _, req := range *op.Security {
		if len(req) != 1 || len(req["bearerAuth"]) != 1 {
			t.Fatalf("security requirement %v, want bearerAuth with one scope", req)
		}
		got = append(got, req["bearerAuth"][0])
	}
	if !slices.Equal(got, scopes) {
		t.Errorf("scopes = %v, want %v", got, scopes)
	}
}

func checkParameters(t *testing.T, item *openapi3.PathItem, op *openapi3.Operation, path string) {
	t.Helper()
	params := append(slices.Clone(item.Parameters), op.Parameters...)
	for _, name := range []string{"ns", "id", "rid", "job"} {
		inPath := strings.Contains(path, "{"+name+"}")
		p := params.GetByInAndName(openapi3.ParameterInPath, name)
		switch {
		case inPath && p == nil:
			t.Errorf("path parameter %s not declared", name)
		case !inPath && p != nil:
			t.Errorf("path parameter %s declared but not in the path", name)
		case p != nil && (!p.Required || p.Schema.Value.Pattern == ""):
			t.Errorf("path parameter %s must be required and have a pattern", name)
		}
	}
	if params.GetByInAndName(openapi3.ParameterInHeader, "X-Request-Id") == nil {
		t.Error("X-Request-Id request header not declared")
	}
}

func checkResponses(t *testing.T, op *openapi3.Operation, authenticated bool) {
	t.Helper()
	codes := map[string]bool{}
	for code, resp := range op.Responses.Map() {
		codes[code] = true
		if resp.Value.Headers["X-Request-Id"] == nil {
			t.Errorf("response %s lacks the X-Request-Id header", code)
		}
		if !authenticated {
			continue
		}
		if code[0] == '4' || code[0] == '5' {
			mt := resp.Value.Content.Get("application/problem+json")
			if mt == nil || len(resp.Value.Content) != 1 {
				t.Errorf("response %s is not application/problem+json alone", code)
				continue
			}
			if ref := mt.Schema.Ref; ref != "#/components/schemas/Problem" && ref != "#/components/schemas/BacklogProblem" {
				t.Errorf("response %s schema %q, want Problem", code, ref)
			}
		}
	}
	if authenticated {
		for _, code := range []string{"400", "401", "403", "500", "503"} {
			if !codes[code] {
				t.Errorf("response %s missing", code)
			}
		}
		if op.Responses.Value("401").Value.Headers["WWW-Authenticate"] == nil {
			t.Error("401 lacks WWW-Authenticate")
		}
	}
}

// hex64 is a valid 32-byte id.
const hex64 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// designOutcome is the documented example outcome.
var designOutcome = `{"reservation_id": "r-7f3a", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000,
 "committed": {"bytes_stored": 1024, "new_to_repo": 512, "new_to_store": 256,
               "refs": [{"name": "refs/heads/main", "new": "` + hex64 + `", "deleted": false}]}}`

// designWebhook is the example webhook body, of namespace acme.
var designWebhook = `{"type": "outcome.committed", "timestamp": "2025-11-30T00:00:00Z",
 "data": {"reservation_id": "r-7f3a", "namespace": "acme", "audience": "https://relay.example.com",
          "repository": "acme/widgets", "occurred_unix_ms": 1764460800000,
          "committed": {"bytes_stored": 1024, "new_to_repo": 512, "new_to_store": 256,
                        "refs": [{"name": "refs/heads/main", "new": "` + hex64 + `", "deleted": false}]}}}`

func outcomeJSON(rid, kind string) string {
	return fmt.Sprintf(`{"reservation_id": %q, "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, %s}`, rid, kind)
}

func listJSON(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = outcomeJSON(fmt.Sprintf("r-%d", i), `"expired": {}`)
	}
	return `{"outcomes": [` + strings.Join(items, ",") + `]}`
}

type schemaCase struct {
	name  string
	json  string
	valid bool
}

// outcomeCases are single outcomes; each is also checked against
// schema.Outcome.Validate, which must agree.
var outcomeCases = []schemaCase{
	{"design example", designOutcome, true},
	{"aborted", outcomeJSON("r-1", `"aborted": {"reason": "client_cancelled", "detail": "gone away"}`), true},
	{"aborted without detail", outcomeJSON("r-1", `"aborted": {"reason": "x"}`), true},
	{"expired", outcomeJSON("r-1", `"expired": {}`), true},
	{"read_served", outcomeJSON("r-1", `"read_served": {"object": "`+hex64+`", "bytes_served": 7}`), true},
	{"committed empty", outcomeJSON("r-1", `"committed": {}`), true},
	{"deleted ref", outcomeJSON("r-1", `"committed": {"refs": [{"name": "refs/heads/x", "new": "", "deleted": true}]}`), true},
	{"deleted ref without new", outcomeJSON("r-1", `"committed": {"refs": [{"name": "refs/heads/x", "deleted": true}]}`), true},
	{"rid of 128", outcomeJSON(strings.Repeat("a", 128), `"expired": {}`), true},
	{"rid of every class", outcomeJSON("A.z_0:9-", `"expired": {}`), true},
	{"repository of 256", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "acme/widgets", strings.Repeat("r", 256), 1), true},
	{"64 refs", outcomeJSON("r-1", `"committed": {"refs": [`+refs(64)+`]}`), true},
	{"detail of 512", outcomeJSON("r-1", `"aborted": {"reason": "x", "detail": "`+strings.Repeat("d", 512)+`"}`), true},

	{"two kinds", outcomeJSON("r-1", `"expired": {}, "aborted": {"reason": "x"}`), false},
	{"no kind", `{"reservation_id": "r-1", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000}`, false},
	{"unknown field", outcomeJSON("r-1", `"expired": {}, "colour": "red"`), false},
	{"unknown field in kind", outcomeJSON("r-1", `"committed": {"colour": "red"}`), false},
	{"field in expired", outcomeJSON("r-1", `"expired": {"at": 1}`), false},
	{"kind null", outcomeJSON("r-1", `"expired": null`), false},
	{"rid empty", outcomeJSON("", `"expired": {}`), false},
	{"rid of 129", outcomeJSON(strings.Repeat("a", 129), `"expired": {}`), false},
	{"rid with slash", outcomeJSON("r/1", `"expired": {}`), false},
	{"rid synthetic", outcomeJSON("s:local", `"expired": {}`), false},
	{"rid of only the synthetic prefix", outcomeJSON("s:", `"expired": {}`), false},
	{"rid holding the synthetic prefix later", outcomeJSON("r-s:1", `"expired": {}`), true},
	{"rid with an upper-case S", outcomeJSON("S:1", `"expired": {}`), true},
	{"repository empty", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "acme/widgets", "", 1), false},
	{"repository of 257", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "acme/widgets", strings.Repeat("r", 257), 1), false},
	{"occurred 0", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "1764460800000", "0", 1), false},
	{"occurred negative", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "1764460800000", "-5", 1), false},
	{"occurred at the last RFC 3339 millisecond", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "1764460800000", "253402300799999", 1), true},
	{"occurred in year 10000", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "1764460800000", "253402300800000", 1), false},
	{"occurred in microseconds", strings.Replace(outcomeJSON("r-1", `"expired": {}`), "1764460800000", "1764460800000000", 1), false},
	{"missing occurred", `{"reservation_id": "r-1", "repository": "a", "expired": {}}`, false},
	{"65 refs", outcomeJSON("r-1", `"committed": {"refs": [`+refs(65)+`]}`), false},
	{"ref new upper hex", outcomeJSON("r-1", `"committed": {"refs": [{"name": "n", "new": "`+strings.ToUpper(hex64)+`"}]}`), false},
	{"ref new short", outcomeJSON("r-1", `"committed": {"refs": [{"name": "n", "new": "abc"}]}`), false},
	{"ref without new", outcomeJSON("r-1", `"committed": {"refs": [{"name": "n"}]}`), false},
	{"deleted ref with new", outcomeJSON("r-1", `"committed": {"refs": [{"name": "n", "new": "`+hex64+`", "deleted": true}]}`), false},
	{"ref name empty", outcomeJSON("r-1", `"committed": {"refs": [{"name": "", "new": "`+hex64+`"}]}`), false},
	{"ref name of 257", outcomeJSON("r-1", `"committed": {"refs": [{"name": "`+strings.Repeat("n", 257)+`", "new": "`+hex64+`"}]}`), false},
	{"reason empty", outcomeJSON("r-1", `"aborted": {"reason": ""}`), false},
	{"reason upper", outcomeJSON("r-1", `"aborted": {"reason": "Client"}`), false},
	{"reason leading dot", outcomeJSON("r-1", `"aborted": {"reason": ".x"}`), false},
	{"reason of 65", outcomeJSON("r-1", `"aborted": {"reason": "`+strings.Repeat("r", 65)+`"}`), false},
	{"detail of 513", outcomeJSON("r-1", `"aborted": {"reason": "x", "detail": "`+strings.Repeat("d", 513)+`"}`), false},
	{"object short", outcomeJSON("r-1", `"read_served": {"object": "abc"}`), false},
	{"negative counter", outcomeJSON("r-1", `"committed": {"bytes_stored": -1}`), false},
}

func refs(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf(`{"name": "refs/heads/b%d", "new": %q, "deleted": false}`, i, hex64)
	}
	return strings.Join(items, ",")
}

func visit(t *testing.T, doc *openapi3.T, schema, value string) error {
	t.Helper()
	ref := doc.Components.Schemas[schema]
	if ref == nil {
		t.Fatalf("schema %s missing", schema)
	}
	var v any
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("bad test JSON: %v", err)
	}
	return ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors())
}

// without is the JSON object s less its member key.
func without(t *testing.T, s, key string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("bad test JSON: %v", err)
	}
	if _, ok := m[key]; !ok {
		t.Fatalf("test JSON has no %q", key)
	}
	delete(m, key)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func runCases(t *testing.T, doc *openapi3.T, schema string, cases []schemaCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(schema+"/"+c.name, func(t *testing.T) {
			err := visit(t, doc, schema, c.json)
			if c.valid && err != nil {
				t.Errorf("want valid, got %v", err)
			}
			if !c.valid && err == nil {
				t.Error("want invalid, got valid")
			}
		})
	}
}

func TestOutcomeSchemas(t *testing.T) {
	doc := loadDoc(t)
	runCases(t, doc, "Outcome", outcomeCases)
	// A single outcome is an ingest body too.
	runCases(t, doc, "IngestRequest", outcomeCases)
}

// TestOutcomeSchemaAgreesWithValidate holds the schema to the rules of
// internal/outbox: every case the schema accepts, the API's decoder and
// Validate accept, and the reverse.
func TestOutcomeSchemaAgreesWithValidate(t *testing.T) {
	for _, c := range outcomeCases {
		t.Run(c.name, func(t *testing.T) {
			err := decodeOutcome(c.json)
			if c.valid != (err == nil) {
				t.Errorf("schema says valid=%v, outbox says %v", c.valid, err)
			}
		})
	}
}

// decodeOutcome decodes like a strict API: unknown fields and trailing data
// are errors, then the rules ingest applies to an outcome.
func decodeOutcome(s string) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var o schema.Outcome
	if err := dec.Decode(&o); err != nil {
		return err
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	// At this clock the bound relative to now lies past the schema's
	// maximum, which is then the bound.
	return outbox.ValidateIngest(o, time.UnixMilli(outbox.MaxOccurredUnixMs))
}

func TestListSchema(t *testing.T) {
	doc := loadDoc(t)
	runCases(t, doc, "IngestRequest", []schemaCase{
		{"list of 1", listJSON(1), true},
		{"list of 100", listJSON(100), true},
		{"list with every kind", `{"outcomes": [` + designOutcome + `,` + outcomeJSON("r-2", `"aborted": {"reason": "x"}`) + `,` +
			outcomeJSON("r-3", `"read_served": {"object": "`+hex64+`", "bytes_served": 1}`) + `]}`, true},
		{"list of 101", listJSON(101), false},
		{"empty list", listJSON(0), false},
		{"list with a broken outcome", `{"outcomes": [` + outcomeJSON("r-1", `"expired": {}`) + `,` + outcomeJSON("r-2", `"expired": {}, "aborted": {"reason": "x"}`) + `]}`, false},
		{"list with an unknown field", `{"outcomes": [` + outcomeJSON("r-1", `"expired": {}`) + `], "dry_run": true}`, false},
		{"list mixed with an outcome", strings.TrimSuffix(outcomeJSON("r-1", `"expired": {}`), "}") + `, "outcomes": []}`, false},
		{"outcomes not an array", `{"outcomes": {}}`, false},
		{"array body", `[` + designOutcome + `]`, false},
	})
}

func TestEndpointSchemas(t *testing.T) {
	doc := loadDoc(t)
	runCases(t, doc, "EndpointRequest", []schemaCase{
		{"design example", `{"url": "https://billing.acme.example/hooks/relay", "scheme": "standard-webhooks",
			"kinds": ["committed", "aborted"], "enabled": true}`, true},
		{"url only", `{"url": "https://hooks.acme.example/relay"}`, true},
		{"url of 2048", `{"url": "https://h.example/` + strings.Repeat("a", 2030) + `"}`, true},
		{"every field", `{"url": "https://h.example/x", "scheme": "standard-webhooks", "kinds": [], "enabled": false,
			"max_in_flight": 16, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, true},
		{"mkit scheme", `{"url": "https://h.example/x", "scheme": "mkit-hook-v2", "max_in_flight": 1}`, true},
		{"headers kept", `{"url": "https://h.example/x", "headers": {"x-tenant": "acme"}, "keep_headers": ["authorization"]}`, true},
		{"kept header repeated", `{"url": "https://h.example/x", "keep_headers": ["authorization", "authorization"]}`, false},
		{"kept header not a string", `{"url": "https://h.example/x", "keep_headers": [1]}`, false},
		{"test kind", `{"url": "https://h.example/x", "kinds": ["relay.endpoint.test"]}`, false},

		{"unknown mkit scheme", `{"url": "https://h.example/x", "scheme": "mkit-hook-v3"}`, false},
		{"no url", `{"scheme": "mkit-hook-v2"}`, false},
		{"empty url", `{"url": ""}`, false},
		{"url over 2048", `{"url": "https://h.example/` + strings.Repeat("a", 2031) + `"}`, false},
		{"unknown field", `{"url": "https://h.example/x", "secrets": []}`, false},
		{"unknown scheme", `{"url": "https://h.example/x", "scheme": "hmac"}`, false},
		{"unknown kind", `{"url": "https://h.example/x", "kinds": ["committed", "deleted"]}`, false},
		{"repeated kind", `{"url": "https://h.example/x", "kinds": ["aborted", "aborted"]}`, false},
		{"max_in_flight 0", `{"url": "https://h.example/x", "max_in_flight": 0}`, false},
		{"max_in_flight 17", `{"url": "https://h.example/x", "max_in_flight": 17}`, false},
		{"max_in_flight fraction", `{"url": "https://h.example/x", "max_in_flight": 1.5}`, false},
		{"enabled string", `{"url": "https://h.example/x", "enabled": "yes"}`, false},
		{"secret without prefix", `{"url": "https://h.example/x", "scheme": "standard-webhooks", "secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, false},
		{"secret with mkit scheme", `{"url": "https://h.example/x", "scheme": "mkit-hook-v2", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, false},
		{"secret with default scheme", `{"url": "https://h.example/x", "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, false},
	})

	view := `{"id": "billing", "url": "https://billing.acme.example/hooks/relay", "scheme": "standard-webhooks",
		"kinds": ["committed", "aborted"], "enabled": true, "max_in_flight": 1,
		"created_at": "2025-11-30T00:00:00.000Z", "updated_at": "2025-11-30T00:00:00.000Z",
		"backlog": {"rows": 0, "bytes": 0}, "next_attempt_at": null, "oldest_pending_at": null,
		"counters": {"delivered": 0, "failed_attempts": 0, "dropped": 0},
		"timeout_ms": 5000, "headers": {"x-tenant": "acme", "authorization": "[redacted]"}}`
	runCases(t, doc, "Endpoint", []schemaCase{
		{"view", view, true},
		{"disabled", strings.Replace(view, `"enabled": true`, `"enabled": false, "disabled_reason": "gone"`, 1), true},
		{"scheduled", strings.Replace(view, `null`, `"2025-11-30T00:00:01.250Z"`, 1), true},
		{"no backlog", without(t, view, "backlog"), false},
		{"next_attempt_at missing", without(t, view, "next_attempt_at"), false},
		{"counted", strings.Replace(view, `"delivered": 0, "failed_attempts": 0, "dropped": 0`, `"delivered": 7, "failed_attempts": 3, "dropped": 2`, 1), true},
		{"oldest pending", strings.Replace(view, `"oldest_pending_at": null`, `"oldest_pending_at": "2025-11-30T00:00:00.500Z"`, 1), true},
		{"no counters", without(t, view, "counters"), false},
		{"oldest_pending_at missing", without(t, view, "oldest_pending_at"), false},
		{"negative count", strings.Replace(view, `"dropped": 0`, `"dropped": -1`, 1), false},
		{"no timeout_ms", without(t, view, "timeout_ms"), false},
		{"no headers", without(t, view, "headers"), false},
	})
	runCases(t, doc, "EndpointSaved", []schemaCase{
		{"generated secret", strings.TrimSuffix(view, "}") + `, "secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`, true},
		{"bad secret", strings.TrimSuffix(view, "}") + `, "secret": "hunter2"}`, false},
	})
	minutes := make([]string, 60)
	for i := range minutes {
		minutes[i] = fmt.Sprintf(`{"start": "2025-11-30T00:%02d:00.000Z", "delivered": %d, "failed_attempts": 0}`, i, i)
	}
	detail := strings.TrimSuffix(view, "}") + `, "per_minute": [` + strings.Join(minutes, ", ") + `]}`
	runCases(t, doc, "EndpointDetail", []schemaCase{
		{"an hour", detail, true},
		{"no per_minute", view, false},
		{"59 minutes", strings.Replace(detail, minutes[0]+", ", "", 1), false},
		{"61 minutes", strings.Replace(detail, minutes[0], minutes[0]+", "+minutes[0], 1), false},
		{"negative count", strings.Replace(detail, `"delivered": 7,`, `"delivered": -7,`, 1), false},
		{"unknown field", strings.Replace(detail, `"delivered": 7,`, `"delivered": 7, "dropped": 0,`, 1), false},
		{"no start", strings.Replace(detail, `"start": "2025-11-30T00:07:00.000Z", `, ``, 1), false},
	})
}

func TestResponseSchemas(t *testing.T) {
	doc := loadDoc(t)
	runCases(t, doc, "IngestResponse", []schemaCase{
		{"accepted", `{"results": [{"reservation_id": "r-7f3a", "status": "accepted"}]}`, true},
		{"list", `{"results": [{"reservation_id": "a", "status": "duplicate"},
			{"reservation_id": "b", "status": "conflict", "type": "urn:hookrelay:problem:conflict", "detail": "d"},
			{"reservation_id": "c", "status": "no_endpoint", "type": "urn:hookrelay:problem:no-endpoint"}]}`, true},
		{"conflict without type", `{"results": [{"reservation_id": "b", "status": "conflict"}]}`, false},
		{"unknown status", `{"results": [{"reservation_id": "b", "status": "rejected"}]}`, false},
		{"no results", `{"results": []}`, false},
	})
	runCases(t, doc, "Problem", []schemaCase{
		{"plain", `{"type": "urn:hookrelay:problem:internal", "title": "Internal", "status": 500, "request_id": "abc"}`, true},
		{"list errors", `{"type": "urn:hookrelay:problem:invalid-outcome", "title": "Invalid outcome", "status": 400,
			"detail": "x", "request_id": "abc", "errors": [{"index": 3, "detail": "reservation_id must be ..."}]}`, true},
		{"unknown type", `{"type": "about:blank", "title": "x", "status": 500, "request_id": "abc"}`, false},
		{"no request id", `{"type": "urn:hookrelay:problem:internal", "title": "Internal", "status": 500}`, false},
	})
	runCases(t, doc, "BacklogProblem", []schemaCase{
		{"with rows", `{"type": "urn:hookrelay:problem:endpoint-has-backlog", "title": "t", "status": 409, "request_id": "a", "backlog_rows": 3}`, true},
		{"without rows", `{"type": "urn:hookrelay:problem:endpoint-has-backlog", "title": "t", "status": 409, "request_id": "a"}`, false},
	})
	page := `{"endpoint": "billing", "backlog": {"rows": 2, "bytes": 900}, "state": "backing_off",
		"next_attempt_at": "2025-11-30T00:01:00.000Z", "failed_fires": 3,
		"rows": [{"reservation_id": "r-1", "sequence": 0, "kind": "committed", "occurred_unix_ms": 1764460800000,
		          "last_attempt": {"at": "2025-11-30T00:00:30.000Z", "status": 503, "error": "status", "count": 3},
		          "attempts": [{"at": "2025-11-30T00:00:20.000Z", "duration_ms": 5000, "error": "timeout"},
		                       {"at": "2025-11-30T00:00:30.000Z", "duration_ms": 12, "status": 503, "error": "status", "response_excerpt": "busy"}],
		          "attempt_count": 3},
		         {"reservation_id": "r-2", "sequence": 9, "kind": "expired", "occurred_unix_ms": 1764460800001,
		          "last_attempt": null, "attempts": [], "attempt_count": 0}],
		"next_cursor": null}`
	runCases(t, doc, "OutboxPage", []schemaCase{
		{"page", page, true},
		{"unknown state", strings.Replace(page, "backing_off", "sleeping", 1), false},
		{"more pages", strings.Replace(page, `"next_cursor": null`, `"next_cursor": "b3BhcXVl"`, 1), true},
		{"cursor missing", without(t, page, "next_cursor"), false},
		{"state missing", without(t, page, "state"), false},
		{"corrupt row", strings.Replace(page, `"kind": "expired", "occurred_unix_ms": 1764460800001,`, `"corrupt": true,`, 1), true},
		{"row without kind", strings.Replace(page, `"kind": "expired", "occurred_unix_ms": 1764460800001,`, ``, 1), false},
		{"row without attempts", strings.Replace(page, `, "attempts": []`, ``, 1), false},
		{"row without its count", strings.Replace(page, `, "attempt_count": 0`, ``, 1), false},
		{"attempt without duration", strings.Replace(page, `"duration_ms": 12, `, ``, 1), false},
		{"excerpt over 256", strings.Replace(page, `"busy"`, `"`+strings.Repeat("b", 257)+`"`, 1), false},
		{"delivered attempt", strings.Replace(page, `"duration_ms": 5000, "error": "timeout"`, `"duration_ms": 3, "status": 204`, 1), true},
	})
	namespaces := `{"namespaces": [{"namespace": "acme", "endpoints": 2, "failing": 1, "disabled": 0, "backlog": {"rows": 3, "bytes": 1200}}], "next_cursor": "AWFjbWU"}`
	runCases(t, doc, "NamespacePage", []schemaCase{
		{"page", namespaces, true},
		{"last page", strings.Replace(namespaces, `"AWFjbWU"`, `null`, 1), true},
		{"empty page with more", `{"namespaces": [], "next_cursor": "QA"}`, true},
		{"cursor missing", without(t, namespaces, "next_cursor"), false},
		{"no endpoints", strings.Replace(namespaces, `"endpoints": 2`, `"endpoints": 0`, 1), false},
		{"bad namespace", strings.Replace(namespaces, `"acme"`, `"ACME"`, 1), false},
		{"failing missing", strings.Replace(namespaces, `"failing": 1, `, ``, 1), false},
		{"failing negative", strings.Replace(namespaces, `"failing": 1`, `"failing": -1`, 1), false},
		{"disabled missing", strings.Replace(namespaces, `"disabled": 0, `, ``, 1), false},
		{"disabled negative", strings.Replace(namespaces, `"disabled": 0`, `"disabled": -1`, 1), false},
	})
	runCases(t, doc, "ReplayResult", []schemaCase{
		{"replayed", `{"endpoint": "billing", "reservation_id": "r-1", "sequence": 4, "next_attempt_at": "2025-11-30T00:00:00.000Z"}`, true},
	})
	story := `{"reservation_id": "r-1", "seq": 3, "accepted_at": "2025-11-30T00:00:00.000Z",
		"outcome": {"reservation_id": "r-1", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, "expired": {}},
		"endpoints": [{"endpoint": "billing", "state": "delivered", "delivered_at": "2025-11-30T00:00:01.000Z",
		               "attempts": [{"at": "2025-11-30T00:00:01.000Z", "duration_ms": 4, "status": 200}], "attempt_count": 1},
		              {"endpoint": "audit", "state": "filtered", "attempts": [], "attempt_count": 0}]}`
	runCases(t, doc, "OutcomeStory", []schemaCase{
		{"story", story, true},
		{"delivered without its time", strings.Replace(story, `"delivered_at": "2025-11-30T00:00:01.000Z",`, ``, 1), false},
		{"filtered with a delivery time", strings.Replace(story, `"state": "filtered",`, `"state": "filtered", "delivered_at": "2025-11-30T00:00:01.000Z",`, 1), false},
		{"unknown state", strings.Replace(story, `"filtered"`, `"lost"`, 1), false},
		{"outcome not of the ingest shape", strings.Replace(story, `"expired": {}`, `"expired": {}, "aborted": {"reason": "x"}`, 1), false},
		{"no endpoints", without(t, story, "endpoints"), false},
	})
	list := `{"outcomes": [{"reservation_id": "r-1", "seq": 0, "accepted_at": "2025-11-30T00:00:00.000Z", "kind": "expired",
		"endpoints": [{"endpoint": "billing", "state": "delivered", "at": "2025-11-30T00:00:01.000Z"}, {"endpoint": "audit", "state": "pending"}]}],
		"next_cursor": "AAAAAAAAAAA"}`
	runCases(t, doc, "OutcomesPage", []schemaCase{
		{"page", list, true},
		{"last page", without(t, list, "next_cursor"), true},
		{"pending with a time", strings.Replace(list, `"state": "pending"`, `"state": "pending", "at": "2025-11-30T00:00:01.000Z"`, 1), false},
		{"null cursor", strings.Replace(list, `"AAAAAAAAAAA"`, `null`, 1), false},
	})
	job := `{"id": "0123456789abcdef0123456789abcdef", "endpoint": "billing", "state": "done", "since": "2025-11-30T00:00:00.000Z",
		"until": "2025-11-30T01:00:00.000Z", "examined": 40, "queued": 39, "total": 60, "created_at": "2025-11-30T02:00:00.000Z",
		"finished_at": "2025-11-30T02:00:01.000Z"}`
	runCases(t, doc, "Recovery", []schemaCase{
		{"done", job, true},
		{"done without its end", without(t, job, "finished_at"), false},
		{"running", strings.Replace(without(t, job, "finished_at"), `"done"`, `"running"`, 1), true},
		{"running with an end", strings.Replace(job, `"done"`, `"running"`, 1), false},
		{"bad id", strings.Replace(job, `"0123456789abcdef0123456789abcdef"`, `"x"`, 1), false},
	})
	runCases(t, doc, "ResendResult", []schemaCase{
		{"due", `{"seq": 4, "due_at": "2025-11-30T00:00:00.000Z"}`, true},
		{"parked", `{"seq": 4, "due_at": null}`, true},
	})
	runCases(t, doc, "KeyList", []schemaCase{
		{"one key", `{"version": 1, "keys": [{"keyId": "relay-1", "alg": "ed25519", "publicKey": "` + hex64 + `"}]}`, true},
		{"version 2", `{"version": 2, "keys": []}`, false},
		{"rsa", `{"version": 1, "keys": [{"keyId": "k", "alg": "rsa", "publicKey": "` + hex64 + `"}]}`, false},
	})
}

func TestWebhookSchema(t *testing.T) {
	doc := loadDoc(t)
	runCases(t, doc, "Webhook", []schemaCase{
		{"design example", designWebhook, true},
		{"type and kind differ", strings.Replace(designWebhook, "outcome.committed", "outcome.aborted", 1), false},
		{"unknown type", strings.Replace(designWebhook, "outcome.committed", "outcome.deleted", 1), false},
		{"no audience", strings.Replace(designWebhook, `"audience": "https://relay.example.com",`, "", 1), false},
		{"no namespace", strings.Replace(designWebhook, `"namespace": "acme",`, "", 1), false},
		{"namespace in capitals", strings.Replace(designWebhook, `"namespace": "acme",`, `"namespace": "Acme",`, 1), false},
		{"committed without refs", `{"type": "outcome.committed", "timestamp": "2025-11-30T00:00:00Z",
			"data": {"reservation_id": "r", "namespace": "acme", "audience": "https://relay.example.com", "repository": "a", "occurred_unix_ms": 1,
			         "committed": {"bytes_stored": 0, "new_to_repo": 0, "new_to_store": 0}}}`, false},
		{"ref without deleted", strings.Replace(designWebhook, `, "deleted": false`, "", 1), false},
		{"aborted without detail", `{"type": "outcome.aborted", "timestamp": "2025-11-30T00:00:00Z",
			"data": {"reservation_id": "r", "namespace": "acme", "audience": "https://relay.example.com", "repository": "a", "occurred_unix_ms": 1,
			         "aborted": {"reason": "x"}}}`, false},
	})
}

// TestWebhookSchemaMatchesEncodeWebhook checks the bodies relay really
// sends against the Webhook schema receivers get.
func TestWebhookSchemaMatchesEncodeWebhook(t *testing.T) {
	doc := loadDoc(t)
	for _, c := range outcomeCases {
		if !c.valid {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var o schema.Outcome
			if err := json.Unmarshal([]byte(c.json), &o); err != nil {
				t.Fatal(err)
			}
			body, err := outbox.EncodeWebhook(&o, "acme", "https://relay.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if err := visit(t, doc, "Webhook", string(body)); err != nil {
				t.Errorf("webhook %s: %v", body, err)
			}
		})
	}
	// So are the operator events relay sends, of each type; one whose type
	// and data differ is not.
	for _, typ := range schema.EventTypes() {
		o := schema.NewEvent(schema.Event{Type: typ, Endpoint: "billing", Reason: "failing", FailingSinceMs: 1764460800000, LastStatus: 503, LastError: "status"}, 1764460900000)
		body, err := outbox.EncodeWebhook(&o, "acme", "https://relay.example.com")
		if err != nil {
			t.Fatal(err)
		}
		if err := visit(t, doc, "Webhook", string(body)); err != nil {
			t.Errorf("event webhook %s: %v", body, err)
		}
		bad := strings.Replace(string(body), `"last_status":503`, `"last_status":42`, 1)
		if err := visit(t, doc, "Webhook", bad); err == nil {
			t.Errorf("event webhook %s passes", bad)
		}
	}
	// The example outcome, encoded by relay, is the example webhook.
	var o schema.Outcome
	if err := json.Unmarshal([]byte(designOutcome), &o); err != nil {
		t.Fatal(err)
	}
	body, err := outbox.EncodeWebhook(&o, "acme", "https://relay.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(designWebhook)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, want.Bytes()) {
		t.Errorf("EncodeWebhook = %s\nwant %s", body, want.Bytes())
	}
}

func TestParameterSchemas(t *testing.T) {
	doc := loadDoc(t)
	check := func(param, value string, valid bool) {
		t.Helper()
		p := doc.Components.Parameters[param]
		if p == nil {
			t.Fatalf("parameter %s missing", param)
		}
		err := p.Value.Schema.Value.VisitJSON(value, openapi3.EnableJSONSchema2020())
		if valid != (err == nil) {
			t.Errorf("%s %q: valid=%v, got %v", param, value, valid, err)
		}
	}
	for _, p := range []string{"Namespace", "EndpointId"} {
		check(p, "acme", true)
		check(p, "a", true)
		check(p, "0-a_b", true)
		check(p, strings.Repeat("a", 63), true)
		check(p, strings.Repeat("a", 64), false)
		check(p, "", false)
		check(p, "-a", false)
		check(p, "Acme", false)
		check(p, "a.b", false)
	}
	check("ReservationIdPath", "r-7f3a", true)
	check("ReservationIdPath", "A.b_c:d-e", true)
	check("ReservationIdPath", strings.Repeat("r", 129), false)
	check("ReservationIdPath", "a b", false)

	limit := doc.Paths.Value("/v1/namespaces/{ns}/outbox").Get.Parameters.GetByInAndName(openapi3.ParameterInQuery, "limit")
	if limit == nil {
		t.Fatal("outbox limit parameter missing")
	}
	s := limit.Schema.Value
	if s.Min == nil || *s.Min != 1 || s.Max == nil || *s.Max != 100 || s.Default != float64(50) {
		t.Errorf("limit bounds %v..%v default %v, want 1..100 default 50", s.Min, s.Max, s.Default)
	}
}
