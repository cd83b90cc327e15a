package outbox_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

func TestIngestCreatesOneSweepTimerAWindowAhead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		e.Clk.Advance(time.Minute)
		e.Append(committed("r-2"))
		rows := e.timers(timers.KindSeenSweep, "")
		if len(rows) != 1 || rows[0].DueAtMs != t0+time.Hour.Milliseconds() || len(rows[0].State) != 0 {
			t.Fatalf("sweep timers %+v", rows)
		}
	})
}

func TestNoSweepTimerWithoutAnAcceptedOutcome(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindExpired}})
		e.Append(committed("r-1"))
		if rows := e.timers(timers.KindSeenSweep, ""); len(rows) != 0 {
			t.Errorf("sweep timers %+v", rows)
		}
	})
}

// fireSweep fires the sweeper once and applies its batch; it returns the
// result and whether the batch committed.
func fireSweep(t *testing.T, e *env, s *outbox.SeenSweeper, state []byte) (timers.Fired, bool) {
	t.Helper()
	f, err := s.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()}, timers.DueTimer{Kind: timers.KindSeenSweep, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Batch.Settles || f.Done || f.Batch.Ops() > store.MaxBatchOps-3 {
		t.Fatalf("fired %+v", f)
	}
	return f, e.Apply(f.Batch).Committed
}

// sweepPass fires s from a fresh state until its pass ends, each fire
// committed and each within the pass due at once, and returns the last.
func sweepPass(t *testing.T, e *env, s *outbox.SeenSweeper) timers.Fired {
	t.Helper()
	var state []byte
	for fires := 0; fires < 100; fires++ {
		f, ok := fireSweep(t, e, s, state)
		if !ok {
			t.Fatal("sweep batch failed its guards")
		}
		if len(f.State) == 0 {
			return f
		}
		if f.DueAtMs != e.NowMs() {
			t.Fatalf("a pass in progress is due %d, not now", f.DueAtMs)
		}
		state = f.State
	}
	t.Fatal("the pass does not end")
	return timers.Fired{}
}

func TestSweeperDeletesSeenRowsPastTheWindowAndKeepsTheRest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		e.Clk.Advance(30 * time.Minute)
		e.Append(committed("r-3"))
		e.Clk.Advance(20 * time.Minute)
		e.Append(committed("r-4"), committed("r-5"))
		corrupt, _ := schema.SeenKey("r-0")
		var b store.Batch
		b.Put(corrupt, store.Value("junk"))
		e.Apply(b)
		// Delivered, and so out of the log: nothing holds the seen rows.
		ackAll(t, e, "billing")
		e.Clk.Set(t0 + time.Hour.Milliseconds() + outbox.SweepGrace.Milliseconds())

		// One row a fire, fewer than a page holds: the pass reads a page
		// again until its expired rows are gone.
		f := sweepPass(t, e, &outbox.SeenSweeper{Window: time.Hour, Every: 10 * time.Minute, Rows: 1})
		// End of the pass: due when r-3 expires, 30 min on.
		if want := t0 + 90*time.Minute.Milliseconds() + outbox.SweepGrace.Milliseconds(); f.DueAtMs != want {
			t.Errorf("next pass due %d, want %d", f.DueAtMs, want)
		}
		start, end := schema.SeenRange()
		var left []string
		for _, row := range e.scan(start, end) {
			pk, _ := schema.Parse(row.Key)
			left = append(left, pk.RID)
		}
		if want := []string{"r-0", "r-3", "r-4", "r-5"}; !slices.Equal(left, want) {
			t.Errorf("seen rows left %v, want %v", left, want)
		}
		// An empty namespace sweeps again a window later.
		e.Clk.Set(t0 + 3*time.Hour.Milliseconds())
		f = sweepPass(t, e, &outbox.SeenSweeper{Window: time.Hour, Every: time.Minute, Rows: 10})
		if f.DueAtMs != e.NowMs()+time.Hour.Milliseconds() {
			t.Errorf("due %d after sweeping all", f.DueAtMs)
		}
	})
}

// A seen row rewritten between the sweeper's scan and its batch (the rid was
// accepted again) fails the guard and is kept.
func TestSweeperKeepsASeenRowRewrittenMeanwhile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackAll(t, e, "billing")
		e.Clk.Advance(2 * time.Hour)
		s := &outbox.SeenSweeper{Window: time.Hour}
		f, err := s.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()}, timers.DueTimer{Kind: timers.KindSeenSweep})
		if err != nil {
			t.Fatal(err)
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("re-accept after the window: %v", got)
		}
		if e.Apply(f.Batch).Committed {
			t.Fatal("the sweep deleted a fresh seen row")
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Duplicate {
			t.Errorf("after the failed sweep: %v", got)
		}
	})
}

// A sweeper whose clock runs a little ahead of an ingesting process's does
// not delete a seen row that process still counts as inside the window.
func TestASweeperAheadOfIngestKeepsTheIdempotencyDecision(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackAll(t, e, "billing")
		e.Clk.Advance(time.Hour - time.Second) // ingest: 1 s inside the window
		s := &outbox.SeenSweeper{Window: time.Hour}
		f, err := s.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs() + 2_000}, timers.DueTimer{Kind: timers.KindSeenSweep})
		if err != nil || !e.Apply(f.Batch).Committed {
			t.Fatalf("sweep: %v", err)
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Duplicate {
			t.Errorf("resent inside the window: %v, want duplicate", got)
		}
	})
}

// A seen row past its window stays while the log holds its outcome, so the
// outcome can still be found by its reservation id; it goes once the log
// row has.
func TestSweeperKeepsTheSeenRowOfAnOutcomeTheLogHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		ack(t, e, "billing", 1)
		e.Clk.Advance(2 * time.Hour)
		f := sweepPass(t, e, &outbox.SeenSweeper{Window: time.Hour, Every: 10 * time.Minute, Rows: 10})
		start, end := schema.SeenRange()
		var left []string
		for _, row := range e.scan(start, end) {
			pk, _ := schema.Parse(row.Key)
			left = append(left, pk.RID)
		}
		if want := []string{"r-2"}; !slices.Equal(left, want) {
			t.Errorf("seen rows left %v, want %v (r-2 is still pending)", left, want)
		}
		if want := e.NowMs() + 10*time.Minute.Milliseconds(); f.DueAtMs != want {
			t.Errorf("next pass due %d, want %d: the kept row is looked at again", f.DueAtMs, want)
		}
	})
}

// A pass an earlier version left holds an ordered scan's cursor, which is
// no position in the unordered walk: the sweep starts the walk over rather
// than fail each fire.
func TestASweepStateOfAnOrderedPassStartsTheWalkOver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		ackAll(t, e, "billing")
		e.Clk.Advance(2 * time.Hour)
		cursor, _ := schema.SeenKey("r-1")
		// Version 1: earliest ms 0, then the cursor's length and bytes.
		state := append([]byte{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(cursor))}, cursor...)
		s := &outbox.SeenSweeper{Window: time.Hour, Rows: 10}
		for fires := 0; ; fires++ {
			if fires == 100 {
				t.Fatal("the pass does not end")
			}
			f, ok := fireSweep(t, e, s, state)
			if !ok {
				t.Fatal("sweep batch failed its guards")
			}
			if state = f.State; len(state) == 0 {
				break
			}
		}
		start, end := schema.SeenRange()
		if left := e.scan(start, end); len(left) != 0 {
			t.Fatalf("%d seen rows left past their window", len(left))
		}
	})
}
