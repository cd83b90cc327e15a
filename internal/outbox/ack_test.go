package outbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/store/storetest"
	"github.com/hookrelay/relay/internal/timers"
)

// freshAcks starts an acknowledgement plan against the stream's backlog as
// it is now.
func freshAcks(t *testing.T, e *env, endpoint string) *outbox.Acks {
	t.Helper()
	key, _ := schema.BacklogKey(endpoint)
	v, found := e.Get(key)
	acks, err := outbox.NewAcks(endpoint, v, found)
	if err != nil {
		t.Fatal(err)
	}
	return acks
}

func putAttempt(t *testing.T, e *env, endpoint, rid string) store.Key {
	t.Helper()
	key, _ := schema.AttemptKey(endpoint, rid)
	v, err := schema.EncodeAttempts(schema.Attempts{Total: 1, Last: []schema.Attempt{{AtMs: e.NowMs(), Status: 503, ErrorClass: "status"}}})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(key, v)
	e.Apply(b)
	return key
}

func TestAcknowledgedRowsAreDeletedAndTheBacklogShrinks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), aborted("b"), committed("c"))
		attemptA := putAttempt(t, e, "billing", "a")
		attemptC := putAttempt(t, e, "billing", "c")
		// Rows with pending rows, as a stream older than heads has them:
		// each costs the most (queue_test.go has the rows the log queues).
		e.unheaded("billing")
		pending := e.pending("billing")
		acks := freshAcks(t, e, "billing")
		for _, pk := range pending[:2] {
			rec, _ := e.record("billing", pk.RID)
			if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
				t.Fatal(err)
			}
		}
		var b store.Batch
		acks.Plan(&b)
		// Rows remain: four per row, the backlog's relative update, the
		// counters' Add and the Add to the minute (minute 0, with no
		// minute an hour back to delete).
		if !b.Settles || b.Ops() != 4*2+3 || b.Ops() > outbox.AckOps(2) {
			t.Errorf("drain %v, %d ops, want %d", b.Settles, b.Ops(), 4*2+3)
		}
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("failed precondition %d", res.Failed)
		}
		for _, rid := range []string{"a", "b"} {
			if _, found := e.record("billing", rid); found {
				t.Errorf("record %s kept", rid)
			}
		}
		if _, found := e.Get(attemptA); found {
			t.Error("attempt row of an acknowledged row kept")
		}
		if _, found := e.Get(attemptC); !found {
			t.Error("attempt row of an unacknowledged row deleted")
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].RID != "c" {
			t.Errorf("pending %+v", p)
		}
		want := schema.Backlog{Rows: 1, Bytes: uint64(len(mustRecord(t, committed("c"))))}
		if got, _ := e.backlog("billing"); got != want || acks.Remaining() != want {
			t.Errorf("backlog %+v, remaining %+v, want %+v", got, acks.Remaining(), want)
		}
		// The other stream is untouched.
		if b, _ := e.backlog("audit"); b.Rows != 3 || len(e.pending("audit")) != 3 {
			t.Errorf("audit backlog %+v", b)
		}
		// The last row deletes the backlog.
		ackAll(t, e, "billing")
		if _, found := e.backlog("billing"); found {
			t.Error("empty backlog row kept")
		}
		if _, found := e.Get(attemptC); found {
			t.Error("attempt row kept")
		}
	})
}

// A plan that acknowledges every row the backlog counts ends the stream
// (its timer is done with it), so it is guarded by the backlog as read: an
// append after that read fails it, nothing is written, and the fire
// re-plans.
func TestAChangedBacklogFailsAPlanThatAcknowledgesEveryRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("first"))
		acks := freshAcks(t, e, "billing")
		rec, _ := e.record("billing", "first")
		if err := acks.Add("first", 0, rec, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		acks.Plan(&b)
		e.Append(committed("second"))
		before := e.all()
		if res := e.Apply(b); res.Committed || res.Failed != 0 {
			t.Fatalf("result %+v, want the backlog guard (0) to fail", res)
		}
		if len(e.all()) != len(before) {
			t.Error("a failed plan wrote rows")
		}
	})
}

// ackFirst plans the acknowledgement of the stream's first pending rows
// against the backlog as it is now.
func ackFirst(t *testing.T, e *env, endpoint string, n int) (*outbox.Acks, store.Batch) {
	t.Helper()
	acks := freshAcks(t, e, endpoint)
	for _, pk := range e.pending(endpoint)[:n] {
		rec, _ := e.record(endpoint, pk.RID)
		if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
	}
	var b store.Batch
	acks.Plan(&b)
	return acks, b
}

// A plan that leaves rows subtracts what it acknowledges from the backlog as
// the batch finds it, so outcomes accepted after its read neither fail it
// nor are lost from the count: acknowledging does not lose to ingest.
func TestAppendsAfterTheReadDoNotFailAPlanThatLeavesRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), aborted("b"), committed("c"))
		_, b := ackFirst(t, e, "billing", 2)
		e.Append(aborted("d"))
		e.Append(committed("e"), aborted("f"))
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("failed precondition %d: an append failed the acknowledgement", res.Failed)
		}
		want := schema.Backlog{Rows: 4}
		for _, o := range []schema.Outcome{committed("c"), aborted("d"), committed("e"), aborted("f")} {
			want.Bytes += uint64(len(mustRecord(t, o)))
		}
		if got, _ := e.backlog("billing"); got != want {
			t.Fatalf("backlog %+v, want %+v: the rows and bytes of c, d, e, f", got, want)
		}
		var left []string
		for _, pk := range e.pending("billing") {
			left = append(left, pk.RID)
		}
		if fmt.Sprint(left) != "[c d e f]" {
			t.Fatalf("pending %v", left)
		}
		// The count stays exact: acknowledging the rest empties it.
		ackAll(t, e, "billing")
		if _, found := e.backlog("billing"); found {
			t.Error("backlog row kept after every row was acknowledged")
		}
	})
}

// go-redis resends a script whose reply it lost, so a batch may run twice.
// The backlog's relative update is not idempotent; the resent run finds the
// pending rows its first run deleted, fails their guards and writes nothing.
func TestAResentAcknowledgementReducesTheBacklogOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), aborted("b"), committed("c"))
		acks, b := ackFirst(t, e, "billing", 2)
		e.Append(aborted("d"))
		res, err := storetest.LostReplies{NamespaceStore: e.St}.Apply(e.Ctx, e.P, b)
		if err != nil {
			t.Fatal(err)
		}
		if res.Committed {
			t.Fatal("the resent run committed: the acknowledgement applied twice")
		}
		want := acks.Remaining()
		want.Rows++
		want.Bytes += uint64(len(mustRecord(t, aborted("d"))))
		if got, _ := e.backlog("billing"); got != want {
			t.Fatalf("backlog %+v, want %+v", got, want)
		}
	})
}

// A plan made for a row that another fire acknowledged meanwhile, and whose
// reservation id was then accepted again (the same outcome, after the
// idempotency window, at a new sequence number), must not commit: it would
// delete the new record and strand the new pending row. The record alone
// cannot tell the two apart, since its bytes are equal; the pending row can.
func TestAStalePlanDoesNotAcknowledgeTheRowThatReplacedIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r"))
		stale, _ := e.record("billing", "r")
		ackAll(t, e, "billing")
		e.Clk.Advance(2 * time.Hour)
		if got := codes(e.Append(committed("r"))); got[0] != outbox.Accepted {
			t.Fatalf("re-accept after the window: %v", got)
		}
		acks := freshAcks(t, e, "billing")
		if err := acks.Add("r", 0, stale, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		acks.Plan(&b)
		if res := e.Apply(b); res.Committed {
			t.Fatal("a stale plan acknowledged the row that replaced its own")
		}
		if _, found := e.record("billing", "r"); !found {
			t.Error("the new record was deleted")
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].Seq != 1 {
			t.Errorf("pending rows %+v, want the new one at sequence 1", p)
		}
	})
}

func TestAcksRefuseRowsTheBacklogDoesNotCount(t *testing.T) {
	rec := outbox.StreamRecord{Record: mustRecord(t, committed("r"))}
	absent, err := outbox.NewAcks("billing", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := absent.Add("r", 0, rec, outbox.Done{}); !errors.Is(err, outbox.ErrBacklogUnderflow) {
		t.Errorf("absent backlog: %v", err)
	}
	one, _ := outbox.NewAcks("billing", schema.EncodeBacklog(schema.Backlog{Rows: 1, Bytes: 1}), true)
	if err := one.Add("r", 0, rec, outbox.Done{}); err != nil {
		t.Fatal(err)
	}
	if err := one.Add("s", 1, rec, outbox.Done{}); !errors.Is(err, outbox.ErrBacklogUnderflow) {
		t.Errorf("second row of one: %v", err)
	}
	if err := one.Add("r", 0, rec, outbox.Done{}); err == nil {
		t.Error("same row twice")
	}
	if one.Len() != 1 || one.Remaining() != (schema.Backlog{}) {
		t.Errorf("len %d, remaining %+v (bytes saturate at 0)", one.Len(), one.Remaining())
	}
	two, _ := outbox.NewAcks("billing", schema.EncodeBacklog(schema.Backlog{Rows: 2, Bytes: 1000}), true)
	if err := two.Add("r", 0, outbox.StreamRecord{}, outbox.Done{}); err == nil {
		t.Error("row without a record")
	}
	if err := two.Add("bad/rid", 0, rec, outbox.Done{}); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("bad rid: %v", err)
	}
	if _, err := outbox.NewAcks("billing", []byte{9}, true); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("corrupt backlog: %v", err)
	}
	if _, err := outbox.NewAcks("Bad", nil, false); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("bad endpoint: %v", err)
	}
	var b store.Batch
	absent.Plan(&b)
	if b.Ops() != 1 || b.Preconditions[0].Kind != store.Absent {
		t.Errorf("an empty plan is the absent guard alone: %+v", b)
	}
	// A backlog row that counts nothing is deleted under its guard, as a
	// fire that finds nothing pending does before it is Done.
	zero := schema.EncodeBacklog(schema.Backlog{})
	empty, _ := outbox.NewAcks("billing", zero, true)
	b = store.Batch{}
	empty.Plan(&b)
	// Nothing acknowledged counts nothing: no Add to the counters.
	if b.Ops() != 2 || b.Ops() > outbox.AckOps(0) || b.Preconditions[0].Kind != store.Equals || b.Writes[0].Kind != store.Delete {
		t.Errorf("zero backlog plan: %+v", b)
	}
}

// The fullest completion of a fire fits one batch, for every split of a
// page of MaxAcksPerBatch rows into acknowledged and failed ones: the
// acknowledgements, an attempt row per failed call, the timer's guard,
// deletion and put, a 410's endpoint guard and disable, the failed
// calls' minute when it is another than the acknowledgements', the head's
// move and, beside acknowledgements, each failed row kept.
func TestTheFullestCompletionFitsOneBatch(t *testing.T) {
	const timer, disable, head, keep = 3, 2, 1, 2
	for n := 0; n <= outbox.MaxAcksPerBatch; n++ {
		failed := outbox.MaxAcksPerBatch - n
		ops := outbox.AckOps(n) + failed + timer + disable + head
		if failed > 0 {
			ops += outbox.MinuteOps
		}
		if n > 0 {
			ops += keep * failed
		}
		if ops > store.MaxBatchOps {
			t.Errorf("%d acknowledged, %d failed: %d operations", n, failed, ops)
		}
	}
	// AckOps bounds both shapes of a plan: every row counted acknowledged,
	// and rows left.
	for _, counted := range []uint64{outbox.MaxAcksPerBatch, outbox.MaxAcksPerBatch + 1} {
		acks, err := outbox.NewAcks("billing", schema.EncodeBacklog(schema.Backlog{Rows: counted, Bytes: 1 << 20}), true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range outbox.MaxAcksPerBatch {
			if err := acks.Add(fmt.Sprintf("r-%02d", i), uint64(i), outbox.StreamRecord{Record: store.Value("record")}, outbox.Done{}); err != nil {
				t.Fatal(err)
			}
		}
		var b store.Batch
		acks.Plan(&b)
		if b.Ops() > outbox.AckOps(outbox.MaxAcksPerBatch) {
			t.Errorf("backlog of %d: %d operations, more than AckOps %d", counted, b.Ops(), outbox.AckOps(outbox.MaxAcksPerBatch))
		}
		if err := b.Validate(); err != nil {
			t.Errorf("backlog of %d: %v", counted, err)
		}
	}
}

// MaxAcksPerBatch rows and the timer's completion fit one batch, with five
// operations to spare for the completion and two for a failed call's
// minute.
func TestAFullPageOfAcknowledgementsAndTheTimerCompletionFitOneBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		var in []schema.Outcome
		for i := range outbox.MaxAcksPerBatch {
			in = append(in, committed(fmt.Sprintf("r-%02d", i)))
		}
		e.Append(in...)
		// Rows with pending rows, which cost the most.
		e.unheaded("billing")
		acks := freshAcks(t, e, "billing")
		for _, pk := range e.pending("billing") {
			rec, _ := e.record("billing", pk.RID)
			if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{AtMs: 1_700_000_000_000}); err != nil {
				t.Fatal(err)
			}
		}
		var b store.Batch
		acks.Plan(&b)
		if b.Ops() != outbox.AckOps(outbox.MaxAcksPerBatch) || b.Ops()+5+outbox.MinuteOps > store.MaxBatchOps {
			t.Fatalf("%d ops", b.Ops())
		}
		timer, _ := e.deliveryTimer("billing")
		b.RequireEquals(timer.Key, timer.Raw)
		b.Delete(timer.Key)
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("failed precondition %d", res.Failed)
		}
		if _, found := e.backlog("billing"); found || len(e.pending("billing")) != 0 {
			t.Error("rows remain")
		}
		if _, found := e.deliveryTimer("billing"); found {
			t.Error("timer remains")
		}
		if rows := e.timers(timers.KindOutcomeDelivery, "billing"); len(rows) != 0 {
			t.Errorf("%d timers", len(rows))
		}
	})
}

// The byte count is a gauge: drifted below the records' sizes, it stops at 0
// rather than refusing acknowledgements, even when two plans read it before
// either applied, so neither fails and the rows are not sent again.
func TestADriftedByteCountStopsAtZeroInsteadOfRefusingAcknowledgements(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"), aborted("b"), committed("c"))
		key, _ := schema.BacklogKey("billing")
		var drift store.Batch
		drift.Put(key, schema.EncodeBacklog(schema.Backlog{Rows: 3, Bytes: 10}))
		e.Apply(drift)
		pending := e.pending("billing")
		plan := func(i int) store.Batch {
			acks := freshAcks(t, e, "billing")
			rec, _ := e.record("billing", pending[i].RID)
			if err := acks.Add(pending[i].RID, pending[i].Seq, rec, outbox.Done{}); err != nil {
				t.Fatal(err)
			}
			var b store.Batch
			acks.Plan(&b)
			return b
		}
		first, second := plan(0), plan(1)
		for _, b := range []store.Batch{first, second} {
			res, err := e.St.Apply(t.Context(), e.P, b)
			if err != nil || !res.Committed {
				t.Fatalf("acknowledgement = %+v, %v; want committed", res, err)
			}
		}
		if got, _ := e.backlog("billing"); got != (schema.Backlog{Rows: 1}) {
			t.Fatalf("backlog %+v, want 1 row and bytes at 0", got)
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].RID != "c" {
			t.Fatalf("pending %+v", p)
		}
	})
}
