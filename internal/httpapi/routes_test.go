package httpapi_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/hookrelay/relay/internal/httpapi"
)

const outcomesPath = "/v1/namespaces/acme/outcomes"

func results(t *testing.T, body map[string]any) []string {
	t.Helper()
	rs, _ := body["results"].([]any)
	var out []string
	for _, r := range rs {
		m := r.(map[string]any)
		out = append(out, fmt.Sprint(m["reservation_id"], "=", m["status"]))
	}
	return out
}

func TestIngestAnswersAcceptedDuplicateConflictAndNoEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		tok := h.token("", httpapi.ScopeOutcomesWrite)
		want(t, h.do(http.MethodPost, outcomesPath, tok, committedJSON), http.StatusUnprocessableEntity, httpapi.SlugNoEndpoint)

		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "kinds": ["committed", "aborted"]}`)
		body := want(t, h.do(http.MethodPost, outcomesPath, tok, committedJSON), http.StatusAccepted, "")
		if got := results(t, body); !reflect.DeepEqual(got, []string{"r-7f3a=accepted"}) {
			t.Fatalf("results %v", got)
		}
		if h.woken.Load() == 0 {
			t.Fatal("an accepted outcome must wake the delivery driver")
		}
		body = want(t, h.do(http.MethodPost, outcomesPath, tok, committedJSON), http.StatusAccepted, "")
		if got := results(t, body); !reflect.DeepEqual(got, []string{"r-7f3a=duplicate"}) {
			t.Fatalf("results %v", got)
		}
		want(t, h.do(http.MethodPost, outcomesPath, tok, outcomeJSON("r-7f3a", "aborted")), http.StatusConflict, httpapi.SlugConflict)
		// The filter takes no expired outcomes.
		want(t, h.do(http.MethodPost, outcomesPath, tok, outcomeJSON("r-exp", "expired")), http.StatusUnprocessableEntity, httpapi.SlugNoEndpoint)

		list := `{"outcomes": [` + strings.Join([]string{
			outcomeJSON("b-1", "committed"), committedJSON, outcomeJSON("r-7f3a", "aborted"),
			outcomeJSON("b-2", "expired"), outcomeJSON("b-3", "aborted"),
		}, ",") + `]}`
		body = want(t, h.do(http.MethodPost, outcomesPath, tok, list), http.StatusAccepted, "")
		wantResults := []string{"b-1=accepted", "r-7f3a=duplicate", "r-7f3a=conflict", "b-2=no_endpoint", "b-3=accepted"}
		if got := results(t, body); !reflect.DeepEqual(got, wantResults) {
			t.Fatalf("list results %v, want %v", got, wantResults)
		}
		conflict := body["results"].([]any)[2].(map[string]any)
		if conflict["type"] != httpapi.SlugConflict.Type() {
			t.Fatalf("a conflicting item carries its problem type: %v", conflict)
		}

		// Every kind is accepted.
		h.putEndpoint("acme", "all", `{"url": "https://all.example.com/hooks"}`)
		for _, kind := range []string{"committed", "aborted", "expired", "read_served"} {
			want(t, h.do(http.MethodPost, outcomesPath, tok, outcomeJSON("k-"+kind, kind)), http.StatusAccepted, "")
		}
	})
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("seed", "committed")), http.StatusAccepted, "")
		before := h.dump()
		tok := h.admin()
		valid := outcomeJSON("r-new", "committed")
		big := `{"reservation_id": "r-big", "repository": "` + strings.Repeat("a", 1<<20) + `"}`
		cases := []struct {
			name, method, path, ctype, body string
			status                          int
			slug                            httpapi.Slug
		}{
			{"oversized body", "POST", outcomesPath, "application/json", big, 413, httpapi.SlugBodyTooLarge},
			{"unknown field", "POST", outcomesPath, "application/json", strings.Replace(valid, `"repository"`, `"colour": 1, "repository"`, 1), 400, httpapi.SlugInvalidRequest},
			{"unknown nested field", "POST", outcomesPath, "application/json", strings.Replace(valid, `"bytes_stored"`, `"bytes": 1, "bytes_stored"`, 1), 400, httpapi.SlugInvalidRequest},
			{"duplicate key", "POST", outcomesPath, "application/json", strings.Replace(valid, `"repository"`, `"repository": "x", "repository"`, 1), 400, httpapi.SlugInvalidRequest},
			{"duplicate nested key", "POST", outcomesPath, "application/json", strings.Replace(valid, `"new_to_repo": 1`, `"new_to_repo": 1, "new_to_repo": 2`, 1), 400, httpapi.SlugInvalidRequest},
			{"trailing data", "POST", outcomesPath, "application/json", valid + ` {}`, 400, httpapi.SlugInvalidRequest},
			{"trailing garbage", "POST", outcomesPath, "application/json", valid + `x`, 400, httpapi.SlugInvalidRequest},
			{"not JSON", "POST", outcomesPath, "application/json", `{"reservation_id": `, 400, httpapi.SlugInvalidRequest},
			{"string for a number", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `"1764460800000"`, 1), 400, httpapi.SlugInvalidRequest},
			{"fraction for an integer", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `1764460800000.5`, 1), 400, httpapi.SlugInvalidRequest},
			{"negative count", "POST", outcomesPath, "application/json", strings.Replace(valid, `"bytes_stored": 1`, `"bytes_stored": -1`, 1), 400, httpapi.SlugInvalidRequest},
			{"invalid UTF-8 in repository", "POST", outcomesPath, "application/json", strings.Replace(valid, "acme/widgets", "acme/\xff", 1), 400, httpapi.SlugInvalidRequest},
			{"lone surrogate in detail", "POST", outcomesPath, "application/json", strings.Replace(outcomeJSON("r-1", "aborted"), "main moved", `main \ud800 moved`, 1), 400, httpapi.SlugInvalidRequest},
			{"CESU-8 in a list", "POST", outcomesPath, "application/json", `{"outcomes": [` + strings.Replace(valid, "acme/widgets", "\xed\xa0\xbd\xed\xb2\xa9", 1) + `]}`, 400, httpapi.SlugInvalidRequest},
			{"array body", "POST", outcomesPath, "application/json", `[` + valid + `]`, 400, httpapi.SlugInvalidRequest},
			{"bad reservation id", "POST", outcomesPath, "application/json", outcomeJSON("r 1", "committed"), 400, httpapi.SlugInvalidOutcome},
			{"long reservation id", "POST", outcomesPath, "application/json", outcomeJSON(strings.Repeat("r", 129), "committed"), 400, httpapi.SlugInvalidOutcome},
			{"two kinds", "POST", outcomesPath, "application/json", strings.Replace(valid, `"committed"`, `"expired": {}, "committed"`, 1), 400, httpapi.SlugInvalidOutcome},
			{"no kind", "POST", outcomesPath, "application/json", `{"reservation_id": "r-1", "repository": "a", "occurred_unix_ms": 1}`, 400, httpapi.SlugInvalidOutcome},
			{"empty repository", "POST", outcomesPath, "application/json", strings.Replace(valid, `"acme/widgets"`, `""`, 1), 400, httpapi.SlugInvalidOutcome},
			{"zero time", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `0`, 1), 400, httpapi.SlugInvalidOutcome},
			{"time in microseconds", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `1764460800000000`, 1), 400, httpapi.SlugInvalidOutcome},
			{"time in year 10000", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `253402300800000`, 1), 400, httpapi.SlugInvalidOutcome},
			{"time past the clock's bound", "POST", outcomesPath, "application/json", strings.Replace(valid, `1764460800000`, `1764461100001`, 1), 400, httpapi.SlugInvalidOutcome},
			{"detail over 512 bytes", "POST", outcomesPath, "application/json", strings.Replace(outcomeJSON("r-1", "aborted"), "main moved", strings.Repeat("d", 513), 1), 400, httpapi.SlugInvalidOutcome},
			{"bad reason", "POST", outcomesPath, "application/json", strings.Replace(outcomeJSON("r-1", "aborted"), "ref_conflict", "Ref Conflict", 1), 400, httpapi.SlugInvalidOutcome},
			{"short hex target", "POST", outcomesPath, "application/json", strings.Replace(outcomeJSON("r-1", "read_served"), `"object": "ab`, `"object": "`, 1), 400, httpapi.SlugInvalidOutcome},
			{"upper-case hex target", "POST", outcomesPath, "application/json", strings.Replace(committedJSON, "abab", "ABAB", 1), 400, httpapi.SlugInvalidOutcome},
			{"an operator event's id", "POST", outcomesPath, "application/json", outcomeJSON("relay.endpoint.disabled.x.1", "committed"), 400, httpapi.SlugInvalidOutcome},
			{"an operator event", "POST", outcomesPath, "application/json", `{"reservation_id": "relay.endpoint.disabled.x.1", "occurred_unix_ms": 1764460800000, "event": {"type": "endpoint.disabled", "endpoint": "x", "reason": "failing"}}`, 400, httpapi.SlugInvalidOutcome},
			{"an outcome carrying an event", "POST", outcomesPath, "application/json", strings.Replace(valid, `"repository"`, `"event": {"type": "endpoint.gone", "endpoint": "x"}, "repository"`, 1), 400, httpapi.SlugInvalidOutcome},
			{"endpoint: unknown event kind", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "kinds": ["relay.endpoint.exploded"]}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: event kind pattern", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "kinds": ["relay.endpoint.*"]}`, 400, httpapi.SlugInvalidEndpoint},
			{"synthetic reservation id", "POST", outcomesPath, "application/json", outcomeJSON("s:local", "committed"), 400, httpapi.SlugInvalidOutcome},
			{"list with a synthetic reservation id", "POST", outcomesPath, "application/json", `{"outcomes": [` + valid + `,` + outcomeJSON("s:x", "expired") + `]}`, 400, httpapi.SlugInvalidOutcome},
			{"list with one invalid item", "POST", outcomesPath, "application/json", `{"outcomes": [` + valid + `,` + outcomeJSON("bad id", "expired") + `]}`, 400, httpapi.SlugInvalidOutcome},
			{"empty list", "POST", outcomesPath, "application/json", `{"outcomes": []}`, 400, httpapi.SlugInvalidRequest},
			{"list of 101", "POST", outcomesPath, "application/json", `{"outcomes": [` + strings.TrimSuffix(strings.Repeat(valid+",", 101), ",") + `]}`, 400, httpapi.SlugInvalidRequest},
			{"list beside an outcome", "POST", outcomesPath, "application/json", strings.Replace(valid, `"repository"`, `"outcomes": [], "repository"`, 1), 400, httpapi.SlugInvalidRequest},
			{"wrong content type", "POST", outcomesPath, "text/plain", valid, 415, httpapi.SlugUnsupportedMediaType},
			{"no content type", "POST", outcomesPath, "", valid, 415, httpapi.SlugUnsupportedMediaType},
			{"bad namespace", "POST", "/v1/namespaces/Acme/outcomes", "application/json", valid, 400, httpapi.SlugInvalidRequest},
			{"bad endpoint id", "PUT", "/v1/namespaces/acme/endpoints/-x", "application/json", `{"url": "https://a.example.com/"}`, 400, httpapi.SlugInvalidRequest},
			{"endpoint: unknown scheme", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "scheme": "hmac"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: max_in_flight 0", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "max_in_flight": 0}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: max_in_flight 17", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "max_in_flight": 17}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: unknown kind", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "kinds": ["deleted"]}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: no url", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"scheme": "mkit-hook-v2"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: plain http", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "http://a.example.com/"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: private address", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://10.0.0.8/hook"}`, 422, httpapi.SlugUnsafeURL},
			{"endpoint: metadata address", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://169.254.169.254/latest"}`, 422, httpapi.SlugUnsafeURL},
			{"endpoint: secret for mkit", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "secret": "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: bad secret", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "scheme": "standard-webhooks", "secret": "hunter2"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: overlong UTF-8 in url", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", "{\"url\": \"https://a.example.com/\xc0\xaf\"}", 400, httpapi.SlugInvalidRequest},
			{"endpoint: a request line in the url", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/w?q=x HTTP/1.0 y"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: not ASCII in the url's query", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/w?q=é"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: a bad escape in the url", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/w?q=%zz"}`, 400, httpapi.SlugInvalidEndpoint},
			{"endpoint: enabled as a string", "PUT", "/v1/namespaces/acme/endpoints/x", "application/json", `{"url": "https://a.example.com/", "enabled": "yes"}`, 400, httpapi.SlugInvalidRequest},
			{"delete: bad force", "DELETE", "/v1/namespaces/acme/endpoints/billing?force=maybe", "", "", 400, httpapi.SlugInvalidRequest},
			{"delete: a bad escape in force", "DELETE", "/v1/namespaces/acme/endpoints/billing?force=tr%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"namespaces: a bad escape in failing", "GET", "/v1/namespaces?failing=tru%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"namespaces: a bad escape in cursor", "GET", "/v1/namespaces?cursor=%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"namespaces: a bad escape in limit", "GET", "/v1/namespaces?limit=1%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"outcomes: a bad escape in state", "GET", "/v1/namespaces/acme/outcomes?state=pending%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"outcomes: a semicolon", "GET", "/v1/namespaces/acme/outcomes?limit=1;state=x", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: a bad escape in limit", "GET", "/v1/namespaces/acme/outbox?endpoint=billing&limit=1%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: a bad escape in cursor", "GET", "/v1/namespaces/acme/outbox?endpoint=billing&cursor=%zz", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: no endpoint", "GET", "/v1/namespaces/acme/outbox", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: bad limit", "GET", "/v1/namespaces/acme/outbox?endpoint=billing&limit=101", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: bad cursor", "GET", "/v1/namespaces/acme/outbox?endpoint=billing&cursor=!!", "", "", 400, httpapi.SlugInvalidRequest},
			{"outbox: foreign cursor", "GET", "/v1/namespaces/acme/outbox?endpoint=billing&cursor=ZQ", "", "", 400, httpapi.SlugInvalidRequest},
			{"replay: bad rid", "POST", "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r%20x/replay", "", "", 400, httpapi.SlugInvalidRequest},
			{"replay: synthetic rid", "POST", "/v1/admin/namespaces/acme/endpoints/billing/outcomes/s:local/replay", "", "", 400, httpapi.SlugInvalidRequest},
			{"replay: unknown row", "POST", "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r-none/replay", "", "", 404, httpapi.SlugNotPending},
			{"unknown route", "GET", "/v1/nothing", "", "", 404, httpapi.SlugNotFound},
			{"wrong method", "PATCH", "/v1/namespaces/acme/endpoints/billing", "application/json", `{}`, 405, httpapi.SlugMethodNotAllowed},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				rec := h.doType(c.method, c.path, tok, c.ctype, c.body)
				body := want(t, rec, c.status, c.slug)
				if detail, _ := body["detail"].(string); strings.Contains(detail, "acme/widgets") || strings.Contains(detail, "main moved") {
					t.Fatalf("a problem echoes a payload value: %q", detail)
				}
				if got := h.dump(); !reflect.DeepEqual(before, got) {
					t.Fatalf("a refused request changed Redis")
				}
			})
		}
	})
}

func TestEndpointLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		tok := h.token("acme", httpapi.ScopeEndpointsWrite)
		path := "/v1/namespaces/acme/endpoints/billing"
		rec := h.do(http.MethodPut, path, tok, `{"url": "https://billing.example.com/hooks", "scheme": "standard-webhooks", "kinds": ["committed"], "max_in_flight": 4}`)
		created := want(t, rec, http.StatusCreated, "")
		secret, _ := created["secret"].(string)
		if !strings.HasPrefix(secret, "whsec_") || created["max_in_flight"] != 4.0 || created["enabled"] != true {
			t.Fatalf("created endpoint: %v", created)
		}
		got := want(t, h.do(http.MethodGet, path, tok, ""), http.StatusOK, "")
		if _, shown := got["secret"]; shown || strings.Contains(fmt.Sprint(got), secret) {
			t.Fatal("the secret is shown only once")
		}
		replaced := want(t, h.do(http.MethodPut, path, tok, `{"url": "https://billing.example.com/v2", "scheme": "standard-webhooks"}`), http.StatusOK, "")
		if _, shown := replaced["secret"]; shown || replaced["url"] != "https://billing.example.com/v2" {
			t.Fatalf("replace: %v", replaced)
		}
		list := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", tok, ""), http.StatusOK, "")
		if eps := list["endpoints"].([]any); len(eps) != 1 || eps[0].(map[string]any)["id"] != "billing" {
			t.Fatalf("list: %v", list)
		}

		ingest := h.token("acme", httpapi.ScopeOutcomesWrite)
		for i := range 3 {
			want(t, h.do(http.MethodPost, outcomesPath, ingest, outcomeJSON(fmt.Sprintf("r-%d", i), "committed")), http.StatusAccepted, "")
		}
		refused := want(t, h.do(http.MethodDelete, path, tok, ""), http.StatusConflict, httpapi.SlugEndpointHasBacklog)
		if refused["backlog_rows"] != 3.0 {
			t.Fatalf("refusal says how many rows wait: %v", refused)
		}
		deleted := want(t, h.do(http.MethodDelete, path+"?force=true", tok, ""), http.StatusOK, "")
		if deleted["dropped_rows"] != 3.0 {
			t.Fatalf("forced delete: %v", deleted)
		}
		want(t, h.do(http.MethodGet, path, tok, ""), http.StatusNotFound, httpapi.SlugNotFound)
		want(t, h.do(http.MethodDelete, path, tok, ""), http.StatusNotFound, httpapi.SlugNotFound)
	})
}

func TestOutboxShowsPendingRowsAndReplayPullsOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		for i := range 3 {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(fmt.Sprintf("r-%d", i), "committed")), http.StatusAccepted, "")
		}
		reader := h.token("acme", httpapi.ScopeOutboxRead)
		page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing&limit=2", reader, ""), http.StatusOK, "")
		rows := page["rows"].([]any)
		if len(rows) != 2 || page["next_cursor"] == nil || page["backlog"].(map[string]any)["rows"] != 3.0 || page["state"] != "due" {
			t.Fatalf("first page: %v", page)
		}
		next := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing&limit=2&cursor="+page["next_cursor"].(string), reader, ""), http.StatusOK, "")
		if rows := next["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "r-2" || next["next_cursor"] != nil {
			t.Fatalf("second page: %v", next)
		}

		want(t, h.do(http.MethodPost, "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r-1/replay", reader, ""), http.StatusForbidden, httpapi.SlugForbidden)
		woken := h.woken.Load()
		res := want(t, h.do(http.MethodPost, "/v1/admin/namespaces/acme/endpoints/billing/outcomes/r-1/replay", h.admin(), ""), http.StatusAccepted, "")
		// The endpoint's creation fenced the sequence (moved it to 1): r-1 is 2.
		if res["sequence"] != 2.0 || h.woken.Load() == woken {
			t.Fatalf("replay: %v, woken %d", res, h.woken.Load())
		}
		want(t, h.do(http.MethodPost, "/v1/admin/namespaces/acme/endpoints/nobody/outcomes/r-1/replay", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
	})
}

func TestHealthAndReadiness(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		for _, path := range []string{"/healthz", "/readyz"} {
			rec := h.do(http.MethodGet, path, "", "")
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
			}
		}
		rec := h.do(http.MethodGet, "/healthz", "", "")
		if rec.Header().Get("X-Request-Id") == "" {
			t.Fatal("every answer carries a request id")
		}
		var v any
		if json.Unmarshal(rec.Body.Bytes(), &v) == nil {
			t.Fatal("healthz is plain text")
		}
	})
}

func TestRefusedTokensWriteNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		now := h.clk.Now()
		claims := func(mod map[string]any) jwt.MapClaims {
			c := jwt.MapClaims{"sub": "ci", "aud": apiAudience, "exp": now.Add(time.Hour).Unix(), "scope": "outcomes:write"}
			for k, v := range mod {
				if v == nil {
					delete(c, k)
				} else {
					c[k] = v
				}
			}
			return c
		}
		hs := func(c jwt.MapClaims) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(testSecret)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		enc := base64.RawURLEncoding
		payload, _ := json.Marshal(claims(nil))
		cases := []struct {
			name, token string
			status      int
		}{
			{"no token", "", 401},
			{"expired", hs(claims(map[string]any{"exp": now.Add(-time.Hour).Unix()})), 401},
			{"exp missing", hs(claims(map[string]any{"exp": nil})), 401},
			{"exp 0", hs(claims(map[string]any{"exp": 0})), 401},
			{"wrong aud", hs(claims(map[string]any{"aud": "https://other.example.com"})), 401},
			{"alg none", enc.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc.EncodeToString(payload) + ".", 401},
			{"signed with another secret", func() string {
				s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims(nil)).SignedString([]byte(strings.Repeat("x", 32)))
				return s
			}(), 401},
			{"1 MiB token", strings.Repeat("a", 1<<20), 401},
			{"wrong scope", h.token("", httpapi.ScopeOutboxRead), 403},
			{"bound to another namespace", h.token("other", httpapi.ScopeOutcomesWrite), 403},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				slug := httpapi.SlugUnauthorized
				if c.status == 403 {
					slug = httpapi.SlugForbidden
				}
				want(t, h.do(http.MethodPost, outcomesPath, c.token, outcomeJSON("r-1", "committed")), c.status, slug)
				if !reflect.DeepEqual(before, h.dump()) {
					t.Fatal("a refused token changed Redis")
				}
			})
		}
	})
}

func TestAnHS256TokenSignedWithTheEdDSAPublicKeyIsRefused(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: apiAudience, EdDSAKeys: []httpapi.EdDSAKey{{Key: pub}}})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "attacker", "aud": apiAudience, "exp": time.Now().Add(time.Hour).Unix(), "scope": "admin",
	}).SignedString([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Verify(forged); err == nil {
		t.Fatal("an HS256 token keyed with the public key was accepted")
	}
}

func TestMetricsCountRequestsByRouteAndOutcomesByStatus(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		tok := h.token("", httpapi.ScopeOutcomesWrite)
		list := `{"outcomes": [` + outcomeJSON("m-1", "committed") + `,` + outcomeJSON("m-2", "aborted") + `,` + outcomeJSON("m-1", "committed") + `]}`
		want(t, h.do(http.MethodPost, outcomesPath, tok, list), http.StatusAccepted, "")
		want(t, h.do(http.MethodPost, outcomesPath, "", list), http.StatusUnauthorized, httpapi.SlugUnauthorized)
		count := func(name string, labels ...string) float64 {
			mfs, err := h.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != name {
					continue
				}
			metrics:
				for _, m := range mf.GetMetric() {
					for i := 0; i < len(labels); i += 2 {
						found := false
						for _, lp := range m.GetLabel() {
							found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
						}
						if !found {
							continue metrics
						}
					}
					return m.GetCounter().GetValue()
				}
			}
			return 0
		}
		if got := count("relay_outcomes_total", "status", "accepted"); got != 2 {
			t.Fatalf("accepted outcomes %v, want 2", got)
		}
		if got := count("relay_outcomes_total", "status", "duplicate"); got != 1 {
			t.Fatalf("duplicate outcomes %v, want 1", got)
		}
		if got := count("relay_http_requests_total", "route", "/v1/namespaces/{ns}/outcomes", "code", "202"); got != 1 {
			t.Fatalf("202 answers %v, want 1", got)
		}
		if got := count("relay_http_requests_total", "route", "/v1/namespaces/{ns}/outcomes", "code", "401"); got != 1 {
			t.Fatalf("401 answers %v, want 1", got)
		}
	})
}
