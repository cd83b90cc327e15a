package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// countingHook counts the commands a client sends, a pipeline's each, a
// script call as one.
type countingHook struct{ n atomic.Int64 }

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// consoleNamespaces is how many namespaces the console's pages are
// measured with, and consolePending the pending rows of each (300,000 in
// all).
const (
	consoleNamespaces = 10_000
	consolePending    = 30
)

// BenchmarkConsolePages is the API calls behind each console page, as the
// page makes them, with 10,000 namespaces of one endpoint and 30 pending
// outcomes each: the namespaces page (one page of 100 and the failing ones
// among 1000), a namespace's page, a stream's and an outcome's. It reports
// the API calls and the commands relay sends Redis per view (a script
// call as one) and, on miniredis, the commands the server runs (a
// script's own calls included). The redis case runs with
// RELAY_TEST_REDIS_URL.
func BenchmarkConsolePages(b *testing.B) {
	b.Run("miniredis", func(b *testing.B) {
		m := miniredis.RunT(b)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		benchConsolePages(b, c, redisstore.DefaultPrefix, m)
	})
	b.Run("redis", func(b *testing.B) {
		c := redistest.RealClient(b)
		benchConsolePages(b, c, redistest.Prefix(b, c), nil)
	})
}

func benchConsolePages(b *testing.B, c *redis.Client, prefix string, m *miniredis.Miniredis) {
	sent := &countingHook{}
	c.AddHook(sent)
	st := redistest.NewStore(b, c, redisstore.Options{Prefix: prefix})
	clk := clock.NewManual(outboxtest.T0)
	admin := &outbox.Admin{Store: st, Clock: clk}
	app := &outbox.Appender{Store: st, Clock: clk}
	// Set up 64 at once: setting up is not what is measured. One in ten
	// endpoints is disabled, so the failing list has some to find.
	var wg sync.WaitGroup
	work := make(chan int)
	errs := make(chan error, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := store.Partition{Namespace: fmt.Sprintf("ns-%05d", i)}
				spec := outbox.EndpointSpec{URL: "https://hooks.example.com/" + p.Namespace, Enabled: i%10 != 0}
				if _, err := admin.PutEndpoint(b.Context(), p, "billing", spec); err != nil {
					errs <- err
					return
				}
				os := make([]schema.Outcome, consolePending)
				for j := range os {
					os[j] = outboxtest.Committed(fmt.Sprintf("r-%05d-%02d", i, j))
				}
				if _, err := app.Append(b.Context(), p, os); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range consoleNamespaces {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: apiAudience, HS256Secret: testSecret, Now: clk.Now})
	if err != nil {
		b.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{Appender: app, Admin: admin, Auth: auth, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := httpapi.MintHS256(testSecret, apiAudience, "", httpapi.Principal{Subject: "console", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, clk.Now())
	if err != nil {
		b.Fatal(err)
	}
	get := func(target string) map[string]any {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d %s", target, rec.Code, rec.Body)
		}
		var v map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
			b.Fatal(err)
		}
		return v
	}
	ns := "/v1/namespaces/ns-00042"
	// Each page's calls, as pages.js makes them; the namespace's page
	// makes the outbox and endpoint calls once per endpoint.
	pages := []struct {
		name  string
		calls []string
	}{
		{"namespaces", []string{"/v1/namespaces?limit=100", "/v1/namespaces?failing=true&limit=1000"}},
		{"namespace", []string{ns + "/endpoints", ns + "/outcomes?limit=20", ns + "/outbox?limit=1&endpoint=billing", ns + "/endpoints/billing"}},
		{"stream", []string{ns + "/endpoints/billing", ns + "/outbox?limit=50&endpoint=billing"}},
		{"outcome", []string{ns + "/outcomes/r-00042-07"}},
	}
	// About one in ten of the first 1000 examined is disabled.
	if n := len(get(pages[0].calls[1])["namespaces"].([]any)); n < 50 || n > 150 {
		b.Fatalf("the failing list found %d of the first 1000, want about 100", n)
	}
	if v := get(ns + "/outbox?limit=50&endpoint=billing"); len(v["rows"].([]any)) != consolePending {
		b.Fatalf("the stream shows %d pending rows, want %d", len(v["rows"].([]any)), consolePending)
	}
	for _, pg := range pages {
		b.Run(pg.name, func(b *testing.B) {
			var commands int
			if m != nil {
				commands = m.CommandCount()
			}
			before := sent.n.Load()
			for b.Loop() {
				for _, c := range pg.calls {
					get(c)
				}
			}
			b.ReportMetric(float64(len(pg.calls)), "api-calls/view")
			b.ReportMetric(float64(sent.n.Load()-before)/float64(b.N), "sent-commands/view")
			if m != nil {
				b.ReportMetric(float64(m.CommandCount()-commands)/float64(b.N), "server-commands/view")
			}
		})
	}
}
