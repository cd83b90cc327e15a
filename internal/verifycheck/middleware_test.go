package verifycheck_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
)

// echo answers 200 with the body it was given.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil || int64(len(b)) != r.ContentLength {
		http.Error(w, "body not restored", http.StatusTeapot)
		return
	}
	_, _ = w.Write(b)
})

func serve(h http.Handler, header http.Header, target, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

func TestMiddlewarePassesVerifiedRequestWithItsBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := hookverify.Middleware(b.v, echo)
	rec := serve(h, b.sign(t, body), "/in?x=1", body)
	if rec.Code != http.StatusOK || rec.Body.String() != body {
		t.Errorf("got %d %q, want 200 and the body", rec.Code, rec.Body.String())
	}
	now := t0
	std := hookverify.Middleware(standardVerifier(&now, secret(1)), echo)
	rec = serve(std, signStandard(t, []string{secret(1)}, body, t0), "/in", body)
	if rec.Code != http.StatusOK || rec.Body.String() != body {
		t.Errorf("standard: got %d %q", rec.Code, rec.Body.String())
	}
}

func TestMiddlewareAnswers401WithoutCallingNext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	called := false
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true })
	var hooked error
	h := hookverify.Middleware(b.v, next, hookverify.WithErrorHook(func(_ *http.Request, err error) { hooked = err }))

	header := b.sign(t, body)
	rec := serve(h, header, "/in", body+"x")
	if rec.Code != http.StatusUnauthorized || called {
		t.Errorf("changed body: %d, next called %v", rec.Code, called)
	}
	if !strings.Contains(rec.Body.String(), "digest") || strings.Contains(rec.Body.String(), header.Get("X-Mkit-Hook-Signature")) {
		t.Errorf("reason %q", rec.Body.String())
	}
	if !errors.Is(hooked, hookverify.ErrDigest) {
		t.Errorf("error hook got %v", hooked)
	}
	if rec := serve(h, nil, "/in", body); rec.Code != http.StatusUnauthorized || called {
		t.Errorf("unsigned: %d", rec.Code)
	}
	if rec := serve(h, b.sign(t, body), "/elsewhere", body); rec.Code != http.StatusUnauthorized || called {
		t.Errorf("other path: %d", rec.Code)
	}
}

func TestMiddlewareRefusesLargeBodiesWith413(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := hookverify.Middleware(b.v, echo, hookverify.WithMaxBody(int64(len(body))))
	if rec := serve(h, b.sign(t, body), "/in", body); rec.Code != http.StatusOK {
		t.Errorf("body at the limit: %d", rec.Code)
	}
	big := body + " "
	if rec := serve(h, b.sign(t, big), "/in", big); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("declared length over the limit: %d", rec.Code)
	}
	// A declared length over the limit is refused before any read.
	var read countingReader
	r := httptest.NewRequest(http.MethodPost, "/in", &read)
	r.ContentLength = 10 << 20
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusRequestEntityTooLarge || read.n != 0 {
		t.Errorf("declared 10 MiB: %d after reading %d bytes", rec.Code, read.n)
	}
	// Without a declared length (chunked), the read is cut at the limit.
	r = httptest.NewRequest(http.MethodPost, "/in", io.MultiReader(strings.NewReader(big)))
	r.ContentLength = -1
	for k, v := range b.sign(t, big) {
		r.Header[k] = v
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("undeclared length over the limit: %d", rec.Code)
	}
}

func TestMiddlewareMapsCapacityAndConfigErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.v.Nonces = hookverify.NewNonceCache(1, func() time.Time { return b.now })
	h := hookverify.Middleware(b.v, echo)
	if rec := serve(h, b.sign(t, body), "/in", body); rec.Code != http.StatusOK {
		t.Fatalf("first: %d", rec.Code)
	}
	if rec := serve(h, b.sign(t, body), "/in", body); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("nonce cache full: %d, want 503", rec.Code)
	}
	b.v.Audience = "not a url"
	rec := serve(h, b.sign(t, body), "/in", body)
	if rec.Code != http.StatusInternalServerError || strings.Contains(rec.Body.String(), "not a url") {
		t.Errorf("misconfigured: %d %q", rec.Code, rec.Body.String())
	}
}

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// NewMiddleware has the shape routers' Use takes; each handler it wraps
// keeps its own next, and the options hold for every one.
func TestNewMiddlewareWrapsEachHandlerItIsGiven(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var use func(http.Handler) http.Handler = hookverify.NewMiddleware(b.v, hookverify.WithMaxBody(int64(len(body))))
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, _ := io.ReadAll(r.Body)
			_, _ = io.WriteString(w, name+" "+string(got))
		})
	}
	a, c := use(named("a")), use(named("c"))
	if rec := serve(a, b.sign(t, body), "/in", body); rec.Code != http.StatusOK || rec.Body.String() != "a "+body {
		t.Errorf("a: %d %q", rec.Code, rec.Body.String())
	}
	if rec := serve(c, b.sign(t, body), "/in", body); rec.Code != http.StatusOK || rec.Body.String() != "c "+body {
		t.Errorf("c: %d %q", rec.Code, rec.Body.String())
	}
	if rec := serve(c, b.sign(t, body+" "), "/in", body+" "); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: %d, want 413", rec.Code)
	}
	if rec := serve(a, nil, "/in", body); rec.Code != http.StatusUnauthorized {
		t.Errorf("unsigned: %d, want 401", rec.Code)
	}
}
