package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// completions tells of each batch the driver applies: with held timers
// and no lingering, one per fire, its completion.
type completions struct {
	DueStore
	done chan struct{}
}

func (c *completions) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	res, err := c.DueStore.Apply(ctx, p, b)
	c.done <- struct{}{}
	return res, err
}

// A stream that ends again within stayWithin of its last end keeps its
// timer where its lease put it, idle, and its backlog row at zero; the
// next ingest holds that timer again in place, and it stays again. One
// that ended longer ago ends as any. A timer that stays, and takes
// nothing more, fires when its lease would have ended, and ends.
func TestAStreamThatEndsAgainAtOnceKeepsItsTimer(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		p := store.Partition{Namespace: "acme"}
		clk := clock.NewManual(time.Now().UnixMilli())
		st := &completions{DueStore: f.st, done: make(chan struct{}, 4)}
		sink := newTally(4)
		h := &Handler{Sink: sink, Clock: clk}
		d := quietDriverOf(t, f, st, h, Config{Clock: clk})
		app := &outbox.Appender{Store: f.st, Clock: clk, Due: d.FireDue, Hold: d.HoldFor}
		ingest := func(rid string) { ingestAndComplete(t, f, app, st, rid) }
		backlogRow := func() bool {
			t.Helper()
			key, _ := schema.BacklogKey("billing")
			_, found, err := f.st.Get(f.ctx, p, key)
			if err != nil {
				t.Fatal(err)
			}
			return found
		}
		ended := func(step string) {
			t.Helper()
			if n := deliveryTimers(t, f, p); n != 0 || backlogRow() {
				t.Fatalf("%s: %d delivery timers, backlog row %v; want the stream ended", step, n, backlogRow())
			}
		}

		ingest("r-1")
		ended("first end")
		clk.Advance(stayWithin + time.Millisecond)
		ingest("r-2")
		ended("an end longer than stayWithin after the last")

		ingest("r-3")
		stayed := onlyDeliveryTimer(t, f, p)
		lease := timers.DefaultLease.Milliseconds()
		if stayed.Lease != nil || stayed.DueAtMs != clk.Now().UnixMilli()+lease || !backlogRow() || f.backlog("acme", "billing") != 0 {
			t.Fatalf("an end at once after the last left timer %+v, backlog row %v; want it idle until its lease's end, and an empty backlog row", stayed, backlogRow())
		}
		clk.Advance(time.Second)
		ingest("r-4")
		if again := onlyDeliveryTimer(t, f, p); again.Key != stayed.Key || again.Lease != nil {
			t.Fatalf("the next ingest's fire left %+v, want the timer held and left again in place, %q", again, stayed.Key)
		}
		sink.wait(t)
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}

		clk.Set(stayed.DueAtMs)
		reg, err := timers.NewHandlers(h)
		if err != nil {
			t.Fatal(err)
		}
		r := timers.NewRunner(timers.RunnerConfig{Store: f.st, Handlers: reg, Clock: clk})
		report, err := r.RunDue(f.ctx, p, stayed.DueAtMs)
		if err != nil || report.Done != 1 {
			t.Fatalf("at the lease's end: %+v, %v; want the stayed timer fired and done", report, err)
		}
		ended("a stayed timer's fire at its lease's end")
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, rid := range []string{"r-1", "r-2", "r-3", "r-4"} {
			if n := sink.seen["acme/billing/"+rid]; n != 1 {
				t.Fatalf("%s delivered %d times", rid, n)
			}
		}
	})
}

// ingestAndComplete appends one outcome to acme and waits for the batch
// the driver then applies: its fire's completion.
func ingestAndComplete(t *testing.T, f *fleet, app *outbox.Appender, st *completions, rid string) {
	t.Helper()
	if _, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed(rid)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.done:
	case <-time.After(patience):
		t.Fatalf("%s: no completion", rid)
	}
}

func onlyDeliveryTimer(t *testing.T, f *fleet, p store.Partition) timers.Row {
	t.Helper()
	rows, err := timers.All(f.ctx, f.st, p)
	if err != nil {
		t.Fatal(err)
	}
	var found []timers.Row
	for _, r := range rows {
		if r.Kind == timers.KindOutcomeDelivery {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d delivery timers, want one", len(found))
	}
	return found[0]
}

// A timer one process left to stay is held by whichever process ingests
// next: another process's ingest holds it in place, guarded, and fires it
// itself with no claim; every outcome goes once.
func TestATimerThatStaysIsHeldByAnotherProcessesIngest(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		p := store.Partition{Namespace: "acme"}
		clk := clock.NewManual(time.Now().UnixMilli())
		type process struct {
			h    *Handler
			st   *completions
			sink *tally
			app  *outbox.Appender
		}
		start := func() process {
			pr := process{st: &completions{DueStore: f.st, done: make(chan struct{}, 4)}, sink: newTally(1)}
			pr.h = &Handler{Sink: pr.sink, Clock: clk}
			d := quietDriverOf(t, f, pr.st, pr.h, Config{Clock: clk})
			pr.app = &outbox.Appender{Store: f.st, Clock: clk, Due: d.FireDue, Hold: d.HoldFor}
			return pr
		}
		a, b := start(), start()
		ingest := func(pr process, rid string) { ingestAndComplete(t, f, pr.app, pr.st, rid) }
		// The stream ended a moment ago in a, so a's fire leaves its timer.
		a.h.ends.ended(streamID{"acme", "billing"}, clk.Now().UnixMilli())
		ingest(a, "r-1")
		stayed := onlyDeliveryTimer(t, f, p)
		if stayed.Lease != nil {
			t.Fatalf("a left %+v, want an idle timer", stayed)
		}
		ingest(b, "r-2")
		select {
		case <-a.st.done:
			t.Fatal("a fired the timer b's ingest held")
		default:
		}
		if n := deliveryTimers(t, f, p); n != 0 {
			t.Fatalf("b's fire left %d delivery timers; the stream had not ended lately in b", n)
		}
		a.sink.wait(t)
		b.sink.wait(t)
		if a.sink.seen["acme/billing/r-1"] != 1 || b.sink.seen["acme/billing/r-2"] != 1 || a.sink.total+b.sink.total != 2 {
			t.Fatalf("a delivered %v, b %v; want r-1 by a and r-2 by b, once each", a.sink.seen, b.sink.seen)
		}
	})
}
