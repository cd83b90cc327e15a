package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/testlog"
	"github.com/hookrelay/relay/internal/timers"
)

// newLoggedHarness is a harness on miniredis whose API logs to the buffer.
func newLoggedHarness(t *testing.T) (*harness, *testlog.Buffer) {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	logs := &testlog.Buffer{}
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix})
	h := newHarnessOn(t, st, apiOptions{ready: st.Check, logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	h.st, h.client, h.prefix = st, client, redisstore.DefaultPrefix
	return h, logs
}

func TestBadEndpointSettingsAreRefusedNamingTheFieldAndChangeNothing(t *testing.T) {
	h, logs := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "timeout_ms": 2000, "headers": {"x-tenant": "acme"}}`)
	before := h.dump()
	put := func(settings string) string {
		return `{"url": "https://billing.example.com/hooks", ` + settings + `}`
	}
	type badCase struct {
		name, body, field string
		slug              httpapi.Slug
	}
	cases := []badCase{
		{"timeout below 1000", put(`"timeout_ms": 999`), "timeout_ms", httpapi.SlugInvalidEndpoint},
		{"timeout above 10000", put(`"timeout_ms": 10001`), "timeout_ms", httpapi.SlugInvalidEndpoint},
		{"timeout of 30000", put(`"timeout_ms": 30000`), "timeout_ms", httpapi.SlugInvalidEndpoint},
		{"timeout negative", put(`"timeout_ms": -1`), "timeout_ms", httpapi.SlugInvalidEndpoint},
		{"timeout a fraction", put(`"timeout_ms": 1500.5`), "timeout_ms", httpapi.SlugInvalidRequest},
		{"timeout a string", put(`"timeout_ms": "2000"`), "timeout_ms", httpapi.SlugInvalidRequest},
		{"headers not an object", put(`"headers": ["x-tenant"]`), "headers", httpapi.SlugInvalidRequest},
		{"header value a number", put(`"headers": {"x-tenant": 1}`), "headers", httpapi.SlugInvalidRequest},
		{"upper-case name", put(`"headers": {"X-Tenant": "hunter2"}`), "", httpapi.SlugInvalidRequest},
		{"name with a space", put(`"headers": {"x tenant": "hunter2"}`), "headers", httpapi.SlugInvalidEndpoint},
		{"CR LF in a value", put(`"headers": {"x-tenant": "hunter2\r\nx-evil: 1"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"LF in a value", put(`"headers": {"x-tenant": "hunter2\nx"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"NUL in a value", put(`"headers": {"x-tenant": "hunter2\u0000"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"control in a value", put(`"headers": {"x-tenant": "hunter2\u001b"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"non-ASCII value", put(`"headers": {"x-tenant": "hunter2é"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"value over 1 KiB", put(`"headers": {"x-tenant": "hunter2` + strings.Repeat("h", 1018) + `"}`), "headers.x-tenant", httpapi.SlugInvalidEndpoint},
		{"redaction placeholder", put(`"headers": {"authorization": "[redacted]"}`), "headers.authorization", httpapi.SlugInvalidEndpoint},
	}
	var eleven []string
	for i := range 11 {
		eleven = append(eleven, fmt.Sprintf(`"x-h%d": "hunter2"`, i))
	}
	cases = append(cases, badCase{"11 headers", put(`"headers": {` + strings.Join(eleven, ", ") + `}`), "headers", httpapi.SlugInvalidEndpoint})
	for _, n := range []string{
		"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
		"expect", "http2-settings", "content-type", "content-encoding", "user-agent",
		"proxy-authorization", "proxy-connection",
		"webhook-id", "webhook-timestamp", "webhook-signature",
		"x-mkit-hook-version", "x-mkit-hook-key-id", "x-mkit-hook-namespace", "x-mkit-hook-audience",
		"x-mkit-hook-created-at", "x-mkit-hook-expires-at", "x-mkit-hook-nonce", "x-mkit-hook-digest", "x-mkit-hook-signature",
	} {
		cases = append(cases, badCase{"denied " + n, put(`"headers": {"x-tenant": "acme", "` + n + `": "hunter2"}`), "headers." + n, httpapi.SlugInvalidEndpoint})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/billing", h.admin(), c.body)
			body := want(t, rec, http.StatusBadRequest, c.slug)
			detail, _ := body["detail"].(string)
			if !strings.Contains(detail, c.field) {
				t.Errorf("detail %q does not name %s", detail, c.field)
			}
			if strings.Contains(detail, "hunter2") {
				t.Errorf("detail %q echoes a header value", detail)
			}
			if got := h.dump(); !reflect.DeepEqual(before, got) {
				t.Fatal("a refused request changed Redis")
			}
		})
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Fatalf("the log holds a header value:\n%s", logs)
	}
}

func TestSecretHeaderValuesAreStoredButNeverShown(t *testing.T) {
	h, logs := newLoggedHarness(t)
	const (
		bearer = "Bearer s3cr3t-bearer"
		apiKey = "k3y-s3cr3t"
		path   = "/v1/namespaces/acme/endpoints/billing"
	)
	body := `{"url": "https://billing.example.com/hooks", "timeout_ms": 2000,
	  "headers": {"x-tenant": "acme", "authorization": "` + bearer + `", "x-api-key": "` + apiKey + `", "x-auth-token": "` + apiKey + `"}}`
	rec := h.do(http.MethodPut, path, h.admin(), body)
	created := want(t, rec, http.StatusCreated, "")
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	list := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", h.admin(), ""), http.StatusOK, "")
	eps, _ := list["endpoints"].([]any)
	if len(eps) != 1 {
		t.Fatalf("list: %v", list)
	}
	wantShown := map[string]any{"x-tenant": "acme", "authorization": "[redacted]", "x-api-key": "[redacted]", "x-auth-token": "[redacted]"}
	for name, view := range map[string]map[string]any{"PUT": created, "GET": got, "list": eps[0].(map[string]any)} {
		if view["timeout_ms"] != 2000.0 || !reflect.DeepEqual(view["headers"], wantShown) {
			t.Errorf("%s shows timeout_ms %v, headers %v; want 2000 and %v", name, view["timeout_ms"], view["headers"], wantShown)
		}
		raw, _ := json.Marshal(view)
		if strings.Contains(string(raw), "s3cr3t") {
			t.Errorf("%s shows a secret header's value: %s", name, raw)
		}
	}
	// Stored, so it is sent.
	if dump := fmt.Sprint(h.dump()); !strings.Contains(dump, bearer) || !strings.Contains(dump, apiKey) {
		t.Fatal("the secret headers were not stored")
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Fatalf("the log holds a secret header's value:\n%s", logs)
	}
	// A PUT without them replaces them with none, and the timeout with the default.
	replaced := want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusOK, "")
	if replaced["timeout_ms"] != 5000.0 || !reflect.DeepEqual(replaced["headers"], map[string]any{}) {
		t.Fatalf("replaced: timeout_ms %v, headers %v; want 5000 and {}", replaced["timeout_ms"], replaced["headers"])
	}
	if strings.Contains(fmt.Sprint(h.dump()), "s3cr3t") {
		t.Fatal("replaced headers are still stored")
	}
}

// A credential under a name that does not look secret is not shown either,
// to a reader of the outbox or the endpoint's owner, and is still sent.
func TestCredentialLookingHeaderValuesAreNotShown(t *testing.T) {
	h, logs := newLoggedHarness(t)
	const path = "/v1/namespaces/acme/endpoints/billing"
	secrets := map[string]string{
		"x-jwt":    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJzM2NyM3QifQ.s3cr3t",
		"x-bearer": "Bearer sk_live_s3cr3t",
		"x-gh":     "ghp_s3cr3t",
		"x-stripe": "sk_live_s3cr3t",
		"x-random": "Zq8KvWm3JxT2pL9sNc4Rs3cr3t",
	}
	headers := map[string]string{"x-tenant": "acme"}
	wantShown := map[string]any{"x-tenant": "acme"}
	for n, v := range secrets {
		headers[n] = v
		wantShown[n] = schema.RedactedHeader
	}
	body, err := json.Marshal(map[string]any{"url": "https://billing.example.com/hooks", "headers": headers})
	if err != nil {
		t.Fatal(err)
	}
	created := want(t, h.do(http.MethodPut, path, h.admin(), string(body)), http.StatusCreated, "")
	reader := h.token("acme", httpapi.ScopeOutboxRead)
	got := want(t, h.do(http.MethodGet, path, reader, ""), http.StatusOK, "")
	list := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", reader, ""), http.StatusOK, "")
	eps, _ := list["endpoints"].([]any)
	if len(eps) != 1 {
		t.Fatalf("list: %v", list)
	}
	for name, view := range map[string]map[string]any{"PUT": created, "GET": got, "list": eps[0].(map[string]any)} {
		if !reflect.DeepEqual(view["headers"], wantShown) {
			t.Errorf("%s shows headers %v, want %v", name, view["headers"], wantShown)
		}
		if raw, _ := json.Marshal(view); strings.Contains(string(raw), "s3cr3t") {
			t.Errorf("%s shows a credential: %s", name, raw)
		}
	}
	dump := fmt.Sprint(h.dump())
	for n, v := range secrets {
		if !strings.Contains(dump, v) {
			t.Errorf("%s was not stored", n)
		}
	}
	if strings.Contains(logs.String(), "s3cr3t") {
		t.Fatalf("the log holds a credential:\n%s", logs)
	}
}

func TestRateLimitIsOptionalBoundedAndShown(t *testing.T) {
	h, _ := newLoggedHarness(t)
	path := "/v1/namespaces/acme/endpoints/billing"
	created := want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks", "rate_limit": 50}`), http.StatusCreated, "")
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	for name, view := range map[string]map[string]any{"PUT": created, "GET": got} {
		if view["rate_limit"] != 50.0 {
			t.Errorf("%s shows rate_limit %v, want 50", name, view["rate_limit"])
		}
		if _, ok := view["throttle"]; ok {
			t.Errorf("%s shows a throttle on a stream that never was: %v", name, view["throttle"])
		}
	}
	before := h.dump()
	for _, bad := range []string{`0`, `-1`, `10001`, `2.5`, `"50"`} {
		rec := h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks", "rate_limit": `+bad+`}`)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("rate_limit %s: %d", bad, rec.Code)
			continue
		}
		var p map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if detail, _ := p["detail"].(string); !strings.Contains(detail, "rate_limit") {
			t.Errorf("rate_limit %s: detail %q does not name the field", bad, detail)
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatalf("a refused rate_limit %s changed Redis", bad)
		}
	}
	// Left out, unlimited: the field is absent.
	replaced := want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusOK, "")
	if _, ok := replaced["rate_limit"]; ok {
		t.Errorf("an unlimited endpoint shows rate_limit %v", replaced["rate_limit"])
	}
}

// A throttled stream's endpoint shows its effective limits and why, within
// the endpoint's configuration; an unthrottled one shows none.
func TestTheEndpointShowsItsStreamsThrottle(t *testing.T) {
	h, _ := newLoggedHarness(t)
	path := "/v1/namespaces/acme/endpoints/billing"
	want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks", "rate_limit": 50, "max_in_flight": 8}`), http.StatusCreated, "")
	since := outboxtest.T0 - 5000
	setState := func(th *schema.Throttle) {
		t.Helper()
		all, err := timers.All(context.Background(), h.st, store.Partition{Namespace: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		for _, r := range all {
			if r.Kind == timers.KindOutcomeDelivery {
				b.Delete(r.Key)
			}
		}
		v, err := schema.EncodeDeliveryState(schema.DeliveryState{Throttle: th})
		if err != nil {
			t.Fatal(err)
		}
		b.Put(timers.Key(outboxtest.T0+100, timers.KindOutcomeDelivery, "billing"), timers.EncodeIdle(v))
		if res, err := h.st.Apply(context.Background(), store.Partition{Namespace: "acme"}, b); err != nil || !res.Committed {
			t.Fatalf("put timer: %+v %v", res, err)
		}
	}
	setState(&schema.Throttle{MaxInFlight: 4, RateMilli: 12_500, CeilingMilli: 25_000, Reason: "429", SinceMs: since, DecreasedMs: since, RaisedMs: since})
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	wantThrottle := map[string]any{"max_in_flight": 4.0, "rate_limit": 12.5, "reason": "429", "since": "2025-11-29T23:59:55.000Z"}
	if !reflect.DeepEqual(got["throttle"], wantThrottle) {
		t.Errorf("throttle %v, want %v", got["throttle"], wantThrottle)
	}
	list := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", h.admin(), ""), http.StatusOK, "")
	if eps, _ := list["endpoints"].([]any); len(eps) != 1 || !reflect.DeepEqual(eps[0].(map[string]any)["throttle"], wantThrottle) {
		t.Errorf("list: %v", list)
	}
	// Lowered below what the operator configured since: shown within it.
	want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks", "rate_limit": 10, "max_in_flight": 2}`), http.StatusOK, "")
	setState(&schema.Throttle{MaxInFlight: 1, RateMilli: 12_500, Reason: "timeout", SinceMs: since})
	got = want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if th, _ := got["throttle"].(map[string]any); th["max_in_flight"] != 1.0 || th["rate_limit"] != 10.0 || th["reason"] != "timeout" {
		t.Errorf("throttle within the configuration: %v", got["throttle"])
	}
	// At the configuration, nothing to show.
	setState(&schema.Throttle{MaxInFlight: 2, RateMilli: 10_000, Reason: "503", SinceMs: since})
	got = want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if th, ok := got["throttle"]; ok {
		t.Errorf("throttle at the configuration shown: %v", th)
	}
}
