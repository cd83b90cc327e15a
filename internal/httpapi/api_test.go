package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

const apiAudience = "https://relay.test"

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// harness is the API on one store, with a manual clock and HS256 tokens.
type harness struct {
	t      *testing.T
	h      http.Handler
	st     *redisstore.Store
	client redis.UniversalClient
	prefix string
	clk    *clock.Manual
	woken  atomic.Int64
	reg    *prometheus.Registry
	// metrics are registered with reg.
	metrics *httpapi.Metrics
	// check sees every request and answer: the contract, api/openapi.yaml.
	check func(req *http.Request, body []byte, rec *httptest.ResponseRecorder)
}

type backend struct {
	name string
	open func(t *testing.T) (redis.UniversalClient, string)
}

func backends() []backend {
	return []backend{
		{"miniredis", func(t *testing.T) (redis.UniversalClient, string) {
			m := miniredis.RunT(t)
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			return c, redisstore.DefaultPrefix
		}},
		{"redis", func(t *testing.T) (redis.UniversalClient, string) {
			c := redistest.RealClient(t)
			return c, redistest.Prefix(t, c)
		}},
	}
}

// forEachBackend runs f on miniredis and, when configured, the real Redis.
func forEachBackend(t *testing.T, f func(t *testing.T, h *harness)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			client, prefix := b.open(t)
			f(t, newHarness(t, client, prefix))
		})
	}
}

func newHarness(t *testing.T, client redis.UniversalClient, prefix string) *harness {
	t.Helper()
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: prefix})
	h := newHarnessOn(t, st, apiOptions{ready: st.Check})
	h.st, h.client, h.prefix = st, client, prefix
	return h
}

// apiOptions vary the API a harness serves.
type apiOptions struct {
	ready func(ctx context.Context) error
	// coalesce sends ingest through an outbox.Coalescer, as relay does.
	coalesce bool
	logger   *slog.Logger
	// maxEndpoints and maxNamespaces are the Admin's.
	maxEndpoints, maxNamespaces int
	// configure changes the API's configuration before it is built.
	configure func(*httpapi.Config)
}

// newHarnessOn is the API on any store; the harness's Redis fields are
// left empty.
func newHarnessOn(t *testing.T, st store.NamespaceStore, opts apiOptions) *harness {
	t.Helper()
	clk := clock.NewManual(outboxtest.T0)
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: apiAudience, HS256Secret: testSecret, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := outbound.NewChannel(outbound.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, clk: clk, check: checkContract(t), reg: prometheus.NewRegistry()}
	metrics, err := httpapi.NewMetrics(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	h.metrics = metrics
	var appender httpapi.Appender = &outbox.Appender{Store: st, Clock: clk}
	if opts.coalesce {
		appender = &outbox.Coalescer{Appender: appender.(*outbox.Appender)}
	}
	cfg := httpapi.Config{
		Appender: appender,
		Admin:    &outbox.Admin{Store: st, Clock: clk, Retention: outbox.DefaultRetention, MaxEndpoints: opts.maxEndpoints, MaxNamespaces: opts.maxNamespaces},
		Auth:     auth,
		Wake:     func(store.Partition) { h.woken.Add(1) },
		CheckURL: ch.CheckURL,
		Ready:    opts.ready,
		Clock:    clk,
		Metrics:  metrics,
		Logger:   opts.logger,
	}
	if opts.configure != nil {
		opts.configure(&cfg)
	}
	h.h, err = httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// token mints a token for scopes, bound to ns when it is not empty.
func (h *harness) token(ns string, scopes ...httpapi.Scope) string {
	h.t.Helper()
	tok, err := httpapi.MintHS256(testSecret, apiAudience, "", httpapi.Principal{Subject: "tester", Scopes: scopes, Namespace: ns}, time.Hour, h.clk.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func (h *harness) admin() string { return h.token("", httpapi.ScopeAdmin) }

// do sends a request with a JSON body (none when body is "").
func (h *harness) do(method, path, token, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	return h.doType(method, path, token, "application/json", body)
}

func (h *harness) doType(method, path, token, contentType, body string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, req)
	if h.check != nil {
		again := httptest.NewRequest(method, path, strings.NewReader(body))
		again.Header = req.Header.Clone()
		h.check(again, []byte(body), rec)
	}
	return rec
}

// dump is every key relay keeps in Redis, with its contents.
func (h *harness) dump() map[string]string {
	h.t.Helper()
	d, err := redistest.Dump(context.Background(), h.client, h.prefix)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// want checks an answer's status and, for errors, that it is problem+json
// of the given slug.
func want(t *testing.T, rec *httptest.ResponseRecorder, status int, slug httpapi.Slug) map[string]any {
	t.Helper()
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil && rec.Body.Len() > 0 {
		t.Fatalf("answer is not JSON: %v: %s", err, rec.Body)
	}
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body)
	}
	if slug != "" {
		if ct := rec.Header().Get("Content-Type"); ct != httpapi.ContentTypeProblem {
			t.Fatalf("content type %q, want problem+json", ct)
		}
		if body["type"] != slug.Type() {
			t.Fatalf("problem type %v, want %s: %s", body["type"], slug.Type(), rec.Body)
		}
	}
	return body
}

const committedJSON = `{"reservation_id": "r-7f3a", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000,
 "committed": {"bytes_stored": 1024, "new_to_repo": 512, "new_to_store": 256,
               "refs": [{"name": "refs/heads/main", "new": "` + "abababababababababababababababababababababababababababababababab" + `", "deleted": false}]}}`

func outcomeJSON(rid, kind string) string {
	base := `"reservation_id": "` + rid + `", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, `
	switch kind {
	case "aborted":
		return `{` + base + `"aborted": {"reason": "ref_conflict", "detail": "main moved"}}`
	case "expired":
		return `{` + base + `"expired": {}}`
	case "read_served":
		return `{` + base + `"read_served": {"object": "` + outboxtest.HexA + `", "bytes_served": 42}}`
	}
	return `{` + base + `"committed": {"bytes_stored": 1, "new_to_repo": 1, "new_to_store": 1, "refs": []}}`
}

func (h *harness) putEndpoint(ns, id, body string) map[string]any {
	h.t.Helper()
	rec := h.do(http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+id, h.admin(), body)
	if rec.Code != http.StatusCreated && rec.Code != http.StatusOK {
		h.t.Fatalf("put endpoint: %d %s", rec.Code, rec.Body)
	}
	var v map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &v)
	return v
}
