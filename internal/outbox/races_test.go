package outbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// scripted runs each Apply through step(n), n counting from 1, so a test can
// slip another writer in between an Appender's read and its apply.
type scripted struct {
	store.NamespaceStore
	n    int
	step func(n int, apply func() (store.Result, error)) (store.Result, error)
}

func (s *scripted) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	s.n++
	return s.step(s.n, func() (store.Result, error) { return s.NamespaceStore.Apply(ctx, p, b) })
}

// Outcomes whose batch committed with a lost reply stay "accepted" when a
// later batch of the same request then loses a race and is re-planned.
func TestALostReplyThenALostRaceStillAnswersAccepted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		other := &outbox.Appender{Store: e.St, Clock: e.Clk}
		e.App.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			switch n {
			case 1: // the first batch commits, its reply is lost, the resend fails
				if _, err := apply(); err != nil {
					return store.Result{}, err
				}
			case 2: // another producer lands before the second batch
				if _, err := other.Append(e.Ctx, e.P, []schema.Outcome{committed("elsewhere")}); err != nil {
					return store.Result{}, err
				}
			}
			return apply()
		}}
		var in []schema.Outcome
		for i := range outbox.MaxAppendOutcomes { // the first batch takes what fits, the second the rest
			in = append(in, committed(fmt.Sprintf("r-%d", i)))
		}
		for i, s := range e.Append(in...) {
			if s.Code != outbox.Accepted {
				t.Errorf("outcome %d stored by this call answered %s", i, s.Code)
			}
		}
		if e.sequence() != outbox.MaxAppendOutcomes+1 {
			t.Errorf("sequence %d, want %d", e.sequence(), outbox.MaxAppendOutcomes+1)
		}
	})
}

// An endpoint whose filter is widened between the Appender's read and its
// apply fails the batch, which is re-planned: the outcome reaches it.
func TestAFilterWidenedMeanwhileIsHonoured(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.App.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				e.putEndpoint("audit", schema.Endpoint{Enabled: true, UpdatedMs: 1}) // all kinds now
			}
			return apply()
		}}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if _, ok := e.record("audit", "r-1"); !ok {
			t.Error("the widened endpoint never gets the outcome accepted after it widened")
		}
	})
}

// A stream's timer that a fire completes (the stream looked empty) between
// the Appender's read and its apply fails the batch instead of leaving the
// new row without a timer.
func TestATimerCompletedMeanwhileIsReplaced(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		key := e.putTimer(e.NowMs(), timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(nil))
		e.App.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 { // the fire: backlog absent, so Done with a guard-only plan
				acks, err := outbox.NewAcks("billing", nil, false)
				if err != nil {
					return store.Result{}, err
				}
				var b store.Batch
				acks.Plan(&b)
				b.RequireEquals(key, timers.EncodeIdle(nil))
				b.Delete(key)
				if res := e.Apply(b); !res.Committed {
					t.Fatal("the fire did not commit")
				}
			}
			return apply()
		}}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if _, ok := e.deliveryTimer("billing"); !ok {
			t.Error("the stream has a backlog and no delivery timer")
		}
	})
}

// An ingest leaves a leased timer to its fire, but guards it: a fire that
// found its stream empty and ends (its completion deletes the timer) before
// the ingest's batch applies fails that batch, and the ingest plans again
// with a timer of its own. Unguarded, the outcome would wait with no timer
// to deliver it.
func TestAnIngestBesideAFireEndingItsStreamLeavesTheOutcomeATimer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		lease := leasedValue(e.NowMs(), nil)
		leased := e.putTimer(e.NowMs()+30_000, timers.KindOutcomeDelivery, "billing", lease)
		e.App.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				// The fire's completion: done, guarded by its lease.
				var b store.Batch
				b.RequireEquals(leased, lease)
				b.Delete(leased)
				if res := e.Apply(b); !res.Committed {
					t.Fatalf("the fire's completion failed precondition %d", res.Failed)
				}
			}
			return apply()
		}}
		if got := codes(e.Append(committed("a"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].RID != "a" {
			t.Fatalf("pending %+v, want [a]", p)
		}
		row, ok := e.deliveryTimer("billing")
		if !ok || row.Lease != nil || row.DueAtMs > e.NowMs() {
			t.Fatalf("delivery timer %+v (present %v), want one due now for the pending outcome", row, ok)
		}
	})
}

// An erasure is guarded by the log row as it read it: a fire that
// delivered the outcome meanwhile fails the erasure's batch, which plans
// again and finds it delivered, not pending. Unguarded, the erasure would
// count it dropped and take it off the backlog a second time, and the
// stream, its backlog at zero, would end with another row still queued.
func TestAnErasureOfAnOutcomeDeliveredMeanwhileCountsNothingTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), committed("b"))
		a := e.history()
		a.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
			}
			return apply()
		}}
		got, err := a.Erase(e.Ctx, e.P, "a")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Dropped) != 0 {
			t.Errorf("dropped on %v, though delivered before the erasure applied", got.Dropped)
		}
		bl, _ := e.backlog("billing")
		var queue []string
		for _, pk := range e.pending("billing") {
			queue = append(queue, pk.RID)
		}
		if bl.Rows != 1 || len(queue) != 1 || queue[0] != "b" {
			t.Errorf("backlog %d, queue %v: want 1 and [b]", bl.Rows, queue)
		}
		if c := countersOf(t, e, "billing"); c.Delivered != 1 || c.Dropped != 0 {
			t.Errorf("counters %+v, want a delivered and nothing dropped", c)
		}
	})
}
