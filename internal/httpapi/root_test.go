package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/console"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

// A browser pointed at relay's root is sent to the console; every other
// unknown path is still the API's problem+json 404, and without a console
// the root is one of them.
func TestRootLeadsToTheConsole(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix})
	with := newHarnessOn(t, st, apiOptions{ready: st.Check, configure: func(c *httpapi.Config) { c.Console = console.Handler() }})
	without := newHarnessOn(t, st, apiOptions{ready: st.Check})
	serve := func(h *harness, method, path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		return rec
	}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		rec := serve(with, method, "/")
		if rec.Code != http.StatusFound || rec.Header().Get("Location") != console.Prefix {
			t.Errorf("%s /: %d to %q, want 302 to %s", method, rec.Code, rec.Header().Get("Location"), console.Prefix)
		}
	}
	for _, path := range []string{"/nothing", "/index.html", "/v1"} {
		want(t, serve(with, http.MethodGet, path), http.StatusNotFound, httpapi.SlugNotFound)
	}
	want(t, serve(without, http.MethodGet, "/"), http.StatusNotFound, httpapi.SlugNotFound)
	// A write to the root is no page to lead to.
	want(t, serve(with, http.MethodPost, "/"), http.StatusMethodNotAllowed, httpapi.SlugMethodNotAllowed)
}
