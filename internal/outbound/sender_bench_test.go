package outbound_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/signing"
)

// BenchmarkDeliver measures signed deliveries per second to a loopback
// receiver from 64 concurrent senders, for each scheme: signing afresh,
// posting over the SSRF-guarded channel and reading the 204.
func BenchmarkDeliver(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + "/hooks/relay")
	if err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 1024)
	for _, scheme := range []signing.Scheme{signing.SchemeStandard, signing.SchemeMkit} {
		b.Run(string(scheme), func(b *testing.B) {
			s := &outbound.Sender{Channel: loopbackChannel(b), Mkit: mkitSigner(b)}
			target := outbound.Target{URL: u, Scheme: scheme, Namespace: "acme", Secrets: []string{secret}}
			var failed atomic.Int64
			const senders = 64
			b.SetParallelism((senders + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
			b.ReportAllocs()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if err := s.Send(ctx, target, outbound.Message{ID: "msg_bench", Body: body}); err != nil {
						failed.Add(1)
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
			if n := failed.Load(); n > 0 {
				b.Fatalf("%d deliveries failed", n)
			}
		})
	}
}
