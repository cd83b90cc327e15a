package delivery

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// BenchmarkDriverDelivers measures end-to-end delivery: outcomes already
// accepted in 32 namespaces (one Standard Webhooks endpoint each) are
// delivered by one driver of 64 workers through the real signing channel to
// a loopback receiver, on a redis-server of the benchmark's own. It reports
// outcomes delivered per second, Redis commands and this process's CPU per
// outcome.
// With latency=5ms the receiver takes 5 ms to answer, as a remote one
// would, so the work is bound by waiting rather than by this machine's CPU:
// that is where an endpoint's max_in_flight pays.
func BenchmarkDriverDelivers(b *testing.B) {
	for _, latency := range []time.Duration{0, 5 * time.Millisecond} {
		for _, width := range []int{1, 8} {
			b.Run(fmt.Sprintf("latency=%v/max_in_flight=%d", latency, width), func(b *testing.B) {
				srv := redistest.StartServer(b)
				st := redistest.NewStore(b, srv.Client, redisstore.Options{})
				benchDelivery(b, st, srv.Client, width, latency)
			})
		}
	}
}

func benchDelivery(b *testing.B, st *redisstore.Store, client *redis.Client, width int, latency time.Duration) {
	ctx := context.Background()
	var got atomic.Int64
	done := make(chan struct{})
	want := int64(b.N)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if latency > 0 {
			time.Sleep(latency) // the remote endpoint's think time
		}
		w.WriteHeader(http.StatusNoContent)
		if got.Add(1) == want {
			close(done)
		}
	}))
	b.Cleanup(recv.Close)
	secret := schema.Secret(schema.SecretPrefix + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32))))

	const namespaces = 32
	app := &outbox.Appender{Store: st, Clock: clock.System{}}
	for i := range namespaces {
		p := store.Partition{Namespace: fmt.Sprintf("ns-%02d", i)}
		cfg := schema.Endpoint{URL: recv.URL + "/hooks", Scheme: schema.SchemeStandardWebhooks,
			Secrets: []schema.Secret{secret}, Enabled: true, MaxInFlight: width}
		v, err := schema.EncodeEndpoint(&cfg)
		if err != nil {
			b.Fatal(err)
		}
		key, _ := schema.EndpointKey("billing")
		var batch store.Batch
		batch.Put(key, v)
		if _, err := st.Apply(ctx, p, batch); err != nil {
			b.Fatal(err)
		}
	}
	for start := 0; start < b.N; start += 100 * namespaces {
		for i := range namespaces {
			var os []schema.Outcome
			for n := start + i; n < min(start+100*namespaces, b.N); n += namespaces {
				os = append(os, committed("r-"+strconv.Itoa(n)))
			}
			if len(os) == 0 {
				continue
			}
			if _, err := app.Append(ctx, store.Partition{Namespace: fmt.Sprintf("ns-%02d", i)}, os); err != nil {
				b.Fatal(err)
			}
		}
	}

	ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, MaxConns: DefaultConcurrency * schema.MaxMaxInFlight})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(ch.CloseIdleConnections)
	sink := &Webhooks{Sender: &outbound.Sender{Channel: ch}, Audience: "https://relay.example.com"}
	reg, err := timers.NewHandlers(&Handler{Sink: sink})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Config{Store: st, Handlers: reg})
	if err != nil {
		b.Fatal(err)
	}
	before := commands(b, client)
	b.ResetTimer()
	began, cpuBefore := time.Now(), processCPU()
	if err := d.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("delivered %d of %d", got.Load(), b.N)
	}
	elapsed, cpu := time.Since(began), processCPU()-cpuBefore
	b.StopTimer()
	if err := d.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "outcomes/s")
	b.ReportMetric(float64(commands(b, client)-before)/float64(b.N), "redis-cmds/outcome")
	// CPU, unlike the rate, holds steady when other work shares the
	// machine: the driver's, the channel's and the receiver's together.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/outcome")
}

// commands is the server's count of commands processed, scripts' own
// calls included.
func commands(b *testing.B, client *redis.Client) int64 {
	b.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, rest, _ := strings.Cut(line, ":calls=")
		n, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(n, 10, 64)
		total += v
	}
	return total
}
