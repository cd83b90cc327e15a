package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/store/storetest"
	"github.com/hookrelay/relay/internal/timers"
)

// spyStore delegates to a real store and lets a test see, or get in front
// of, each Apply.
type spyStore struct {
	store.NamespaceStore
	mu          sync.Mutex
	beforeApply func(b store.Batch)
	applied     []store.Batch
}

func (s *spyStore) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	s.mu.Lock()
	hook := s.beforeApply
	s.applied = append(s.applied, b)
	s.mu.Unlock()
	if hook != nil {
		hook(b)
	}
	return s.NamespaceStore.Apply(ctx, p, b)
}

func TestAcceptedThenDuplicateThenConflictAlsoAfterDelivery(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("first: %v", got)
		}
		before := e.all()
		different := committed("r-1")
		different.Committed.BytesStored++
		st := e.Append(committed("r-1"), different)
		if !reflect.DeepEqual(codes(st), []outbox.Code{outbox.Duplicate, outbox.Conflict}) {
			t.Fatalf("again: %v", st)
		}
		if st[1].Detail == "" {
			t.Error("conflict has no detail")
		}
		if after := e.all(); !reflect.DeepEqual(after, before) {
			t.Error("a duplicate or conflict changed the partition")
		}
		// Delivered and acknowledged: the seen row still answers.
		ackAll(t, e, "billing")
		if _, found := e.record("billing", "r-1"); found {
			t.Fatal("record not acknowledged")
		}
		st = e.Append(committed("r-1"), different)
		if !reflect.DeepEqual(codes(st), []outbox.Code{outbox.Duplicate, outbox.Conflict}) {
			t.Fatalf("after delivery: %v", st)
		}
		if e.sequence() != 1 || len(e.pending("billing")) != 0 {
			t.Error("an answer after delivery wrote rows")
		}
	})
}

// ackAll acknowledges every pending row of a stream, as a delivery fire
// would.
func ackAll(t *testing.T, e *env, endpoint string) {
	t.Helper()
	acks := freshAcks(t, e, endpoint)
	for _, pk := range e.pending(endpoint) {
		rec, ok := e.record(endpoint, pk.RID)
		if !ok {
			t.Fatalf("no record for %s", pk.RID)
		}
		if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
	}
	var b store.Batch
	acks.Plan(&b)
	if res := e.Apply(b); !res.Committed {
		t.Fatalf("ack failed precondition %d", res.Failed)
	}
}

func TestWindowExpiryMakesTheReservationIDNewAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackAll(t, e, "billing")
		e.Clk.Advance(time.Hour - time.Millisecond)
		different := aborted("r-1")
		if got := codes(e.Append(different)); got[0] != outbox.Conflict {
			t.Fatalf("inside the window: %v", got)
		}
		e.Clk.Advance(time.Millisecond)
		if got := codes(e.Append(different)); got[0] != outbox.Accepted {
			t.Fatalf("after the window: %v", got)
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Conflict {
			t.Fatalf("the new seen row answers: %v", got)
		}
		if p := e.pending("billing"); len(p) != 1 || p[0].Seq != 1 {
			t.Errorf("pending %+v", p)
		}
	})
}

// A rid whose seen row expired while its earlier record still waits (the
// endpoint was down for longer than the window) is not stored twice: one
// record per stream and rid, or the backlog could never drain.
func TestExpiredRIDStillPendingIsNotStoredAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: false})
		e.Append(committed("r-1"))
		e.Clk.Advance(2 * time.Hour)
		rec, _ := e.record("billing", "r-1")
		got := e.Append(committed("r-1"), aborted("r-1"), committed("r-2"))
		if !reflect.DeepEqual(codes(got), []outbox.Code{outbox.Duplicate, outbox.Conflict, outbox.Accepted}) {
			t.Fatalf("statuses %v", got)
		}
		if now, _ := e.record("billing", "r-1"); string(now.Record) != string(rec.Record) {
			t.Error("record replaced")
		}
		if b, _ := e.backlog("billing"); b.Rows != 2 || len(e.pending("billing")) != 2 {
			t.Errorf("backlog %+v, pending %d", b, len(e.pending("billing")))
		}
	})
}

func TestNoEndpointWhenNoFilterTakesTheKind(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		if got := e.Append(committed("r-0")); got[0].Code != outbox.NoEndpoint {
			t.Fatalf("no endpoints at all: %v", got)
		}
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindCommitted}})
		before := e.all()
		got := e.Append(aborted("r-1"))
		if got[0].Code != outbox.NoEndpoint || got[0].Detail != "no endpoint of this namespace receives aborted outcomes" {
			t.Fatalf("filtered: %+v", got)
		}
		if !reflect.DeepEqual(e.all(), before) {
			t.Error("a refused outcome wrote rows")
		}
		// Refused, not remembered: once an endpoint takes it, it is new.
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		if got := codes(e.Append(aborted("r-1"))); got[0] != outbox.Accepted {
			t.Errorf("after adding an endpoint: %v", got)
		}
	})
}

func TestFanOutWritesOneStreamPerMatchingEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		e.putEndpoint("commits", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindCommitted}})
		e.putEndpoint("aborts", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.Append(committed("r-1"), aborted("r-2"), committed("r-3"))
		rec1, rec2, rec3 := mustRecord(t, committed("r-1")), mustRecord(t, aborted("r-2")), mustRecord(t, committed("r-3"))
		want := map[string][]uint64{"all": {0, 1, 2}, "commits": {0, 2}, "aborts": {1}}
		bytesOf := map[string]int{"all": len(rec1) + len(rec2) + len(rec3), "commits": len(rec1) + len(rec3), "aborts": len(rec2)}
		for ep, seqs := range want {
			var got []uint64
			for _, pk := range e.pending(ep) {
				got = append(got, pk.Seq)
				if _, ok := e.record(ep, pk.RID); !ok {
					t.Errorf("%s: pending %s has no record", ep, pk.RID)
				}
			}
			if !reflect.DeepEqual(got, seqs) {
				t.Errorf("%s: pending seqs %v, want %v", ep, got, seqs)
			}
			b, _ := e.backlog(ep)
			if b.Rows != uint64(len(seqs)) || b.Bytes != uint64(bytesOf[ep]) {
				t.Errorf("%s: backlog %+v", ep, b)
			}
			if _, ok := e.deliveryTimer(ep); !ok {
				t.Errorf("%s: no delivery timer", ep)
			}
		}
		if got, _ := e.record("all", "r-2"); string(got.Record) != string(rec2) {
			t.Error("stored record differs from the outcome's encoding")
		}
		if e.sequence() != 3 {
			t.Errorf("sequence %d", e.sequence())
		}
		o, err := schema.DecodeRecord("r-2", rec2)
		if err != nil || !reflect.DeepEqual(o, aborted("r-2")) {
			t.Errorf("decoded %+v, %v", o, err)
		}
	})
}

func TestDeliveryTimerIsCreatedOrPulledOnlyWhenItShouldBe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		now := e.NowMs()
		later := now + 60_000
		// created: enabled, no timer.
		e.putEndpoint("fresh", schema.Endpoint{Enabled: true})
		// pulled: idle, no failed fire, due later.
		e.putEndpoint("idle", schema.Endpoint{Enabled: true})
		e.putTimer(later, timers.KindOutcomeDelivery, "idle", timers.EncodeIdle(deliveryState(t, 0)))
		// left: backing off.
		e.putEndpoint("failing", schema.Endpoint{Enabled: true})
		e.putTimer(later, timers.KindOutcomeDelivery, "failing", timers.EncodeIdle(deliveryState(t, 3)))
		// left: paced, out of its rate_limit's tokens until later.
		e.putEndpoint("paced", schema.Endpoint{Enabled: true, RateLimit: 5})
		e.putTimer(later, timers.KindOutcomeDelivery, "paced", timers.EncodeIdle(encodeState(t, schema.DeliveryState{
			Tokens: &schema.TokenBucket{MilliTokens: 200, AtMs: now, Paced: true}})))
		// pulled: a drained stream's timer kept for its bucket, tokens left.
		e.putEndpoint("refilling", schema.Endpoint{Enabled: true, RateLimit: 5})
		e.putTimer(later, timers.KindOutcomeDelivery, "refilling", timers.EncodeIdle(encodeState(t, schema.DeliveryState{
			Tokens: &schema.TokenBucket{MilliTokens: 2000, AtMs: now}})))
		// left: leased by a firing worker.
		e.putEndpoint("firing", schema.Endpoint{Enabled: true})
		e.putTimer(later, timers.KindOutcomeDelivery, "firing", leasedValue(now-5, nil))
		// none: disabled.
		e.putEndpoint("off", schema.Endpoint{Enabled: false, DisabledReason: "gone"})
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		check := func(ep string, wantDue int64, wantLeased bool) {
			t.Helper()
			r, ok := e.deliveryTimer(ep)
			if !ok || r.DueAtMs != wantDue || (r.Lease != nil) != wantLeased {
				t.Errorf("%s: timer %+v, %v; want due %d", ep, r, ok, wantDue)
			}
		}
		check("fresh", now, false)
		if r, _ := e.deliveryTimer("fresh"); len(r.State) != 0 {
			t.Errorf("fresh timer state % x", r.State)
		}
		check("idle", now, false)
		check("failing", later, false)
		check("paced", later, false)
		check("refilling", now, false)
		check("firing", later, true)
		if r, ok := e.deliveryTimer("off"); ok {
			t.Errorf("disabled endpoint got a timer %+v", r)
		}
		// A disabled endpoint still accumulates rows.
		for _, ep := range []string{"fresh", "idle", "failing", "paced", "refilling", "firing", "off"} {
			if b, _ := e.backlog(ep); b.Rows != 1 {
				t.Errorf("%s: backlog %+v", ep, b)
			}
		}
		// A timer already due is left as it is.
		e.Clk.Advance(time.Second)
		e.Append(committed("r-2"))
		check("fresh", now, false)
	})
}

// A batch that moved a timer which a worker claims before the batch applies
// fails its guard and is re-planned: the claimed timer is left alone.
func TestTimerClaimedBetweenReadAndApplyIsLeftAlone(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store = spy
		later := e.NowMs() + 60_000
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		key := e.putTimer(later, timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(nil))
		spy.beforeApply = func(store.Batch) {
			spy.beforeApply = nil
			var b store.Batch
			b.Delete(key)
			b.Put(timers.Key(later+30_000, timers.KindOutcomeDelivery, "billing"), leasedValue(later, nil))
			e.Apply(b)
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if len(spy.applied) != 2 {
			t.Errorf("%d applies, want a failed one and its re-plan", len(spy.applied))
		}
		if r, _ := e.deliveryTimer("billing"); r.Lease == nil || r.DueAtMs != later+30_000 {
			t.Errorf("timer %+v", r)
		}
	})
}

func TestOutcomesOfOneRequestShareBatchesButAnswerEachItem(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store = spy
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindCommitted}})
		var in []schema.Outcome
		var want []outbox.Code
		for i := range 40 {
			switch {
			case i == 7:
				bad := committed("bad")
				bad.Repository = ""
				in, want = append(in, bad), append(want, outbox.Invalid)
			case i == 9:
				in, want = append(in, aborted("r-9")), append(want, outbox.NoEndpoint)
			case i == 20:
				in, want = append(in, committed("r-3")), append(want, outbox.Duplicate)
			case i == 21:
				// r-4 was accepted above: its seen row answers before any filter.
				in, want = append(in, aborted("r-4")), append(want, outbox.Conflict)
			case i == 22:
				other := committed("r-5")
				other.Committed.NewToRepo = 1
				in, want = append(in, other), append(want, outbox.Conflict)
			default:
				in, want = append(in, committed(fmt.Sprintf("r-%d", i))), append(want, outbox.Accepted)
			}
		}
		st := e.Append(in...)
		if !reflect.DeepEqual(codes(st), want) {
			t.Fatalf("statuses\n%v\nwant\n%v", codes(st), want)
		}
		if st[7].Detail != "repository must not be empty" {
			t.Errorf("invalid detail %q", st[7].Detail)
		}
		accepted := uint64(35)
		if b, _ := e.backlog("billing"); b.Rows != accepted || e.sequence() != accepted {
			t.Errorf("backlog %+v, sequence %d", b, e.sequence())
		}
		if n := len(spy.applied); n > 3 {
			t.Errorf("%d batches for 35 outcomes to one endpoint", n)
		}
		for i, b := range spy.applied {
			if b.Ops() > store.MaxBatchOps || b.Settles {
				t.Errorf("batch %d: %d ops, drain %v", i, b.Ops(), b.Settles)
			}
		}
		// Sequence numbers follow the request order.
		for i, pk := range e.pending("billing") {
			if pk.Seq != uint64(i) {
				t.Errorf("pending %d has seq %d", i, pk.Seq)
			}
		}
	})
}

func TestOneOutcomeToEightEndpointsFitsOneBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store = spy
		later := e.NowMs() + 1000
		for i := range outbox.DefaultMaxEndpoints {
			id := fmt.Sprintf("ep%d", i)
			e.putEndpoint(id, schema.Endpoint{Enabled: true})
			e.putTimer(later, timers.KindOutcomeDelivery, id, timers.EncodeIdle(nil))
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		// Every operation IngestOps counts but the guard of an earlier
		// outcome under the rid, which has none.
		if len(spy.applied) != 1 || spy.applied[0].Ops() != outbox.IngestOps(8)-1 {
			t.Fatalf("%d batches, first of %d ops; want one of %d", len(spy.applied), spy.applied[0].Ops(), outbox.IngestOps(8)-1)
		}
		if outbox.IngestOps(outbox.HardMaxEndpoints) > store.MaxBatchOps {
			t.Error("HardMaxEndpoints does not fit a batch")
		}
		if outbox.IngestOps(outbox.MaxIngestEndpoints) > store.MaxBatchOps || outbox.IngestOps(outbox.MaxIngestEndpoints+1) <= store.MaxBatchOps {
			t.Errorf("MaxIngestEndpoints %d is not the most one outcome's batch takes", outbox.MaxIngestEndpoints)
		}
		// With the timers due and the sweep timers in place (each
		// guarded) and the streams' heads in place, fit outcomes share a
		// batch (36 shared + 3 each: the seen guard and row, the log row;
		// no pending rows), one more does not.
		spy.applied = nil
		fit := (store.MaxBatchOps - 36) / 3
		var more []schema.Outcome
		for i := range fit + 1 {
			more = append(more, committed(fmt.Sprintf("r-%d", 2+i)))
		}
		e.Append(more...)
		if len(spy.applied) != 2 || spy.applied[0].Ops() != 36+3*fit {
			t.Errorf("%d batches for %d outcomes to 8 endpoints, the first of %d ops", len(spy.applied), fit+1, spy.applied[0].Ops())
		}
	})
}

// A namespace over its limit of endpoints takes outcomes up to the most
// one outcome's batch fans out to, each endpoint getting the outcome in
// one batch at the worst case (no heads, every timer pulled); one more
// endpoint than that is refused and nothing is written.
func TestIngestFansOutToAsManyEndpointsAsOneBatchTakes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store = spy
		later := e.NowMs() + 1000
		for i := range outbox.MaxIngestEndpoints {
			id := fmt.Sprintf("ep%02d", i)
			e.putEndpoint(id, schema.Endpoint{Enabled: true})
			e.putTimer(later, timers.KindOutcomeDelivery, id, timers.EncodeIdle(nil))
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if len(spy.applied) != 1 || spy.applied[0].Ops() != outbox.IngestOps(outbox.MaxIngestEndpoints)-1 {
			t.Fatalf("%d batches, want one of %d ops", len(spy.applied), outbox.IngestOps(outbox.MaxIngestEndpoints)-1)
		}
		for i := range outbox.MaxIngestEndpoints {
			if rows := e.pending(fmt.Sprintf("ep%02d", i)); len(rows) != 1 {
				t.Fatalf("ep%02d has %d rows pending, want 1", i, len(rows))
			}
		}
		e.putEndpoint("one-more", schema.Endpoint{Enabled: true})
		before := e.all()
		if _, err := e.App.Append(e.Ctx, e.P, []schema.Outcome{committed("r-2")}); !errors.Is(err, outbox.ErrTooManyEndpoints) {
			t.Fatalf("%d endpoints: %v, want ErrTooManyEndpoints", outbox.MaxIngestEndpoints+1, err)
		}
		if !reflect.DeepEqual(e.all(), before) {
			t.Fatal("a refused ingest changed the namespace")
		}
		// Deleting the one too many is the way back.
		if _, err := (&outbox.Admin{Store: e.St, Clock: e.Clk}).DeleteEndpoint(e.Ctx, e.P, "one-more", false); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if got := codes(e.Append(committed("r-2"))); got[0] != outbox.Accepted {
			t.Fatalf("append after the delete: %v", got)
		}
	})
}

// go-redis may run a batch again after a network error; the second run must
// fail its own guards rather than apply twice.
func TestABatchRunTwiceAppliesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store = spy
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		before := e.all()
		if res := e.Apply(spy.applied[0]); res.Committed {
			t.Fatal("a replayed ingest batch committed again")
		}
		if !reflect.DeepEqual(e.all(), before) {
			t.Error("a replayed batch changed rows")
		}
	})
}

// When the first run of an ingest batch commits and only its resent run
// answers (failing the guard the first run falsified), the outcomes are
// reported accepted, not as duplicates of themselves, and stored once.
func TestAnOutcomeWhoseReplyWasLostIsReportedAccepted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.App.Store = storetest.LostReplies{NamespaceStore: e.St}
		got := codes(e.Append(committed("r-1"), committed("r-2")))
		if !reflect.DeepEqual(got, []outbox.Code{outbox.Accepted, outbox.Accepted}) {
			t.Fatalf("answers %v, want both accepted", got)
		}
		if n := len(e.pending("billing")); n != 2 || e.sequence() != 2 {
			t.Fatalf("%d pending rows, sequence %d; want 2 and 2", n, e.sequence())
		}
		// Sent again by the producer, they are duplicates.
		e.App.Store = e.St
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Duplicate {
			t.Fatalf("resent by the producer: %v, want duplicate", got)
		}
	})
}

// A later item of the same request under the same reservation id is another
// outcome: a lost reply for the first must not make it "accepted".
func TestALostReplyAcceptsOnlyTheOutcomeItStored(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.App.Store = storetest.LostReplies{NamespaceStore: e.St}
		got := codes(e.Append(committed("r-1"), aborted("r-1")))
		if !reflect.DeepEqual(got, []outbox.Code{outbox.Accepted, outbox.Conflict}) {
			t.Fatalf("answers %v, want accepted then conflict", got)
		}
		rec, _ := e.record("billing", "r-1")
		if o, err := schema.DecodeRecord("r-1", rec.Record); err != nil || o.Committed == nil {
			t.Fatalf("stored %+v, %v; want the committed outcome", o, err)
		}
	})
}

// An ingest that lands between another's read and apply fails its guards;
// the loser re-reads and both end up stored at distinct sequence numbers.
func TestConcurrentIngestBetweenReadAndApplyIsReplanned(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		other := &outbox.Appender{Store: e.St, Clock: e.Clk}
		spy.beforeApply = func(store.Batch) {
			spy.beforeApply = nil
			if _, err := other.Append(e.Ctx, e.P, []schema.Outcome{committed("other")}); err != nil {
				t.Error(err)
			}
		}
		e.App.Store = spy
		if got := codes(e.Append(committed("mine"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if len(spy.applied) != 2 {
			t.Errorf("%d applies, want 2", len(spy.applied))
		}
		p := e.pending("billing")
		if len(p) != 2 || p[0].RID != "other" || p[1].RID != "mine" || p[1].Seq != 1 {
			t.Errorf("pending %+v", p)
		}
		if b, _ := e.backlog("billing"); b.Rows != 2 || e.sequence() != 2 {
			t.Errorf("backlog %+v, sequence %d", b, e.sequence())
		}
	})
}

func TestEndlessContentionEndsInErrContendedWritingNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spy := &spyStore{NamespaceStore: e.St}
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		n := 0
		spy.beforeApply = func(store.Batch) {
			// Another writer changes the endpoint every time.
			n++
			e.putEndpoint("billing", schema.Endpoint{Enabled: true, UpdatedMs: int64(n)})
		}
		e.App.Store = spy
		e.App.MaxRetries = 3
		var waits []time.Duration
		e.App.Wait = func(_ context.Context, d time.Duration) error {
			waits = append(waits, d)
			return nil
		}
		_, err := e.App.Append(e.Ctx, e.P, []schema.Outcome{committed("r-1")})
		if !errors.Is(err, outbox.ErrContended) {
			t.Fatalf("err %v", err)
		}
		if n != 4 {
			t.Errorf("%d applies, want 1 + 3 retries", n)
		}
		// Each retry waits, and the waits grow: 50-100 us, 100-200 us, 200-400 us.
		if len(waits) != 3 || waits[0] > 100*time.Microsecond || waits[2] < 200*time.Microsecond {
			t.Errorf("waits %v, want three growing ones", waits)
		}
		if _, found := e.record("billing", "r-1"); found || e.sequence() != 0 {
			t.Error("a contended append wrote rows")
		}
	})
}

func TestManyConcurrentAppendersAcceptEachOutcomeOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		const workers, each = 16, 2
		var wg sync.WaitGroup
		errs := make(chan error, workers*2)
		round := func(want outbox.Code) {
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var in []schema.Outcome
					for i := range each {
						in = append(in, committed(fmt.Sprintf("w%d-%d", w, i)))
					}
					st, err := e.App.Append(e.Ctx, e.P, in)
					if err != nil {
						errs <- err
						return
					}
					for i, s := range st {
						if s.Code != want {
							errs <- fmt.Errorf("w%d-%d: %s, want %s", w, i, s.Code, want)
						}
					}
				}()
			}
			wg.Wait()
		}
		round(outbox.Accepted)
		round(outbox.Duplicate)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		const total = workers * each
		if e.sequence() != total {
			t.Errorf("sequence %d, want %d", e.sequence(), total)
		}
		for _, ep := range []string{"billing", "audit"} {
			b, _ := e.backlog(ep)
			p := e.pending(ep)
			if b.Rows != total || len(p) != total {
				t.Errorf("%s: backlog %+v, %d pending", ep, b, len(p))
			}
			seqs := map[uint64]bool{}
			for _, pk := range p {
				seqs[pk.Seq] = true
				if _, ok := e.record(ep, pk.RID); !ok {
					t.Errorf("%s: no record for %s", ep, pk.RID)
				}
			}
			if len(seqs) != total {
				t.Errorf("%s: %d distinct sequence numbers", ep, len(seqs))
			}
		}
		start, end := schema.SeenRange()
		if n := len(e.scan(start, end)); n != total {
			t.Errorf("%d seen rows", n)
		}
	})
}

func TestInvalidOutcomesAndConfigAreRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		bad := committed("r-1")
		bad.Committed.Refs[0].New = "nothex"
		st := e.Append(bad)
		if st[0].Code != outbox.Invalid || e.sequence() != 0 {
			t.Errorf("invalid outcome: %+v", st)
		}
		if _, err := e.App.Append(e.Ctx, store.Partition{Namespace: "Bad"}, nil); !errors.Is(err, store.ErrInvalidPartition) {
			t.Errorf("bad partition: %v", err)
		}
		tooMany := make([]schema.Outcome, outbox.MaxAppendOutcomes+1)
		if _, err := e.App.Append(e.Ctx, e.P, tooMany); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("101 outcomes: %v", err)
		}
	})
}

// A stream whose delivery timer does not decode keeps that row as it is for
// an operator, and ingest into the namespace goes on: the other streams get
// their rows and timers, and no second timer is created beside the corrupt one.
func TestACorruptTimerRowNeitherBlocksIngestNorIsOverwritten(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("broken", schema.Endpoint{Enabled: true})
		e.putEndpoint("healthy", schema.Endpoint{Enabled: true})
		corrupt := store.Value{0x7f, 0x01}
		key := e.putTimer(e.NowMs()+60_000, timers.KindOutcomeDelivery, "broken", corrupt)
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		if v, found := e.Get(key); !found || !bytes.Equal(v, corrupt) {
			t.Fatalf("corrupt timer row changed: %x %v", v, found)
		}
		if rows := e.timers(timers.KindOutcomeDelivery, "broken"); len(rows) != 1 || rows[0].Err == nil {
			t.Fatalf("broken stream timers %+v, want only the corrupt one", rows)
		}
		if r, ok := e.deliveryTimer("healthy"); !ok || r.DueAtMs != e.NowMs() {
			t.Fatalf("healthy stream timer %+v %v", r, ok)
		}
		for _, ep := range []string{"broken", "healthy"} {
			if b, _ := e.backlog(ep); b.Rows != 1 {
				t.Errorf("%s: backlog %+v", ep, b)
			}
		}
	})
}

// A stream parked when its endpoint was disabled is woken by the next ingest
// once the endpoint is enabled, with its count of failed fires reset.
func TestIngestWakesAParkedTimerOfAnEnabledEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putTimer(timers.NeverMs, timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(deliveryState(t, 3)))
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		r, ok := e.deliveryTimer("billing")
		if !ok || r.DueAtMs != e.NowMs() {
			t.Fatalf("timer %+v %v, want due now", r, ok)
		}
		st, err := schema.DecodeDeliveryState(r.State)
		if err != nil || st.FailedFires != 0 {
			t.Fatalf("state %+v %v, want no failed fire", st, err)
		}
		if n := len(e.timers(timers.KindOutcomeDelivery, "billing")); n != 1 {
			t.Fatalf("%d delivery timers, want 1", n)
		}
	})
}

// Ingest refuses, writing nothing, a backlog count it would take past
// store.MaxCounter: acknowledgements could never reduce such a count.
func TestIngestRefusesABacklogPastTheLargestCounter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"))
		key, _ := schema.BacklogKey("billing")
		near := schema.Backlog{Rows: 1, Bytes: store.MaxCounter - 10}
		var b store.Batch
		b.Put(key, schema.EncodeBacklog(near))
		e.Apply(b)
		before := e.all()
		_, err := e.App.Append(e.Ctx, e.P, []schema.Outcome{committed("b")})
		if !errors.Is(err, outbox.ErrBacklogFull) {
			t.Fatalf("append = %v, want ErrBacklogFull", err)
		}
		if after := e.all(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("a refused append wrote:\n%v\nwas\n%v", after, before)
		}
	})
}

// An accepted outcome's status names its sequence number, and whether its
// batch left a stream due that no fire holds, which only a scan finds:
// a new timer, or an idle one due already. A leased timer, or one waiting
// out a backoff, is not due for these rows.
func TestStatusesNameTheirSequenceAndWhetherAStreamIsDue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		st := e.Append(committed("r-1"), committed("r-2"))
		if st[0].Seq != 0 || st[1].Seq != 1 || !st[0].Due || !st[1].Due {
			t.Fatalf("a new timer: %+v", st)
		}
		if st := e.Append(committed("r-3")); st[0].Seq != 2 || !st[0].Due {
			t.Fatalf("an idle timer due already: %+v", st)
		}
		timer, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.Delete(timer.Key)
		e.Apply(b)
		leased := e.putTimer(e.NowMs()+30_000, timers.KindOutcomeDelivery, "billing", leasedValue(e.NowMs(), nil))
		if st := e.Append(committed("r-4")); st[0].Seq != 3 || st[0].Due {
			t.Fatalf("a leased timer: %+v", st)
		}
		b = store.Batch{}
		b.Delete(leased)
		e.Apply(b)
		e.putTimer(e.NowMs()+60_000, timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(deliveryState(t, 2)))
		if st := e.Append(committed("r-5")); st[0].Seq != 4 || st[0].Due {
			t.Fatalf("a stream backing off: %+v", st)
		}
		if st := e.Append(committed("r-5")); st[0].Code != outbox.Duplicate || st[0].Due {
			t.Fatalf("a duplicate: %+v", st)
		}
	})
}

// An accepted outcome's status carries its log row as committed only when
// its reservation id was never accepted before: one accepted again past
// the window may have the earlier outcome's attempt row beside it, which a
// fire must read.
func TestAStatusCarriesTheLogRowOfAReservationIDNeverAcceptedBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.App.Window = time.Hour
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		st := e.Append(committed("r-1"), committed("r-2"))
		for i, s := range st {
			stored, ok := e.Get(schema.LogKey(s.Seq))
			if !ok || s.Log == nil || !bytes.Equal(s.Log, stored) {
				t.Fatalf("status %d: log %q, stored %q", i, s.Log, stored)
			}
		}
		if st := e.Append(committed("r-1")); st[0].Code != outbox.Duplicate || st[0].Log != nil {
			t.Fatalf("a duplicate: %+v", st[0])
		}
		ackAll(t, e, "billing")
		e.Clk.Advance(time.Hour)
		st = e.Append(committed("r-1"))
		if st[0].Code != outbox.Accepted || st[0].Log != nil {
			t.Fatalf("accepted again past the window: %+v", st[0])
		}
	})
}

// The Due hook is told once of each committed batch that leaves a stream
// due that no fire holds, with the timer rows as the batch left them: the
// timer it wrote, or the idle one already due it depends on. Taken, the
// statuses are not Due; declined, they are. A leased timer, or one
// waiting out a backoff, is not told of.
func TestTheDueHookIsToldOfTheTimersABatchLeftDue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		var told [][]store.Entry
		take := true
		e.App.Due = func(p store.Partition, due []store.Entry, _ outbox.Handed) bool {
			if p != e.P {
				t.Fatalf("told of %v, want %v", p, e.P)
			}
			told = append(told, due)
			return take
		}
		st := e.Append(committed("r-1"), committed("r-2"))
		timer, _ := e.deliveryTimer("billing")
		want := []store.Entry{{Key: timer.Key, Value: timer.Raw}}
		if len(told) != 1 || fmt.Sprint(told[0]) != fmt.Sprint(want) || st[0].Due || st[1].Due {
			t.Fatalf("a new timer: told %v, want once %v; statuses %+v", told, want, st)
		}
		take = false
		if st := e.Append(committed("r-3")); len(told) != 2 || fmt.Sprint(told[1]) != fmt.Sprint(want) || !st[0].Due {
			t.Fatalf("an idle timer due already, declined: told %v, want %v; status %+v", told, want, st)
		}
		var b store.Batch
		b.Delete(timer.Key)
		e.Apply(b)
		leased := e.putTimer(e.NowMs()+30_000, timers.KindOutcomeDelivery, "billing", leasedValue(e.NowMs(), nil))
		e.Append(committed("r-4"))
		b = store.Batch{}
		b.Delete(leased)
		e.Apply(b)
		backingOff := e.putTimer(e.NowMs()+60_000, timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(deliveryState(t, 2)))
		e.Append(committed("r-5"))
		if len(told) != 2 {
			t.Fatalf("told of a leased or backing-off timer: %v", told[2:])
		}
		b = store.Batch{}
		b.Delete(backingOff)
		e.Apply(b)
		e.putTimer(e.NowMs()+60_000, timers.KindOutcomeDelivery, "billing", timers.EncodeIdle(nil))
		e.Append(committed("r-6"))
		pulled, _ := e.deliveryTimer("billing")
		want = []store.Entry{{Key: pulled.Key, Value: pulled.Raw}}
		if len(told) != 3 || fmt.Sprint(told[2]) != fmt.Sprint(want) || pulled.DueAtMs != e.NowMs() {
			t.Fatalf("a timer pulled forward: told %v, want %v", told[2:], want)
		}
	})
}

// With Hold, a new stream's timer is written held by this process, due
// when the lease ends and dated now before it, and handed to Due; without
// Due, Hold is not asked and the timer is idle.
func TestANewStreamsTimerIsWrittenHeldWhenTheAppenderHolds(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		var told []store.Entry
		var rows []outbox.StreamRef
		var streams map[string]outbox.StreamRows
		e.App.Due = func(_ store.Partition, due []store.Entry, h outbox.Handed) bool {
			told, rows, streams = append(told, due...), append(rows, h.Rows...), h.Streams
			return true
		}
		e.App.Hold = func() time.Duration { return 30 * time.Second }
		st := e.Append(committed("r-1"))
		if len(rows) != 1 || rows[0].RID != "r-1" || rows[0].Seq != st[0].Seq || !rows[0].Fresh || !bytes.Equal(rows[0].Log, st[0].Log) {
			t.Fatalf("Due was handed rows %+v, want r-1's as committed (%+v)", rows, st[0])
		}
		for _, id := range []string{"audit", "billing"} {
			row, _ := e.deliveryTimer(id)
			if row.Lease == nil || row.DueAtMs != e.NowMs()+30_000 || row.Lease.DueAtMs != e.NowMs() {
				t.Fatalf("%s: timer %+v, want held until now+30s, due now", id, row)
			}
			if !slices.ContainsFunc(told, func(x store.Entry) bool { return x.Key == row.Key && bytes.Equal(x.Value, row.Raw) }) {
				t.Fatalf("%s: its held timer was not handed to Due: %v", id, told)
			}
		}
		if len(told) != 2 {
			t.Fatalf("told %d timers, want 2", len(told))
		}
		// Each held timer's fire is handed its stream's rows as the
		// batch left them, which are the rows as they stand.
		if len(streams) != 2 {
			t.Fatalf("handed streams %v, want audit and billing", streams)
		}
		for _, id := range []string{"audit", "billing"} {
			bk, _ := schema.BacklogKey(id)
			ek, _ := schema.EndpointKey(id)
			hk, _ := schema.HeadKey(id)
			want, err := e.St.GetMany(e.Ctx, e.P, []store.Key{bk, ek, hk})
			if err != nil {
				t.Fatal(err)
			}
			got := streams[id]
			if !want[0].Found || !want[1].Found || !want[2].Found || fmt.Sprint(got) != fmt.Sprint(outbox.StreamRows{Backlog: want[0], Endpoint: want[1], Head: want[2]}) {
				t.Fatalf("%s: handed %+v, the store holds %+v", id, got, want)
			}
		}
		// A leased timer is left alone by the next ingest.
		told = nil
		if st := e.Append(committed("r-2")); st[0].Due || len(told) != 0 {
			t.Fatalf("an ingest beside held timers: %+v, told %v", st, told)
		}
	})
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.App.Hold = func() time.Duration { t.Fatal("Hold asked with no Due"); return 0 }
		e.Append(committed("r-1"))
		if row, _ := e.deliveryTimer("billing"); row.Lease != nil {
			t.Fatalf("timer %+v held with no Due to fire it", row)
		}
	})
}

// lostReplyStore commits the first batch it is given and then reports it
// as the store would have had the reply been lost (err) or had a resent
// run of the batch failed its guards (err nil: not committed).
type lostReplyStore struct {
	store.NamespaceStore
	err  error
	done bool
}

func (s *lostReplyStore) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	res, err := s.NamespaceStore.Apply(ctx, p, b)
	if err != nil || s.done {
		return res, err
	}
	s.done = true
	return store.Result{}, s.err
}

// A batch that wrote a held timer and committed though its Apply did not
// say so puts the timer back due now and idle: nobody was told to fire
// it, and it would otherwise wait out the lease.
func TestAHeldTimerIsReleasedWhenItsBatchCommittedUnseen(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{{"lost reply", errors.New("reply lost")}, {"resent run refused", nil}} {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint("billing", schema.Endpoint{Enabled: true})
				app := *e.App
				app.Store = &lostReplyStore{NamespaceStore: e.St, err: c.err}
				var told []store.Entry
				app.Due = func(_ store.Partition, due []store.Entry, _ outbox.Handed) bool {
					told = append(told, due...)
					return true
				}
				app.Hold = func() time.Duration { return 30 * time.Second }
				st, err := app.Append(e.Ctx, e.P, []schema.Outcome{committed("r-1")})
				if (err != nil) != (c.err != nil) {
					t.Fatalf("append: %+v %v", st, err)
				}
				row, ok := e.deliveryTimer("billing")
				if !ok || row.Lease != nil || row.DueAtMs != e.NowMs() {
					t.Fatalf("timer %+v (found %v), want idle and due now", row, ok)
				}
				if len(told) != 0 {
					t.Fatalf("Due told of %v", told)
				}
				if c.err == nil && (st[0].Code != outbox.Accepted || !st[0].Due) {
					t.Fatalf("status %+v, want accepted and due", st[0])
				}
			})
		})
	}
}

// The snapshot reads endpoints, backlogs and heads in one range: an
// endpoint row whose key does not parse still refuses the ingest as
// corrupt, and rows of other classes in that range (the counters, a
// backlog or head of no endpoint) are read past.
func TestTheStreamRowsReadTogetherStillRefuseABadEndpointKey(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		orphan, _ := schema.BacklogKey("gone")
		var b store.Batch
		b.Put(orphan, schema.EncodeBacklog(schema.Backlog{Rows: 3, Bytes: 30}))
		if res, err := e.St.Apply(e.Ctx, e.P, b); err != nil || !res.Committed {
			t.Fatalf("put orphan backlog: %+v %v", res, err)
		}
		if got := codes(e.Append(committed("r-1"))); got[0] != outbox.Accepted {
			t.Fatalf("append beside an orphan backlog: %v", got)
		}
		if bl, _ := e.backlog("billing"); bl.Rows != 1 {
			t.Fatalf("billing's backlog %+v, want one row", bl)
		}
		b = store.Batch{}
		b.Put("eBAD KEY", store.Value("\x01{}"))
		if res, err := e.St.Apply(e.Ctx, e.P, b); err != nil || !res.Committed {
			t.Fatalf("put bad endpoint row: %+v %v", res, err)
		}
		if _, err := e.App.Append(e.Ctx, e.P, []schema.Outcome{committed("r-2")}); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("append beside an endpoint row whose key does not parse: %v, want ErrCorrupt", err)
		}
	})
}
