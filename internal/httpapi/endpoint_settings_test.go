package httpapi_test

import (
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
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/testlog"
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
