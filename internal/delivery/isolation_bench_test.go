package delivery

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Shape of BenchmarkHealthyStreamsBesideHangingEndpoints.
const (
	healthyNamespaces = 10
	healthyRate       = 50 // outcomes per second, over every healthy namespace
	// hangingRows is each hanging stream's backlog: enough that every fire
	// of the run fails a row for the first time, the shortest backoff.
	hangingRows = 64
)

// BenchmarkHealthyStreamsBesideHangingEndpoints measures how long healthy
// streams wait beside endpoints that never answer. Ten healthy namespaces
// receive 50 outcomes/s in all, paced, each accepted (appended, and the
// driver woken for its namespace, as the API does) and timed from that
// moment to its arrival at the receiver. Beside them, hanging=N namespaces
// each have a backlog for an endpoint that takes the request and never
// answers, so that each call is cut by the 5 s sink timeout; their timers
// are due before the first healthy outcome, so every one of them is a new
// hanger at once. One driver with the default settings delivers through the
// real signing channel, on a redis-server of the benchmark's own. b.N is the
// healthy outcomes sent: -benchtime=1500x is 30 s.
//
// It reports the healthy outcomes' accept-to-arrival p50, p99 and max, the
// calls to the hanging endpoints per second and the most open at once, and
// fails if any healthy outcome does not arrive or a hanging stream loses a
// row.
func BenchmarkHealthyStreamsBesideHangingEndpoints(b *testing.B) {
	for _, hanging := range []int{0, 64, 128, 256} {
		b.Run(fmt.Sprintf("hanging=%d", hanging), func(b *testing.B) {
			benchBesideHangers(b, hanging)
		})
	}
}

func benchBesideHangers(b *testing.B, hanging int) {
	ctx := context.Background()
	srv := redistest.StartServer(b)
	st := redistest.NewStore(b, srv.Client, redisstore.Options{})

	n := b.N
	accepted := make([]time.Time, n)
	arrived := make([]time.Time, n)
	var mu sync.Mutex
	var got, dups int
	all := make(chan struct{})
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var body struct {
			Data struct {
				ReservationID string `json:"reservation_id"`
			} `json:"data"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		i, err := strconv.Atoi(strings.TrimPrefix(body.Data.ReservationID, "h-"))
		if err != nil || i < 0 || i >= n {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		if arrived[i].IsZero() {
			arrived[i] = at
			if got++; got == n {
				close(all)
			}
		} else {
			dups++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(healthy.Close)

	var calls, open, most atomic.Int64
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if o := open.Add(1); o > most.Load() {
			most.Store(o) // a racy maximum, close enough for a report
		}
		defer open.Add(-1)
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // until relay cuts the call
	}))
	b.Cleanup(hang.Close)

	secret := schema.Secret(schema.SecretPrefix + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))
	endpoint := func(ns, url string) {
		cfg := schema.Endpoint{URL: url, Scheme: schema.SchemeStandardWebhooks, Secrets: []schema.Secret{secret}, Enabled: true, MaxInFlight: 1}
		v, err := schema.EncodeEndpoint(&cfg)
		if err != nil {
			b.Fatal(err)
		}
		key, _ := schema.EndpointKey("hook")
		var batch store.Batch
		batch.Put(key, v)
		if _, err := st.Apply(ctx, store.Partition{Namespace: ns}, batch); err != nil {
			b.Fatal(err)
		}
	}
	app := &outbox.Appender{Store: st, Clock: clock.System{}}
	for i := range hanging {
		ns := fmt.Sprintf("hang-%03d", i)
		endpoint(ns, hang.URL+"/"+ns)
		var os []schema.Outcome
		for j := range hangingRows {
			os = append(os, committed(fmt.Sprintf("x-%d", j)))
		}
		if _, err := app.Append(ctx, store.Partition{Namespace: ns}, os); err != nil {
			b.Fatal(err)
		}
	}
	for i := range healthyNamespaces {
		endpoint(fmt.Sprintf("ok-%02d", i), healthy.URL+"/hooks")
	}

	ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		MaxConns: (DefaultConcurrency + DefaultSlowConcurrency) * schema.MaxMaxInFlight})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ch.CloseIdleConnections)
	sink := &Webhooks{Sender: &outbound.Sender{Channel: ch}, Audience: "https://relay.example.com"}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // a warning per cut call
	reg, err := timers.NewHandlers(&Handler{Sink: sink, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Config{Store: st, Handlers: reg, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	began := time.Now()
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			// The hanging calls are cut rather than waited for.
			cut, cancel := context.WithCancel(ctx)
			cancel()
			_ = d.Stop(cut)
		}
	}
	b.Cleanup(stop)

	tick := time.NewTicker(time.Second / healthyRate)
	for i := range n {
		<-tick.C
		p := store.Partition{Namespace: fmt.Sprintf("ok-%02d", i%healthyNamespaces)}
		res, err := app.Append(ctx, p, []schema.Outcome{committed("h-" + strconv.Itoa(i))})
		if err != nil || res[0].Code != outbox.Accepted {
			b.Fatalf("append: %v %+v", err, res)
		}
		mu.Lock()
		accepted[i] = time.Now()
		mu.Unlock()
		d.WakePartition(p)
	}
	tick.Stop()
	paced := time.Since(began)
	hungCalls := calls.Load()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		b.Fatalf("lost: %d of %d healthy outcomes arrived", got, n)
	}
	b.StopTimer()
	stop()

	for i := range hanging {
		key, _ := schema.BacklogKey("hook")
		v, _, err := st.Get(ctx, store.Partition{Namespace: fmt.Sprintf("hang-%03d", i)}, key)
		if err != nil {
			b.Fatal(err)
		}
		if bl, err := schema.DecodeBacklog(v); err != nil || bl.Rows != hangingRows {
			b.Fatalf("hanging stream %d: backlog %+v (%v), want its %d rows kept", i, bl, err, hangingRows)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	waits := make([]time.Duration, n)
	for i := range n {
		waits[i] = arrived[i].Sub(accepted[i])
	}
	slices.Sort(waits)
	b.ReportMetric(ms(waits[n/2]), "p50-ms")
	b.ReportMetric(ms(waits[min(n-1, n*99/100)]), "p99-ms")
	b.ReportMetric(ms(waits[n-1]), "max-ms")
	b.ReportMetric(float64(hungCalls)/paced.Seconds(), "hung-calls/s")
	b.ReportMetric(float64(most.Load()), "hung-open-max")
	b.ReportMetric(float64(dups), "healthy-dups")
	b.ReportMetric(0, "ns/op") // paced: the time per outcome is the pacing
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
