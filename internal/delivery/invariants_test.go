package delivery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// flaky refuses a seeded share of calls, some with a Retry-After, and
// records which rows it took.
type flaky struct {
	mu    sync.Mutex
	rng   *rand.Rand
	taken map[string]int
	calls int
}

func (f *flaky) Deliver(_ context.Context, o Parcel) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	switch n := f.rng.IntN(10); {
	case n == 0:
		return &Error{Class: "status", Status: 429, RetryAfter: 3 * time.Second}
	case n < 3:
		return &Error{Class: "status", Status: 500}
	}
	f.taken[o.Namespace+"/"+o.EndpointID+"/"+o.Outcome.ReservationID]++
	return nil
}

// While outcomes are accepted concurrently into several namespaces, and the
// endpoints refuse three calls in ten, the driver delivers every accepted
// outcome to every endpoint that takes its kind, and the outbox ends empty:
// no backlog, pending row, record, attempt row or delivery timer left.
// Virtual time moves only while the driver is idle, so backoffs pass at
// once while no lease or fire budget runs out under a slow machine.
func TestConcurrentIngestAndFailingEndpointsLoseNothing(t *testing.T) {
	t.Parallel()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(outboxtest.T0)
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		namespaces := []string{"acme", "globex", "initech"}
		for _, ns := range namespaces {
			// Every kind, strictly in order; committed only, four at once.
			f.endpoint(ns, "all", schema.Endpoint{Enabled: true})
			f.endpoint(ns, "commits", schema.Endpoint{Enabled: true, MaxInFlight: 4, Kinds: []schema.Kind{schema.KindCommitted}})
		}
		sink := &flaky{rng: rand.New(rand.NewPCG(seed, 1)), taken: map[string]int{}}
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk}, &outbox.SeenSweeper{}, &outbox.LogSweeper{})
		if err != nil {
			t.Fatal(err)
		}
		var d *Driver
		d, err = New(Config{Store: f.st, Handlers: reg, Clock: clk, Concurrency: 4, after: func(wait time.Duration) <-chan time.Time {
			d.mu.Lock()
			idle := len(d.inFlight) == 0
			d.mu.Unlock()
			if idle {
				clk.Advance(wait)
			}
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(f.ctx); err != nil {
			t.Fatal(err)
		}

		want := map[string]bool{}
		var wmu sync.Mutex
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(w)+2))
				for i := 0; i < 60; {
					ns := namespaces[rng.IntN(len(namespaces))]
					var list []schema.Outcome
					for range 1 + rng.IntN(5) {
						rid := fmt.Sprintf("w%d-%03d", w, i)
						o := outboxtest.Committed(rid)
						if rng.IntN(3) == 0 {
							o = outboxtest.Aborted(rid)
						}
						list = append(list, o)
						i++
					}
					st, err := f.app.Append(f.ctx, store.Partition{Namespace: ns}, list)
					if err != nil {
						t.Errorf("append: %v", err)
						return
					}
					wmu.Lock()
					for k, s := range st {
						if s.Code != outbox.Accepted {
							t.Errorf("append %s: %s", list[k].ReservationID, s.Code)
							continue
						}
						want[ns+"/all/"+list[k].ReservationID] = true
						if list[k].Committed != nil {
							want[ns+"/commits/"+list[k].ReservationID] = true
						}
					}
					wmu.Unlock()
					d.Wake()
				}
			}()
		}
		wg.Wait()
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}

		// Drain what is left by hand, an hour of virtual time per round.
		for round := 0; ; round++ {
			left := 0
			for _, ns := range namespaces {
				p := store.Partition{Namespace: ns}
				if _, err := timers.NewRunner(timers.RunnerConfig{Store: f.st, Handlers: reg, Clock: clk}).RunDue(f.ctx, p, clk.Now().UnixMilli()); err != nil {
					t.Fatalf("drain %s: %v", ns, err)
				}
				rows, err := timers.All(f.ctx, f.st, p)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					if r.Kind == timers.KindOutcomeDelivery {
						left++
					}
				}
			}
			if left == 0 {
				break
			}
			if round == 200 {
				t.Fatalf("still %d streams to drain after %d rounds", left, round)
			}
			clk.Advance(time.Hour)
		}

		for key := range want {
			if sink.taken[key] == 0 {
				t.Errorf("%s accepted but never delivered", key)
			}
		}
		for key := range sink.taken {
			if !want[key] {
				t.Errorf("%s delivered but never accepted there", key)
			}
		}
		swept := 0
		for _, ns := range namespaces {
			// Two streams finishing one log row at once may each leave it
			// to the other; the log sweep takes what they left.
			swept += sweepLog(t, f.ctx, f.st, store.Partition{Namespace: ns}, clk.Now().UnixMilli())
		}
		t.Logf("%d log rows left to the sweep", swept)
		for _, ns := range namespaces {
			p := store.Partition{Namespace: ns}
			page, err := f.st.Scan(f.ctx, p, store.Key([]byte{0}), store.Key([]byte{0xff}), nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Entries {
				pk, ok := schema.Parse(e.Key)
				switch {
				case !ok:
					t.Errorf("%s: unparsable row %q", ns, e.Key)
				case pk.Class == schema.ClassEndpoint, pk.Class == schema.ClassSeen, pk.Class == schema.ClassSequence,
					pk.Class == schema.ClassCounters, pk.Class == schema.ClassMinute, pk.Class == schema.ClassHead:
				case pk.Class == schema.ClassTimer && (pk.TimerKind == timers.KindSeenSweep || pk.TimerKind == timers.KindLogSweep):
				default:
					t.Errorf("%s: row %+v left after every outcome was delivered", ns, pk)
				}
			}
		}
		t.Logf("%d deliveries wanted, %d calls made", len(want), sink.calls)
		// Every stream delivered: no endpoint is failing, and the marks the
		// fires kept as they failed and recovered say so.
		for _, ns := range namespaces {
			p := store.Partition{Namespace: ns}
			if changed, err := (&outbox.Admin{Store: f.st, Clock: clk}).Remark(f.ctx, p); err != nil || changed {
				t.Errorf("%s: marks not as the rows say (changed %v, %v)", ns, changed, err)
			}
		}
		if fl, err := (&outbox.Admin{Store: f.st, Clock: clk}).Fleet(f.ctx); err != nil || fl != (outbox.Fleet{}) {
			t.Errorf("fleet after every delivery = %+v, %v; want nothing", fl, err)
		}
	})
}

// sweepLog runs one whole pass of the log sweep over p at nowMs and returns
// the log rows it deleted.
func sweepLog(t *testing.T, ctx context.Context, st store.NamespaceStore, p store.Partition, nowMs int64) int {
	t.Helper()
	deleted := 0
	var state []byte
	for range 1000 {
		f, err := (&outbox.LogSweeper{}).Fire(ctx, timers.FireContext{Store: st, Partition: p, NowMs: nowMs}, timers.DueTimer{Kind: timers.KindLogSweep, State: state})
		if err != nil {
			t.Fatal(err)
		}
		res, err := st.Apply(ctx, p, f.Batch)
		if err != nil || !res.Committed {
			t.Fatalf("log sweep batch: %+v %v", res, err)
		}
		for _, w := range f.Batch.Writes {
			if pk, ok := schema.Parse(w.Key); ok && pk.Class == schema.ClassLog {
				deleted++
			}
		}
		if f.DueAtMs != nowMs {
			return deleted
		}
		state = f.State
	}
	t.Fatal("the log sweep pass does not end")
	return deleted
}
