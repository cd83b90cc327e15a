package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// consoleNamespaces is how many namespaces the console's namespaces page is
// measured with.
const consoleNamespaces = 10_000

// BenchmarkConsoleNamespacesPage is one view of the console's namespaces
// page with 10,000 namespaces: every page of GET /v1/namespaces at the
// console's limit of 1000, through the API's handler, as the page reads
// them to rank them. It reports the commands relay sends Redis per view (a
// script call as one) and, on miniredis, the commands the server runs (a
// script's own calls included); with RELAY_TEST_REDIS_URL it runs on that
// Redis too.
func BenchmarkConsoleNamespacesPage(b *testing.B) {
	b.Run("miniredis", func(b *testing.B) {
		m := miniredis.RunT(b)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		b.Cleanup(func() { _ = c.Close() })
		benchNamespacesPage(b, c, redisstore.DefaultPrefix, m)
	})
	b.Run("redis", func(b *testing.B) {
		c := redistest.RealClient(b)
		benchNamespacesPage(b, c, redistest.Prefix(b, c), nil)
	})
}

func benchNamespacesPage(b *testing.B, c *redis.Client, prefix string, m *miniredis.Miniredis) {
	sent := &countingHook{}
	c.AddHook(sent)
	st := redistest.NewStore(b, c, redisstore.Options{Prefix: prefix})
	clk := clock.NewManual(outboxtest.T0)
	admin := &outbox.Admin{Store: st, Clock: clk}
	// Registered 64 at once: setting up is not what is measured.
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
	h, err := httpapi.New(httpapi.Config{Appender: &outbox.Appender{Store: st, Clock: clk}, Admin: admin, Auth: auth, Clock: clk})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := httpapi.MintHS256(testSecret, apiAudience, "", httpapi.Principal{Subject: "console", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, clk.Now())
	if err != nil {
		b.Fatal(err)
	}
	view := func() (namespaces, calls int) {
		cursor := ""
		for {
			target := "/v1/namespaces?limit=1000"
			if cursor != "" {
				target += "&cursor=" + url.QueryEscape(cursor)
			}
			req := httptest.NewRequest(http.MethodGet, target, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			calls++
			if rec.Code != http.StatusOK {
				b.Fatalf("list: %d %s", rec.Code, rec.Body)
			}
			var page struct {
				Namespaces []json.RawMessage `json:"namespaces"`
				NextCursor *string           `json:"next_cursor"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
				b.Fatal(err)
			}
			namespaces += len(page.Namespaces)
			if page.NextCursor == nil {
				return namespaces, calls
			}
			cursor = *page.NextCursor
		}
	}
	if n, _ := view(); n != consoleNamespaces {
		b.Fatalf("a view lists %d namespaces, want %d", n, consoleNamespaces)
	}
	var commands int
	if m != nil {
		commands = m.CommandCount()
	}
	before := sent.n.Load()
	calls := 0
	b.ResetTimer()
	for b.Loop() {
		_, calls = view()
	}
	b.StopTimer()
	b.ReportMetric(float64(calls), "api-calls/view")
	b.ReportMetric(float64(sent.n.Load()-before)/float64(b.N), "sent-commands/view")
	if m != nil {
		b.ReportMetric(float64(m.CommandCount()-commands)/float64(b.N), "server-commands/view")
	}
}
