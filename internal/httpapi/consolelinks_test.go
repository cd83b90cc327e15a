package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

const consoleOrigin = "https://relay.example.com"

// linkHarness is a harness on miniredis whose API mints console links at
// consoleOrigin, logging into the buffer.
func linkHarness(t *testing.T, configure func(*httpapi.Config)) (*harness, *bytes.Buffer) {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix})
	logs := &bytes.Buffer{}
	h := newHarnessOn(t, st, apiOptions{ready: st.Check, logger: slog.New(slog.NewTextHandler(logs, nil)), configure: func(c *httpapi.Config) {
		c.PublicURL = consoleOrigin
		if configure != nil {
			configure(c)
		}
	}})
	h.st, h.client, h.prefix = st, client, redisstore.DefaultPrefix
	return h, logs
}

// mintLink asks for a console link and returns its token, checking the
// link's shape and its expiry.
func mintLink(t *testing.T, h *harness, ns, body string, ttl time.Duration) string {
	t.Helper()
	v := want(t, h.do(http.MethodPost, "/v1/namespaces/"+ns+"/console-links", h.admin(), body), http.StatusCreated, "")
	link, _ := v["url"].(string)
	prefix := consoleOrigin + "/console/#token="
	if !strings.HasPrefix(link, prefix) {
		t.Fatalf("link %q, want it under %s", link, prefix)
	}
	tok, err := url.QueryUnescape(strings.TrimPrefix(link, prefix))
	if err != nil {
		t.Fatal(err)
	}
	if v["namespace"] != ns {
		t.Errorf("namespace %v", v["namespace"])
	}
	if got, want := v["expires_at"], h.clk.Now().Add(ttl).UTC().Format("2006-01-02T15:04:05.000Z07:00"); got != want {
		t.Errorf("expires_at %v, want %s", got, want)
	}
	return tok
}

// A read-only link opens its namespace's pages and nothing else: no other
// namespace, no write, no namespace list; after its time it is refused.
func TestAReadOnlyConsoleLinkReadsItsNamespaceOnly(t *testing.T) {
	h, logs := linkHarness(t, nil)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	h.putEndpoint("other", "billing", `{"url": "https://billing.example.com/hooks"}`)
	tok := mintLink(t, h, "acme", `{"access": "read", "ttl_seconds": 600}`, 10*time.Minute)
	if strings.Contains(logs.String(), tok) {
		t.Error("the minted token is in the log")
	}
	want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", tok, ""), http.StatusOK, "")
	want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes", tok, ""), http.StatusOK, "")
	want(t, h.do(http.MethodGet, "/v1/namespaces/other/endpoints", tok, ""), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodGet, "/v1/namespaces", tok, ""), http.StatusForbidden, httpapi.SlugForbidden)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPut, "/v1/namespaces/acme/endpoints/billing", `{"url": "https://evil.example.com/hooks"}`},
		{http.MethodDelete, "/v1/namespaces/acme/endpoints/billing", ""},
		{http.MethodPost, "/v1/namespaces/acme/outcomes", outcomeJSON("r-1", "aborted")},
		{http.MethodPost, "/v1/namespaces/acme/endpoints/billing/outcomes/r-1/resend", ""},
		{http.MethodPost, "/v1/namespaces/acme/console-links", `{"access": "write"}`},
		{http.MethodDelete, "/v1/namespaces/acme/outcomes/r-1", ""},
	} {
		want(t, h.do(c.method, c.path, tok, c.body), http.StatusForbidden, httpapi.SlugForbidden)
	}
	v := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing", h.admin(), ""), http.StatusOK, "")
	if v["url"] != "https://billing.example.com/hooks" {
		t.Errorf("the endpoint changed: %v", v["url"])
	}
	h.clk.Advance(10*time.Minute + httpapi.MaxLeeway + time.Second)
	want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", tok, ""), http.StatusUnauthorized, httpapi.SlugUnauthorized)
}

// A link with writes may act in its namespace, and still in no other.
func TestAConsoleLinkWithWritesActsInItsNamespaceOnly(t *testing.T) {
	h, _ := linkHarness(t, nil)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	h.putEndpoint("other", "billing", `{"url": "https://billing.example.com/hooks"}`)
	tok := mintLink(t, h, "acme", `{"access": "write"}`, httpapi.DefaultConsoleLinkTTL)
	want(t, h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/audit", tok, `{"url": "https://audit.example.com/hooks"}`), http.StatusCreated, "")
	want(t, h.do(http.MethodPut, "/v1/namespaces/other/endpoints/audit", tok, `{"url": "https://audit.example.com/hooks"}`), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodGet, "/v1/namespaces", tok, ""), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodPost, "/v1/namespaces/other/console-links", tok, `{"access": "write"}`), http.StatusForbidden, httpapi.SlugForbidden)
}

// Only an admin token of the namespace may ask for a link, and bad input
// is refused with no link made.
func TestAConsoleLinkIsRefusedBadInputAndOtherTenants(t *testing.T) {
	h, logs := linkHarness(t, nil)
	const path = "/v1/namespaces/acme/console-links"
	for _, body := range []string{
		`{}`, `{"access": "admin"}`, `{"access": "read", "ttl_seconds": 59}`, `{"access": "read", "ttl_seconds": 604801}`,
		`{"access": "read", "ttl_seconds": -1}`, `{"access": "read", "namespace": "other"}`, `{"access": null}`, `{"access": "read", "ttl_seconds": "60"}`, `[]`,
	} {
		want(t, h.do(http.MethodPost, path, h.admin(), body), http.StatusBadRequest, "")
	}
	want(t, h.do(http.MethodPost, path, h.token("acme", httpapi.ScopeOutboxRead), `{"access": "read"}`), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodPost, path, h.token("acme", httpapi.ScopeEndpointsWrite), `{"access": "read"}`), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodPost, path, h.token("other", httpapi.ScopeAdmin), `{"access": "read"}`), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodPost, path, "", `{"access": "read"}`), http.StatusUnauthorized, httpapi.SlugUnauthorized)
	want(t, h.do(http.MethodPost, "/v1/namespaces/Bad!/console-links", h.admin(), `{"access": "read"}`), http.StatusBadRequest, httpapi.SlugInvalidRequest)
	if strings.Contains(logs.String(), "console link minted") {
		t.Error("a refused request minted a link")
	}
	// A namespace-bound admin may hand out its own namespace's pages.
	want(t, h.do(http.MethodPost, path, h.token("acme", httpapi.ScopeAdmin), `{"access": "read"}`), http.StatusCreated, "")
}

// A relay that verifies with public keys alone holds no secret to sign a
// link with, and says what to do instead.
func TestARelayWithPublicKeysOnlyCannotMintALink(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var h *harness
	h, _ = linkHarness(t, func(c *httpapi.Config) {
		auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: apiAudience, EdDSAKeys: []httpapi.EdDSAKey{{Key: pub}}, Now: c.Clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		c.Auth = auth
	})
	admin, err := httpapi.MintEdDSA(priv, "", apiAudience, "", httpapi.Principal{Subject: "tester", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, h.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	v := want(t, h.do(http.MethodPost, "/v1/namespaces/acme/console-links", admin, `{"access": "read"}`), http.StatusConflict, httpapi.SlugCannotMint)
	if d, _ := v["detail"].(string); !strings.Contains(d, "relay token --key") {
		t.Errorf("detail %q says nothing of what to do", d)
	}
}
