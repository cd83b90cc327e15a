package outbox_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// logRow reads and decodes the log row at seq; found is false when absent.
func (e *env) logRow(seq uint64) (schema.LogRow, bool) {
	e.T.Helper()
	v, found := e.Get(schema.LogKey(seq))
	if !found {
		return schema.LogRow{}, false
	}
	l, err := schema.DecodeLog(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return l, true
}

// ackRetained acknowledges the stream's first n rows keeping their history,
// each delivered as done says.
func ackRetained(t *testing.T, e *env, endpoint string, n int, done outbox.Done) {
	t.Helper()
	acks := freshAcks(t, e, endpoint)
	acks.Retain = true
	for _, pk := range e.pending(endpoint)[:n] {
		rec, _ := e.record(endpoint, pk.RID)
		if err := acks.Add(pk.RID, pk.Seq, rec, done); err != nil {
			t.Fatal(err)
		}
	}
	var b store.Batch
	acks.Plan(&b)
	if b.Ops() > outbox.AckOps(n) {
		t.Errorf("%d operations for %d rows, above AckOps", b.Ops(), n)
	}
	if res := e.Apply(b); !res.Committed {
		t.Fatalf("ack failed precondition %d", res.Failed)
	}
}

func TestTheLogHoldsEachOutcomeOnceForEveryStream(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, id := range []string{"audit", "billing", "expired-only"} {
			ep := schema.Endpoint{Enabled: true}
			if id == "expired-only" {
				ep.Kinds = []schema.Kind{schema.KindExpired}
			}
			e.putEndpoint(id, ep)
		}
		e.Append(committed("r-1"))
		l, ok := e.logRow(0)
		if !ok {
			t.Fatal("no log row at sequence 0")
		}
		want := schema.LogRow{RID: "r-1", AcceptedMs: t0, Record: mustRecord(t, committed("r-1"))}
		if l.RID != want.RID || l.AcceptedMs != want.AcceptedMs || string(l.Record) != string(want.Record) {
			t.Errorf("log row %+v", l)
		}
		var ids []string
		for _, en := range l.Entries {
			ids = append(ids, en.Endpoint)
			if en.State != schema.EntryPending {
				t.Errorf("%s: state %v", en.Endpoint, en.State)
			}
		}
		if !reflect.DeepEqual(ids, []string{"audit", "billing"}) {
			t.Errorf("entries %v: the endpoint whose kinds do not take it has none", ids)
		}
		seenKey, _ := schema.SeenKey("r-1")
		v, _ := e.Get(seenKey)
		if s, err := schema.DecodeSeen(v); err != nil || !s.Logged || s.Seq != 0 {
			t.Errorf("seen row %+v %v, want it to name sequence 0", s, err)
		}
	})
}

// Without retention, the stream that finishes a log row last deletes it; the
// one before it only marks its own entry.
func TestWithoutRetentionTheLastStreamDeletesTheLogRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		attempt := putAttempt(t, e, "billing", "r-1")
		ackAll(t, e, "billing")
		l, ok := e.logRow(0)
		if !ok {
			t.Fatal("the log row went while audit still waits on it")
		}
		if en, _ := l.Entry("billing"); en.State != schema.EntryDelivered || en.Attempts {
			t.Errorf("billing entry %+v", en)
		}
		if en, _ := l.Entry("audit"); en.State != schema.EntryPending {
			t.Errorf("audit entry %+v", en)
		}
		if _, found := e.Get(attempt); found {
			t.Error("attempt row kept without retention")
		}
		ackAll(t, e, "audit")
		if _, ok := e.logRow(0); ok {
			t.Error("log row kept after its last stream was done")
		}
	})
}

// With retention, an acknowledgement keeps the log row, marks its entry
// delivered with when and how long, and keeps the attempt row, flagged for
// the sweep.
func TestARetainedAcknowledgementKeepsTheHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"), committed("r-2"))
		attempt := putAttempt(t, e, "billing", "r-1")
		done := outbox.Done{AtMs: t0 + 5000, DurationMs: 42, Status: 204}
		ackRetained(t, e, "billing", 2, done)
		for seq, rid := range []string{"r-1", "r-2"} {
			l, ok := e.logRow(uint64(seq))
			if !ok {
				t.Fatalf("log row of %s deleted", rid)
			}
			en, _ := l.Entry("billing")
			if en.State != schema.EntryDelivered || en.AtMs != done.AtMs || en.DurationMs != 42 || en.Status != 204 || en.Attempts != (rid == "r-1") {
				t.Errorf("%s entry %+v", rid, en)
			}
		}
		if _, found := e.Get(attempt); !found {
			t.Error("attempt row deleted though retained")
		}
		if len(e.pending("billing")) != 0 {
			t.Error("pending rows kept")
		}
		if _, found := e.backlog("billing"); found {
			t.Error("empty backlog kept")
		}
	})
}

// fireLogSweep fires the log sweeper once and applies its batch.
func fireLogSweep(t *testing.T, e *env, s *outbox.LogSweeper, state []byte) (timers.Fired, bool) {
	t.Helper()
	f, err := s.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()}, timers.DueTimer{Kind: timers.KindLogSweep, State: state})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Batch.Settles || f.Done || f.Batch.Ops() > store.MaxBatchOps-3 {
		t.Fatalf("fired %+v", f)
	}
	return f, e.Apply(f.Batch).Committed
}

func TestTheLogSweepDeletesRowsPastTheirRetentionOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		// 0 and 1 delivered at t0; 2 pending on audit; 3 delivered an
		// hour later; 4 accepted an hour later.
		e.Append(committed("r-0"), committed("r-1"), aborted("r-2"))
		attempt := putAttempt(t, e, "billing", "r-0")
		ackRetained(t, e, "billing", 3, outbox.Done{AtMs: t0})
		e.Clk.Advance(time.Hour)
		e.Append(committed("r-3"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs()})
		e.Append(committed("r-4"))
		e.Clk.Set(t0 + 2*time.Hour.Milliseconds() + 1)

		s := &outbox.LogSweeper{Retention: 2 * time.Hour, Every: time.Minute, Rows: 2}
		var state []byte
		for fires := 0; ; fires++ {
			if fires > 5 {
				t.Fatal("the pass does not end")
			}
			f, ok := fireLogSweep(t, e, s, state)
			if !ok {
				t.Fatal("sweep batch failed its guards")
			}
			if len(f.State) == 0 {
				// r-3 is due at t0+3h, and so is r-4, accepted then.
				if want := t0 + 3*time.Hour.Milliseconds(); f.DueAtMs != want {
					t.Errorf("next pass due %d, want %d", f.DueAtMs, want)
				}
				break
			}
			if f.DueAtMs != e.NowMs() {
				t.Errorf("a pass in progress is due %d, not now", f.DueAtMs)
			}
			state = f.State
		}
		var left []string
		start, end := schema.LogRange()
		for _, row := range e.scan(start, end) {
			l, _ := schema.DecodeLog(row.Value)
			left = append(left, l.RID)
		}
		if want := []string{"r-2", "r-3", "r-4"}; !reflect.DeepEqual(left, want) {
			t.Errorf("log rows left %v, want %v", left, want)
		}
		if _, found := e.Get(attempt); found {
			t.Error("the swept row's attempt row is left")
		}
	})
}

// A row resent between the sweep's read and its batch is kept: the sweep's
// guard is the row as read.
func TestTheLogSweepKeepsARowChangedSinceItRead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-0"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: t0})
		e.Clk.Advance(2 * time.Hour)
		s := &outbox.LogSweeper{Retention: time.Hour}
		f, err := s.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()}, timers.DueTimer{Kind: timers.KindLogSweep})
		if err != nil {
			t.Fatal(err)
		}
		l, _ := e.logRow(0)
		en, _ := l.Entry("billing")
		en.State = schema.EntryPending
		l.Entries[0] = en
		v, err := schema.EncodeLog(l)
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		b.Put(schema.LogKey(0), v)
		e.Apply(b)
		if res := e.Apply(f.Batch); res.Committed {
			t.Fatal("the sweep deleted a row changed since it read it")
		}
		if _, ok := e.logRow(0); !ok {
			t.Fatal("log row gone")
		}
	})
}
