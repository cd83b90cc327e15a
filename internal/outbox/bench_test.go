package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// BenchmarkAppend measures ingest as the API will drive it: requests of 100
// outcomes (each record about 1 KiB) into namespaces with 1 or 8 endpoints,
// each taking every outcome, from 32 goroutines, on the real Redis. It
// reports outcomes accepted per second; at 8 endpoints also its rate over
// the rate at 1 endpoint measured just before in the same run (of-1-endpoint).
// -count repeats each sub-benchmark in turn, so the ratio compares with the
// last 1-endpoint run only: repeat the whole benchmark with -count 1 instead.
func BenchmarkAppend(b *testing.B) {
	var one float64
	b.Run("endpoints=1", func(b *testing.B) {
		// The last call of a sub-benchmark is the one reported.
		one = benchAppend(b, 1)
	})
	b.Run("endpoints=8", func(b *testing.B) {
		if rate := benchAppend(b, 8); one > 0 {
			b.ReportMetric(rate/one, "of-1-endpoint")
		}
	})
}

func benchAppend(b *testing.B, endpoints int) float64 {
	st := redistest.Real(b)
	ctx := context.Background()
	var ns atomic.Int64
	var accepted atomic.Int64
	refs := make([]schema.Ref, 20)
	for i := range refs {
		refs[i] = schema.Ref{Name: fmt.Sprintf("refs/heads/feature-%02d", i), New: strings.Repeat("ab", 32)}
	}
	sample := schema.Outcome{ReservationID: "r-1", Repository: "acme/widgets", OccurredUnixMs: 1_764_460_800_000,
		Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256, Refs: refs}}
	rec, err := schema.EncodeRecord(&sample)
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(16)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		p := store.Partition{Namespace: fmt.Sprintf("bench-%d", ns.Add(1))}
		var setup store.Batch
		for i := range endpoints {
			key, _ := schema.EndpointKey(fmt.Sprintf("endpoint-%d", i))
			ep := schema.Endpoint{URL: fmt.Sprintf("https://endpoint-%d.example.com/hooks", i), Enabled: true}.WithDefaults()
			v, err := schema.EncodeEndpoint(&ep)
			if err != nil {
				b.Error(err)
				return
			}
			setup.Put(key, v)
		}
		if _, err := st.Apply(ctx, p, setup); err != nil {
			b.Error(err)
			return
		}
		app := &outbox.Appender{Store: st, Clock: clock.System{}}
		seq := 0
		for pb.Next() {
			outcomes := make([]schema.Outcome, 100)
			for i := range outcomes {
				seq++
				outcomes[i] = schema.Outcome{
					ReservationID: fmt.Sprintf("r-%d", seq), Repository: "acme/widgets", OccurredUnixMs: 1_764_460_800_000,
					Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256, Refs: refs},
				}
			}
			statuses, err := app.Append(ctx, p, outcomes)
			if err != nil {
				b.Error(err)
				return
			}
			for _, s := range statuses {
				if s.Code == outbox.Accepted {
					accepted.Add(1)
				}
			}
		}
	})
	rate := float64(accepted.Load()) / time.Since(start).Seconds()
	b.ReportMetric(rate, "outcomes/s")
	b.ReportMetric(float64(len(rec)), "record-B")
	if got := accepted.Load(); got != int64(b.N)*100 {
		b.Fatalf("%d of %d outcomes accepted", got, b.N*100)
	}
	return rate
}

// BenchmarkAppendContended measures ingest of single-outcome requests from 64
// goroutines into one namespace with two endpoints, on the real Redis: the
// worst case for the sequence row every ingest writes. It reports requests
// per second and the share that failed with ErrContended.
func BenchmarkAppendContended(b *testing.B) {
	st := redistest.Real(b)
	ctx := context.Background()
	p := store.Partition{Namespace: "contended"}
	for _, id := range []string{"billing", "audit"} {
		outboxtest.PutEndpoint(b, st, p, id, schema.Endpoint{Enabled: true})
	}
	app := &outbox.Appender{Store: st, Clock: clock.System{}}
	var next, contended atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o := schema.Outcome{ReservationID: fmt.Sprintf("r-%d", next.Add(1)), Repository: "acme/widgets",
				OccurredUnixMs: 1_764_460_800_000, Expired: &schema.Expired{}}
			_, err := app.Append(ctx, p, []schema.Outcome{o})
			switch {
			case errors.Is(err, outbox.ErrContended):
				contended.Add(1)
			case err != nil:
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
	b.ReportMetric(float64(contended.Load())/float64(b.N), "contended/op")
}

// BenchmarkAFailedCallsAttemptNote is what a failed call costs its fire
// beyond the call: its row's full attempt row, as read, decoded, the new
// attempt added with its excerpt, and encoded again.
func BenchmarkAFailedCallsAttemptNote(b *testing.B) {
	body := []byte(strings.Repeat(`{"error":"upstream unavailable"} `, 10))
	var h schema.Attempts
	for i := range schema.MaxAttempts {
		h = h.With(schema.Attempt{AtMs: t0 + int64(i), DurationMs: 40, Status: 503, ErrorClass: "status", Excerpt: schema.Excerpt(body)})
	}
	row, err := schema.EncodeAttempts(h)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		read, err := schema.DecodeAttempts(row)
		if err != nil {
			b.Fatal(err)
		}
		a := schema.Attempt{AtMs: t0 + 99, DurationMs: 41, Status: 503, ErrorClass: "status", Excerpt: schema.Excerpt(body)}
		if _, err := schema.EncodeAttempts(read.With(a)); err != nil {
			b.Fatal(err)
		}
	}
}
