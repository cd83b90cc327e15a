package outbox_test

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// readCounting counts the reads a Coalescer makes, each ReadMany (one
// round trip on a store.MultiReader) once, and passes everything on.
type readCounting struct {
	*countingStore
	reads atomic.Int64
}

func (s *readCounting) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	s.reads.Add(1)
	return s.countingStore.GetMany(ctx, p, keys)
}

func (s *readCounting) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	s.reads.Add(1)
	return s.countingStore.Scan(ctx, p, start, end, after, limit)
}

func (s *readCounting) ReadMany(ctx context.Context, p store.Partition, reads []store.Read) ([]store.ReadResult, error) {
	s.reads.Add(1)
	return store.ReadMany(ctx, s.countingStore.NamespaceStore, p, reads)
}

// heldReads is hold, with the Coalescer's reads counted and its retry
// waits counted (they return at once).
func heldReads(t *testing.T, e *env, first ...schema.Outcome) (*held, *readCounting, *atomic.Int64) {
	t.Helper()
	h := hold(t, e, 0, e.Ctx, first...)
	rc := &readCounting{countingStore: h.st}
	var waits atomic.Int64
	h.co.Appender.Store = rc
	h.co.Appender.Wait = func(context.Context, time.Duration) error {
		waits.Add(1)
		return nil
	}
	return h, rc, &waits
}

// A combined Append queued behind another plans from the rows that one
// read and wrote: one round trip (its Apply) instead of two.
func TestACombinedAppendBehindAnotherPlansWithoutReading(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		// The held Append read before the counting began.
		h, rc, waits := heldReads(t, e, committed("r-0"))
		second := h.send(e.Ctx, committed("r-1"), committed("r-2"))
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		expectCodes(t, "second", <-second, outbox.Accepted, outbox.Accepted)
		idle(t, h.co)
		if n := rc.reads.Load(); n != 0 {
			t.Errorf("the combined Append behind the held one read %d times, want 0", n)
		}
		if n := waits.Load(); n != 0 {
			t.Errorf("%d retry waits", n)
		}
		if e.sequence() != 3 {
			t.Errorf("sequence %d, want 3", e.sequence())
		}
		for _, ep := range []string{"billing", "audit"} {
			b, _ := e.backlog(ep)
			if b.Rows != 3 || len(e.pending(ep)) != 3 {
				t.Errorf("%s: backlog %+v, %d pending, want 3", ep, b, len(e.pending(ep)))
			}
		}
		if got, want := appendsOf(e), [][]string{{"r-0"}, {"r-1", "r-2"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("appends stored %v, want %v", got, want)
		}
	})
}

// The seen rows of a combined Append that plans without reading were never
// read: a reservation id accepted by the one before fails its batch, which
// is read again and answered as duplicate or conflict, with nothing written
// twice and no wait, since no other writer was in the way.
func TestAReusedPlanReadsAgainForAReservationIDSeenBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		h, rc, waits := heldReads(t, e, committed("r-1"))
		different := committed("r-1")
		different.Committed.BytesStored++
		again := h.send(e.Ctx, committed("r-1"), committed("r-2"))
		conflict := h.send(e.Ctx, different)
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		expectCodes(t, "same outcome", <-again, outbox.Duplicate, outbox.Accepted)
		expectCodes(t, "different outcome", <-conflict, outbox.Conflict)
		idle(t, h.co)
		if n := waits.Load(); n != 0 {
			t.Errorf("%d retry waits for a batch that failed on a reused plan", n)
		}
		if n := rc.reads.Load(); n != 1 {
			t.Errorf("%d reads, want the one after the failed batch", n)
		}
		if e.sequence() != 2 {
			t.Errorf("sequence %d, want 2 (r-1 once, r-2)", e.sequence())
		}
		if b, _ := e.backlog("billing"); b.Rows != 2 || len(e.pending("billing")) != 2 {
			t.Errorf("backlog %+v, %d pending, want 2", b, len(e.pending("billing")))
		}
		if v, _ := e.record("billing", "r-1"); !reflect.DeepEqual(v.Record, mustRecord(t, committed("r-1"))) {
			t.Error("r-1 is not the outcome first accepted")
		}
	})
}

// An endpoint registered after the rows a reused plan came from were read
// fences the sequence, so the batch fails and the outcomes, read again,
// reach it too.
func TestAnEndpointRegisteredBeforeAReusedPlanAppliesGetsItsOutcomes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		h, rc, _ := heldReads(t, e, committed("r-0"))
		admin := &outbox.Admin{Store: e.St, Clock: e.Clk}
		h.fail = func(n int64) error {
			if n != 2 {
				return nil
			}
			// Just before the second combined Append's first batch.
			_, err := admin.PutEndpoint(e.Ctx, e.P, "audit", outbox.EndpointSpec{URL: "https://hooks.example.com/audit", Enabled: true})
			return err
		}
		second := h.send(e.Ctx, committed("r-1"))
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		expectCodes(t, "second", <-second, outbox.Accepted)
		idle(t, h.co)
		if _, ok := e.record("audit", "r-1"); !ok {
			t.Error("the endpoint registered before r-1 was stored did not get it")
		}
		if _, ok := e.record("audit", "r-0"); ok {
			t.Error("the endpoint registered after r-0 was stored got it")
		}
		if _, ok := e.record("billing", "r-1"); !ok {
			t.Error("billing did not get r-1")
		}
		if n := rc.reads.Load(); n < 1 {
			t.Errorf("%d reads: the failed batch was not read again", n)
		}
	})
}

// A snapshot read MaxSnapshotReuse ago is read again.
func TestAPlanIsNotReusedPastMaxSnapshotReuse(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		for _, c := range []struct {
			advance time.Duration
			reads   int64
		}{{outbox.MaxSnapshotReuse - time.Millisecond, 0}, {outbox.MaxSnapshotReuse, 1}} {
			h, rc, _ := heldReads(t, e, committed(fmt.Sprintf("r-%v-0", c.advance)))
			second := h.send(e.Ctx, committed(fmt.Sprintf("r-%v-1", c.advance)))
			e.Clk.Advance(c.advance)
			h.release()
			expectCodes(t, "held", <-h.first, outbox.Accepted)
			expectCodes(t, "second", <-second, outbox.Accepted)
			idle(t, h.co)
			if n := rc.reads.Load(); n != c.reads {
				t.Errorf("%v after the read: %d reads, want %d", c.advance, n, c.reads)
			}
		}
	})
}

// A partition whose queue emptied plans its next request from the rows
// its last combined Append left, within MaxSnapshotReuse.
func TestTheNextFlusherOfAPartitionPlansFromWhatTheLastLeft(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		st := &readCounting{countingStore: &countingStore{NamespaceStore: e.St}}
		co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
		for i := range 3 {
			st, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed(fmt.Sprintf("r-%d", i))})
			expectCodes(t, fmt.Sprintf("r-%d", i), answer{st, err}, outbox.Accepted)
			idle(t, co)
		}
		if n := st.reads.Load(); n != 1 {
			t.Errorf("3 requests in turn read %d times, want 1", n)
		}
		e.Clk.Advance(outbox.MaxSnapshotReuse)
		_, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed("r-later")})
		if err != nil {
			t.Fatal(err)
		}
		if n := st.reads.Load(); n != 2 {
			t.Errorf("a request %v later read %d times in all, want 2", outbox.MaxSnapshotReuse, n)
		}
		if e.sequence() != 4 {
			t.Errorf("sequence %d, want 4", e.sequence())
		}
	})
}

// A sweep timer the kept snapshot holds may have ended since on another
// process, which no fold follows: the next request's batch, planned from
// the snapshot, fails, and the fresh read puts the timer again. Without
// it the partition would keep rows no sweep ever removes.
func TestASweepTimerEndedElsewhereIsPutAgainFromAFreshRead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		st := &readCounting{countingStore: &countingStore{NamespaceStore: e.St}}
		co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
		for _, kind := range []timers.Kind{timers.KindSeenSweep, timers.KindLogSweep} {
			rid := fmt.Sprintf("r-%d", kind)
			if _, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed(rid + "-0")}); err != nil {
				t.Fatal(err)
			}
			idle(t, co)
			rows := e.timers(kind, "")
			if len(rows) != 1 {
				t.Fatalf("kind %d: %d timers after the first ingest, want 1", kind, len(rows))
			}
			var b store.Batch
			b.Delete(rows[0].Key)
			e.Apply(b)
			reads := st.reads.Load()
			e.Clk.Advance(outbox.MaxSnapshotReuse / 2)
			if _, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed(rid + "-1")}); err != nil {
				t.Fatal(err)
			}
			idle(t, co)
			if n := len(e.timers(kind, "")); n != 1 {
				t.Errorf("kind %d: %d timers after an ingest from the kept snapshot, want 1", kind, n)
			}
			if n := st.reads.Load() - reads; n != 1 {
				t.Errorf("kind %d: the second ingest read %d times, want 1", kind, n)
			}
		}
	})
}

// The snapshots kept for partitions gone quiet are pruned once too old to
// be reused, so many namespaces do not grow the Coalescer without bound.
func TestKeptSnapshotsOfQuietPartitionsArePruned(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	co := &outbox.Coalescer{Appender: &outbox.Appender{Store: e.St, Clock: e.Clk}}
	const namespaces = 1000
	most := 0
	for i := range namespaces {
		p := store.Partition{Namespace: fmt.Sprintf("ns-%d", i)}
		outboxtest.PutEndpoint(t, e.St, p, "billing", schema.Endpoint{Enabled: true})
		if _, err := co.Append(e.Ctx, p, []schema.Outcome{committed("r-0")}); err != nil {
			t.Fatal(err)
		}
		// Ten namespaces a reuse period.
		e.Clk.Advance(outbox.MaxSnapshotReuse / 10)
		most = max(most, outbox.KeptSnapshots(co))
	}
	if most > 200 {
		t.Errorf("%d snapshots kept at once for %d namespaces, ten of them recent at any time", most, namespaces)
	}
}

// Requests this process is already handling when a flusher starts join
// its first combined Append: the flusher yields before it takes. On one
// processor the goroutine a request starts runs before the requests
// started beside it, so without the yield it always takes its own alone;
// with it, the others queue first (but when the scheduler happens to look
// at its global queue first, so the test asks it of one round in five).
func TestAFlusherTakesTheRequestsAlreadyRunningBesideIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		const n, rounds = 8, 5
		var applies []int64
		for round := range rounds {
			st := &countingStore{NamespaceStore: e.St}
			co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
			answers := make([]answer, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					statuses, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed(fmt.Sprintf("r-%d-%d", round, i))})
					answers[i] = answer{statuses, err}
				})
			}
			wg.Wait()
			for i, a := range answers {
				expectCodes(t, fmt.Sprintf("r-%d-%d", round, i), a, outbox.Accepted)
			}
			idle(t, co)
			applies = append(applies, st.applies.Load())
		}
		if !slices.Contains(applies, 1) {
			t.Errorf("%d requests running at once took %v applies in %d rounds, want 1 in some", n, applies, rounds)
		}
		if e.sequence() != n*rounds {
			t.Errorf("sequence %d, want %d", e.sequence(), n*rounds)
		}
	})
}

// A Coalescer told of the batches a fire committed (a claim of the stream's
// timer, an acknowledgement of some of its rows) plans the next Append from
// its snapshot with them folded in: no read, and one Apply that commits.
// One not told reads again; one told of a batch that never committed finds
// it out from its guards. Either way the rows come out the same.
func TestACoalescerFollowsTheBatchesItIsToldOf(t *testing.T) {
	for _, c := range []struct {
		name      string
		told      bool
		bogus     bool
		wantReads int64
	}{
		{"told", true, false, 0},
		{"not told", false, false, 1},
		{"told of a batch that never was", true, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint("billing", schema.Endpoint{Enabled: true})
				rc := &readCounting{countingStore: &countingStore{NamespaceStore: e.St}}
				co := &outbox.Coalescer{Appender: &outbox.Appender{Store: rc, Clock: e.Clk}}
				if _, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed("r-0"), committed("r-1"), committed("r-2")}); err != nil {
					t.Fatal(err)
				}
				idle(t, co)
				fire := e.St
				if c.told {
					fire = store.Observed(e.St, co.Observe)
				}
				timer, _ := e.deliveryTimer("billing")
				if _, ok, err := timers.Claim(e.Ctx, fire, e.P, timer, e.NowMs(), time.Minute); err != nil || !ok {
					t.Fatalf("claim: %v %v", ok, err)
				}
				acks := freshAcks(t, e, "billing")
				for _, pk := range e.pending("billing")[:2] {
					rec, _ := e.record("billing", pk.RID)
					if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
						t.Fatal(err)
					}
				}
				var b store.Batch
				acks.Plan(&b)
				if res, err := fire.Apply(e.Ctx, e.P, b); err != nil || !res.Committed {
					t.Fatalf("acknowledge: %+v %v", res, err)
				}
				if c.bogus {
					key, _ := schema.BacklogKey("billing")
					co.Observe(e.P, []store.Write{{Kind: store.Put, Key: key, Value: schema.EncodeBacklog(schema.Backlog{Rows: 40, Bytes: 9})}})
				}
				rc.reads.Store(0)
				applies := rc.applies.Load()
				st, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed("r-3")})
				expectCodes(t, "after the fire", answer{st, err}, outbox.Accepted)
				idle(t, co)
				if n := rc.reads.Load(); n != c.wantReads {
					t.Errorf("%d reads, want %d", n, c.wantReads)
				}
				if n := rc.applies.Load() - applies; n != 1+c.wantReads {
					t.Errorf("%d applies, want %d", n, 1+c.wantReads)
				}
				if bl, _ := e.backlog("billing"); bl.Rows != 2 || e.sequence() != 4 {
					t.Errorf("backlog %+v, sequence %d; want 2 rows, 4", bl, e.sequence())
				}
				if p := e.pending("billing"); len(p) != 2 || p[0].RID != "r-2" || p[1].RID != "r-3" {
					t.Errorf("pending %+v, want r-2 and r-3", p)
				}
				// The stream keeps its one timer, the fire's lease.
				if row, ok := e.deliveryTimer("billing"); !ok || row.Lease == nil {
					t.Errorf("delivery timer %+v", row)
				}
			})
		})
	}
}

// A batch that commits while a combined Append runs is folded into the
// snapshot that Append leaves unless the Append read after it: an
// acknowledgement is not subtracted twice from the backlog, so the next
// Append plans without reading and commits.
func TestABatchObservedDuringACombinedAppendIsFoldedOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-0"), committed("r-1"))
		h, rc, _ := heldReads(t, e, committed("r-2"))
		acks := freshAcks(t, e, "billing")
		pk := e.pending("billing")[0]
		rec, _ := e.record("billing", pk.RID)
		if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		acks.Plan(&b)
		if res, err := store.Observed(e.St, h.co.Observe).Apply(e.Ctx, e.P, b); err != nil || !res.Committed {
			t.Fatalf("acknowledge: %+v %v", res, err)
		}
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		idle(t, h.co)
		rc.reads.Store(0)
		applies := rc.applies.Load()
		st, err := h.co.Append(e.Ctx, e.P, []schema.Outcome{committed("r-3")})
		expectCodes(t, "after", answer{st, err}, outbox.Accepted)
		if n, m := rc.reads.Load(), rc.applies.Load()-applies; n != 0 || m != 1 {
			t.Errorf("%d reads and %d applies, want 0 and 1", n, m)
		}
		if bl, _ := e.backlog("billing"); bl.Rows != 3 {
			t.Errorf("backlog %+v, want 3 rows", bl)
		}
	})
}

// However many partitions take outcomes within MaxSnapshotReuse, the
// snapshots kept stay within the Coalescer's bound, the latest among
// them: memory does not grow with the namespaces a process serves.
func TestKeptSnapshotsStayWithinTheirBound(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	st := &readCounting{countingStore: &countingStore{NamespaceStore: e.St}}
	co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
	const bound, namespaces = 20, 200
	outbox.LimitKeptSnapshots(co, bound)
	most := 0
	for i := range namespaces {
		p := store.Partition{Namespace: fmt.Sprintf("ns-%d", i)}
		outboxtest.PutEndpoint(t, e.St, p, "billing", schema.Endpoint{Enabled: true})
		if _, err := co.Append(e.Ctx, p, []schema.Outcome{committed("r-0")}); err != nil {
			t.Fatal(err)
		}
		idle(t, co)
		most = max(most, outbox.KeptSnapshots(co))
	}
	if most > bound {
		t.Errorf("%d snapshots kept at once, bound %d", most, bound)
	}
	before := st.reads.Load()
	last := store.Partition{Namespace: fmt.Sprintf("ns-%d", namespaces-1)}
	if _, err := co.Append(e.Ctx, last, []schema.Outcome{committed("r-1")}); err != nil {
		t.Fatal(err)
	}
	if n := st.reads.Load() - before; n != 0 {
		t.Errorf("the latest partition read %d times again, want its snapshot kept", n)
	}
}
