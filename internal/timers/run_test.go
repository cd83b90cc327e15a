package timers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/store/storetest"
	"github.com/hookrelay/relay/internal/testlog"
	"github.com/hookrelay/relay/internal/timers"
)

const lease = 30 * time.Second

var ns = store.Partition{Namespace: "acme"}

// handlerFunc is a handler whose fire is a function of the test's choosing.
type handlerFunc struct {
	kind timers.Kind
	fire func(fc timers.FireContext, t timers.DueTimer) (timers.Fired, error)
}

func (h handlerFunc) Kind() timers.Kind { return h.kind }
func (h handlerFunc) Fire(_ context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	return h.fire(fc, t)
}

// eachBackend runs f on a fresh store of every backend.
func eachBackend(t *testing.T, f func(t *testing.T, st *redisstore.Store)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) { f(t, b.New(t)) })
}

func handlers(t *testing.T, hs ...timers.Handler) *timers.Handlers {
	t.Helper()
	r, err := timers.NewHandlers(hs...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func apply(t *testing.T, st store.NamespaceStore, p store.Partition, b store.Batch) {
	t.Helper()
	res, err := st.Apply(context.Background(), p, b)
	if err != nil || !res.Committed {
		t.Fatalf("apply: %+v %v", res, err)
	}
}

func putTimer(t *testing.T, st store.NamespaceStore, p store.Partition, due int64, kind timers.Kind, ref, state string) {
	t.Helper()
	var b store.Batch
	b.Put(timers.Key(due, kind, ref), timers.EncodeIdle([]byte(state)))
	apply(t, st, p, b)
}

func allTimers(t *testing.T, st store.NamespaceStore, p store.Partition) []timers.Row {
	t.Helper()
	rows, err := timers.All(context.Background(), st, p)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func onlyTimer(t *testing.T, st store.NamespaceStore, p store.Partition) timers.Row {
	t.Helper()
	rows := allTimers(t, st, p)
	if len(rows) != 1 {
		t.Fatalf("want one timer, have %d", len(rows))
	}
	return rows[0]
}

func TestTwoWorkersClaimingOneTimerExactlyOneWins(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "s")
		row := onlyTimer(t, st, ns)
		start := make(chan struct{})
		wins := make(chan bool, 2)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				<-start
				_, ok, err := timers.Claim(context.Background(), st, ns, row, 100, lease)
				if err != nil {
					t.Error(err)
				}
				wins <- ok
			})
		}
		close(start)
		wg.Wait()
		close(wins)
		won := 0
		for ok := range wins {
			if ok {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("%d workers won the claim, want exactly 1", won)
		}
		leased := onlyTimer(t, st, ns)
		if leased.Lease == nil || leased.DueAtMs != 100+lease.Milliseconds() || leased.Lease.DueAtMs != 100 {
			t.Fatalf("leased row %+v", leased)
		}
	})
}

func TestExpiredLeaseIsTakenOverAndTheLateCompletionIsRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		putTimer(t, st, ns, 100, 8, "billing", "s")
		first, ok, err := timers.Claim(ctx, st, ns, onlyTimer(t, st, ns), 100, lease)
		if err != nil || !ok {
			t.Fatalf("first claim: %v %v", ok, err)
		}
		// Not due again until the lease runs out.
		if start, end := timers.DueRange(100 + lease.Milliseconds() - 1); scanCount(t, st, start, end) != 0 {
			t.Fatal("a leased timer is due before its lease expires")
		}
		expired := 100 + lease.Milliseconds()
		second, ok, err := timers.Claim(ctx, st, ns, onlyTimer(t, st, ns), expired, lease)
		if err != nil || !ok {
			t.Fatalf("takeover: %v %v", ok, err)
		}
		if second.Timer.DueAtMs != 100 {
			t.Fatalf("takeover sees due %d, want the original 100", second.Timer.DueAtMs)
		}

		late := func(key string) timers.Fired {
			var b store.Batch
			b.Put(store.Key(key), store.Value("x"))
			return timers.Fired{Done: true, Batch: b}
		}
		// The late owner's clock still says its lease holds: the guard refuses it.
		out, err := timers.Complete(ctx, st, clock.NewManual(expired-1), first, late("overdue"))
		if err != nil || out != timers.LeaseLost {
			t.Fatalf("late completion: %v %v", out, err)
		}
		// The late owner whose clock says its lease ran out is refused too.
		out, err = timers.Complete(ctx, st, clock.NewManual(first.ExpiresAtMs), first, late("overdue"))
		if err != nil || out != timers.LeaseLost {
			t.Fatalf("late completion past expiry: %v %v", out, err)
		}
		if _, found, err := st.Get(ctx, ns, "overdue"); err != nil || found {
			t.Fatal("a refused completion wrote its batch")
		}
		if onlyTimer(t, st, ns).Lease == nil {
			t.Fatal("the new owner's lease was disturbed")
		}
		out, err = timers.Complete(ctx, st, clock.NewManual(expired), second, late("owner"))
		if err != nil || out != timers.Completed {
			t.Fatalf("owner completion: %v %v", out, err)
		}
		if _, found, err := st.Get(ctx, ns, "owner"); err != nil || !found {
			t.Fatal("the owner's batch was not applied")
		}
		if n := len(allTimers(t, st, ns)); n != 0 {
			t.Fatalf("%d timers remain after Done", n)
		}
	})
}

func scanCount(t *testing.T, st store.NamespaceStore, start, end store.Key) int {
	t.Helper()
	page, err := st.Scan(context.Background(), ns, start, end, nil, 100)
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Entries)
}

func TestRescheduleAndDoneTouchExactlyTheLeasedRow(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		putTimer(t, st, ns, 100, 8, "billing", "one")
		putTimer(t, st, ns, 100, 8, "ledger", "two")
		putTimer(t, st, ns, 5_000, 8, "audit", "three")
		h := handlerFunc{kind: 8, fire: func(_ timers.FireContext, tm timers.DueTimer) (timers.Fired, error) {
			if tm.Reference == "billing" {
				return timers.Fired{DueAtMs: 700, State: []byte("moved")}, nil
			}
			return timers.Fired{Done: true}, nil
		}}
		clk := clock.NewManual(100)
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clk}).RunDue(ctx, ns, 100)
		if err != nil {
			t.Fatal(err)
		}
		if report.Fired != 2 || report.Done != 1 || report.Rescheduled != 1 {
			t.Fatalf("report %+v", report)
		}
		got := allTimers(t, st, ns)
		want := []struct {
			due   int64
			ref   string
			state string
		}{{700, "billing", "moved"}, {5_000, "audit", "three"}}
		if len(got) != len(want) {
			t.Fatalf("timers %+v", got)
		}
		for i, w := range want {
			if got[i].DueAtMs != w.due || got[i].Reference != w.ref || string(got[i].State) != w.state || got[i].Lease != nil {
				t.Fatalf("timer %d = %+v, want %+v", i, got[i], w)
			}
		}
		assertDueIndex(t, st, ns)
	})
}

func TestAFailedHandlerGuardReleasesTheTimerDueAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		putTimer(t, st, ns, 100, 8, "billing", "state")
		h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			var b store.Batch
			b.RequireEquals("backlog", store.Value("stale"))
			b.Put("acked", nil)
			return timers.Fired{DueAtMs: 9_000, State: []byte("new"), Batch: b}, nil
		}}
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clock.NewManual(150)}).RunDue(ctx, ns, 150)
		if err != nil {
			t.Fatal(err)
		}
		if report.Replanned != 1 {
			t.Fatalf("report %+v", report)
		}
		row := onlyTimer(t, st, ns)
		if row.Lease != nil || row.DueAtMs != 100 || string(row.State) != "state" {
			t.Fatalf("released timer %+v, want idle, due 100, old state", row)
		}
		if _, found, err := st.Get(ctx, ns, "acked"); err != nil || found {
			t.Fatal("the failed batch wrote")
		}
	})
}

func TestATimerThatCannotFireWaitsOneLeaseInsteadOfSpinning(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		putTimer(t, st, ns, 100, 99, "future-kind", "s")
		corrupt := timers.Key(100, 8, "corrupt")
		var cb store.Batch
		cb.Put(corrupt, store.Value{0x7f, 1, 2})
		apply(t, st, ns, cb)
		putTimer(t, st, ns, 100, 8, "failing", "s")
		failing := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			return timers.Fired{}, errors.New("sink exploded")
		}}
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, failing), Clock: clock.NewManual(100)}).RunDue(ctx, ns, 100)
		if err == nil {
			t.Fatal("a failed fire is not reported")
		}
		if report.Deferred != 3 {
			t.Fatalf("report %+v", report)
		}
		rows, err := st.Scan(ctx, ns, "t", "u", nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rows.Entries {
			due, _, ref, _ := timers.ParseKey(e.Key)
			if due != 100+lease.Milliseconds() {
				t.Fatalf("timer %s due %d, want deferred to %d", ref, due, 100+lease.Milliseconds())
			}
			if ref == "corrupt" && string(e.Value) != string([]byte{0x7f, 1, 2}) {
				t.Fatal("a corrupt timer lost its bytes")
			}
		}
		if len(rows.Entries) != 3 {
			t.Fatalf("%d timers remain, want 3", len(rows.Entries))
		}
		assertDueIndex(t, st, ns)
	})
}

// assertDueIndex checks that the partition's entry in its bucket's due index
// is its earliest timer, and that a partition without timers has none.
func assertDueIndex(t *testing.T, st *redisstore.Store, p store.Partition) {
	t.Helper()
	if msg := dueIndexMismatch(t, st, p); msg != "" {
		t.Fatal(msg)
	}
}

func dueIndexMismatch(t *testing.T, st *redisstore.Store, p store.Partition) string {
	t.Helper()
	start, end := timers.Range()
	rows, err := st.Scan(context.Background(), p, start, end, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	due, err := st.Due(context.Background(), st.BucketOf(p), timers.NeverMs, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(due, func(d store.DuePartition) bool { return d.Partition == p })
	switch {
	case len(rows.Entries) == 0 && i >= 0:
		return fmt.Sprintf("%s has no timers but is in the due index at %d", p, due[i].DueAtMs)
	case len(rows.Entries) > 0 && i < 0:
		return fmt.Sprintf("%s has timers but is missing from the due index", p)
	}
	if len(rows.Entries) > 0 {
		earliest, _, _, _ := timers.ParseKey(rows.Entries[0].Key)
		if due[i].DueAtMs != earliest {
			return fmt.Sprintf("%s due index says %d, earliest timer is %d", p, due[i].DueAtMs, earliest)
		}
	}
	return ""
}

// The due index equals the earliest timer of each partition after every
// step of a random mix of creates, claims, completions, releases and lease
// takeovers over several partitions.
func TestDueIndexFollowsTheEarliestTimerThroughARandomSequence(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 1))
		t.Logf("seed %d", seed)
		parts := []store.Partition{{Namespace: "a"}, {Namespace: "b"}, {Namespace: "c"}, {Namespace: "d"}}
		refs := []string{"x", "y", "z"}
		now := int64(1_000)
		clk := clock.NewManual(now)
		h := handlerFunc{kind: 8, fire: func(fc timers.FireContext, tm timers.DueTimer) (timers.Fired, error) {
			switch rng.IntN(3) {
			case 0:
				return timers.Fired{Done: true}, nil
			case 1:
				return timers.Fired{DueAtMs: fc.NowMs + rng.Int64N(5_000), State: []byte("r")}, nil
			}
			var b store.Batch
			b.RequireAbsent(store.Key("missing-guard-row-" + tm.Reference))
			b.Put(store.Key("missing-guard-row-"+tm.Reference), nil)
			return timers.Fired{DueAtMs: fc.NowMs + 10, Batch: b}, nil
		}}
		reg := handlers(t, h)
		for step := range 300 {
			p := parts[rng.IntN(len(parts))]
			switch op := rng.IntN(5); op {
			case 0: // create or replace a stream's timer
				ref := refs[rng.IntN(len(refs))]
				var b store.Batch
				if row, found, err := timers.Find(ctx, st, p, 8, ref); err != nil {
					t.Fatal(err)
				} else if found {
					b.RequireEquals(row.Key, row.Raw)
					b.Delete(row.Key)
				}
				b.Put(timers.Key(now+rng.Int64N(4_000)-2_000, 8, ref), timers.EncodeIdle(nil))
				apply(t, st, p, b)
			case 1, 2: // run what is due
				if _, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: reg, Clock: clk, Budget: timers.Budget{MaxTimers: 2}}).RunDue(ctx, p, now); err != nil {
					t.Fatal(err)
				}
			case 3: // claim and abandon: the worker dies holding the lease
				rows := allTimers(t, st, p)
				if len(rows) > 0 && rows[0].DueAtMs <= now {
					if _, _, err := timers.Claim(ctx, st, p, rows[0], now, time.Duration(rng.IntN(3_000))*time.Millisecond); err != nil {
						t.Fatal(err)
					}
				}
			case 4: // time passes
				now += rng.Int64N(3_000)
				clk.Set(now)
			}
			for _, q := range parts {
				if msg := dueIndexMismatch(t, st, q); msg != "" {
					t.Fatalf("after step %d: %s", step, msg)
				}
			}
		}
	})
}

func TestAClaimResentAfterALostReplyStillHoldsTheLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "s")
		c, ok, err := timers.Claim(context.Background(), storetest.LostReplies{NamespaceStore: st}, ns, onlyTimer(t, st, ns), 100, lease)
		if err != nil || !ok {
			t.Fatalf("claim whose first run committed: ok=%v err=%v, want held", ok, err)
		}
		out, err := timers.Complete(context.Background(), st, clock.NewManual(100), c, timers.Fired{Done: true})
		if err != nil || out != timers.Completed {
			t.Fatalf("completion under the resent claim: %v %v", out, err)
		}
		// A claim that really lost still says so.
		putTimer(t, st, ns, 100, 8, "ledger", "s")
		row := onlyTimer(t, st, ns)
		if _, ok, _ := timers.Claim(context.Background(), st, ns, row, 100, lease); !ok {
			t.Fatal("first claim lost")
		}
		if _, ok, _ := timers.Claim(context.Background(), storetest.LostReplies{NamespaceStore: st}, ns, row, 100, lease); ok {
			t.Fatal("a second claim of the same row won")
		}
	})
}

// Fires take time: a lease counted from the start of the run would already
// have run out for the later timers of that run, letting another worker fire
// the same stream while it is still being fired.
func TestEachClaimOfARunHoldsAFullLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		for _, ref := range []string{"a", "b", "c"} {
			putTimer(t, st, ns, 100, 8, ref, "s")
		}
		clk := clock.NewManual(100)
		slow := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			clk.Advance(20 * time.Second) // each fire takes two thirds of a lease
			return timers.Fired{Done: true}, nil
		}}
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, slow), Clock: clk, Budget: timers.Budget{Lease: lease}}).RunDue(context.Background(), ns, 100)
		if err != nil {
			t.Fatal(err)
		}
		if report.Done != 3 || report.LeaseLost != 0 {
			t.Fatalf("report %+v, want 3 done and no lease lost", report)
		}
	})
}

// A fire that only reschedules itself (a failed call, backing off) keeps its
// backoff when its guard fails because of an append: firing again at once
// would call a failing endpoint at the rate of ingest.
func TestABackoffIsKeptWhenOnlyTheGuardMoved(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "attempt-1")
		h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			var b store.Batch
			b.RequireEquals("backlog", store.Value("as read before an append"))
			return timers.Fired{DueAtMs: 2_100, State: []byte("attempt-2"), Batch: b, Backoff: true}, nil
		}}
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clock.NewManual(100)}).RunDue(context.Background(), ns, 100)
		if err != nil {
			t.Fatal(err)
		}
		if report.Rescheduled != 1 {
			t.Fatalf("report %+v, want one rescheduled", report)
		}
		row := onlyTimer(t, st, ns)
		if row.Lease != nil || row.DueAtMs != 2_100 || string(row.State) != "attempt-2" {
			t.Fatalf("timer %+v, want idle at 2100 with the backed-off state", row)
		}
	})
}

// A write-free reschedule that is not a backoff (parking a disabled stream,
// guarded by the endpoint as read) is re-planned when its guard fails: the
// endpoint may have been enabled meanwhile.
func TestAWriteFreeRescheduleIsReplannedWhenItsGuardFails(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "s")
		h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			var b store.Batch
			b.RequireEquals("endpoint", store.Value("disabled, as read"))
			return timers.Fired{DueAtMs: timers.NeverMs, Batch: b}, nil
		}}
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clock.NewManual(100)}).RunDue(context.Background(), ns, 100)
		if err != nil {
			t.Fatal(err)
		}
		if report.Replanned != 1 {
			t.Fatalf("report %+v, want one re-planned", report)
		}
		if row := onlyTimer(t, st, ns); row.DueAtMs != 100 || row.Lease != nil {
			t.Fatalf("timer %+v, want idle and due at 100 again", row)
		}
	})
}

// Notes, such as the record of a failed call, are applied whether or not the
// handler's guard holds: with the result when it does, with the release when
// it does not. Under steady ingest a failing endpoint's guard fails on most
// fires, and the record would otherwise never be written.
func TestNotesStandWhetherOrNotTheHandlersGuardHolds(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		for _, guard := range []string{"held", "moved"} {
			p := store.Partition{Namespace: "notes-" + guard}
			apply(t, st, p, store.Batch{Writes: []store.Write{{Kind: store.Put, Key: "backlog", Value: store.Value("as read")}}})
			if guard == "moved" {
				apply(t, st, p, store.Batch{Writes: []store.Write{{Kind: store.Put, Key: "backlog", Value: store.Value("appended")}}})
			}
			putTimer(t, st, p, 100, 8, "billing", "attempt-1")
			h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
				var b store.Batch
				b.RequireEquals("backlog", store.Value("as read"))
				return timers.Fired{DueAtMs: 2_100, State: []byte("attempt-2"), Batch: b, Backoff: true,
					Notes: []store.Write{{Kind: store.Put, Key: "attempt", Value: store.Value("failed at 100")}}}, nil
			}}
			if _, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clock.NewManual(100)}).RunDue(context.Background(), p, 100); err != nil {
				t.Fatal(err)
			}
			v, found, err := st.Get(context.Background(), p, "attempt")
			if err != nil || !found || string(v) != "failed at 100" {
				t.Fatalf("guard %s: note %q (found %v, %v), want it written", guard, v, found, err)
			}
			if row := onlyTimer(t, st, p); row.DueAtMs != 2_100 || string(row.State) != "attempt-2" {
				t.Fatalf("guard %s: timer %+v, want the backoff kept", guard, row)
			}
		}
	})
}

// awayFor is a store whose next n Applies fail as a Redis that is away
// would, writing nothing.
type awayFor struct {
	store.NamespaceStore
	n int
}

func (s *awayFor) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	if s.n > 0 {
		s.n--
		return store.Result{}, fmt.Errorf("apply: %w: connection refused", store.ErrUnavailable)
	}
	return s.NamespaceStore.Apply(ctx, p, b)
}

// A Redis restart during a completion is waited out while the lease lasts:
// the completion lands, rather than the timer staying leased until its
// lease expires and the fire's work being done again.
func TestACompletionWaitsOutAStoreThatIsAwayForAMoment(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "s")
		c, ok, err := timers.Claim(context.Background(), st, ns, onlyTimer(t, st, ns), 100, lease)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		away := &awayFor{NamespaceStore: st, n: 3}
		out, err := timers.Complete(context.Background(), away, clock.NewManual(100), c, timers.Fired{Done: true})
		if err != nil || out != timers.Completed {
			t.Fatalf("completion across a short outage: %v %v, want Completed", out, err)
		}
		if rows := allTimers(t, st, ns); len(rows) != 0 {
			t.Fatalf("timers left after a completion that was Done: %v", rows)
		}
		// Past the lease the completion stops retrying: another worker may
		// hold the timer by then.
		putTimer(t, st, ns, 100, 8, "ledger", "s")
		c, _, _ = timers.Claim(context.Background(), st, ns, onlyTimer(t, st, ns), 100, lease)
		away.n = 1
		out, err = timers.Complete(context.Background(), away, clock.NewManual(c.ExpiresAtMs), c, timers.Fired{Done: true})
		if err != nil || out != timers.LeaseLost || away.n != 0 {
			t.Fatalf("completion past the lease: %v %v (%d outages left), want one send and LeaseLost", out, err, away.n)
		}
		if len(allTimers(t, st, ns)) != 1 {
			t.Fatal("a completion that gave up changed the timer")
		}
	})
}

// A clock stepped forward makes a fire in flight look past its lease. If no
// worker claimed the timer since, its completion still lands, guarded by the
// leased row, and the fire's work is kept rather than done again.
func TestACompletionPastItsLeaseLandsWhenNoOneClaimedTheTimer(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 8, "billing", "s")
		c, ok, err := timers.Claim(context.Background(), st, ns, onlyTimer(t, st, ns), 100, lease)
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		var b store.Batch
		b.Put(store.Key("work"), store.Value("kept"))
		stepped := clock.NewManual(c.ExpiresAtMs + (10 * time.Minute).Milliseconds())
		out, err := timers.Complete(context.Background(), st, stepped, c, timers.Fired{Done: true, Batch: b})
		if err != nil || out != timers.Completed {
			t.Fatalf("completion after a forward step: %v %v, want Completed", out, err)
		}
		if _, found, err := st.Get(context.Background(), ns, "work"); err != nil || !found {
			t.Fatal("the fire's batch was not applied")
		}
	})
}

// A completion the store refuses as one that can never commit (here an add
// to a row of another layout) is counted and logged at Error every time,
// naming the namespace and the timer, never the rows.
func TestACompletionTheStoreRefusesIsCountedAndLoggedAsAnError(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		var logs testlog.Buffer
		ctx := context.Background()
		var b store.Batch
		b.Put("backlog", store.Value("secret payload"))
		apply(t, st, ns, b)
		putTimer(t, st, ns, 100, 8, "billing", "state")
		h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			var b store.Batch
			b.Add("backlog", nil, -1)
			return timers.Fired{DueAtMs: 9_000, Batch: b}, nil
		}}
		clk := clock.NewManual(150)
		for round := range 2 {
			report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clk, Budget: timers.Budget{Lease: lease},
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))}).RunDue(ctx, ns, clk.Now().UnixMilli())
			if !errors.Is(err, store.ErrCorrupt) || report.Refused != 1 {
				t.Fatalf("round %d: report %+v, %v; want one refused completion", round, report, err)
			}
			clk.Advance(lease + time.Second)
		}
		var refused int
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(line, "secret payload") {
				t.Fatalf("a row's contents logged: %s", line)
			}
			if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, `"namespace":"acme"`) && strings.Contains(line, `"reference":"billing"`) {
				refused++
			}
		}
		if refused != 2 {
			t.Fatalf("%d error lines naming the timer, want one per refused completion:\n%s", refused, logs.String())
		}
	})
}

// A runner logs through the logger it was given, never the process's
// default one: the operator's handler (its format, level and destination)
// sees every timer deferred, and nothing reaches slog.Default.
func TestARunnerLogsThroughTheLoggerItWasGiven(t *testing.T) {
	var global testlog.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewJSONHandler(&global, nil)))
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		putTimer(t, st, ns, 100, 99, "future-kind", "s")
		var b store.Batch
		b.Put(timers.Key(100, 8, "corrupt"), store.Value{0x7f, 1, 2})
		apply(t, st, ns, b)
		var logs testlog.Buffer
		runner := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t), Clock: clock.NewManual(100),
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		report, err := runner.RunDue(context.Background(), ns, 100)
		if err != nil || report.Deferred != 2 {
			t.Fatalf("report %+v, %v; want both timers deferred", report, err)
		}
		for _, msg := range []string{"timer of unknown kind; deferring", "undecodable timer row; deferring"} {
			if !strings.Contains(logs.String(), `"level":"WARN","msg":"`+msg+`","partition":"acme"`) {
				t.Errorf("the configured logger has no warning %q:\n%s", msg, logs.String())
			}
		}
	})
	if global.String() != "" {
		t.Fatalf("logged through slog.Default:\n%s", global.String())
	}
}

// A fire whose batch puts another timer of its partition due by the fire's
// end reports it (Woke), so the driver scans the partition for it; one that
// puts a timer due later, or none, does not.
func TestAFireThatMakesAnotherTimerDueSaysSo(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		putTimer(t, st, ns, 100, 8, "now", "")
		putTimer(t, st, ns, 100, 8, "later", "")
		putTimer(t, st, ns, 100, 8, "none", "")
		h := handlerFunc{kind: 8, fire: func(_ timers.FireContext, tm timers.DueTimer) (timers.Fired, error) {
			var b store.Batch
			switch tm.Reference {
			case "now":
				b.Put(timers.Key(150, 9, "woken"), timers.EncodeIdle(nil))
			case "later":
				b.Put(timers.Key(10_000, 9, "sleeping"), timers.EncodeIdle(nil))
			}
			return timers.Fired{Done: true, Batch: b}, nil
		}}
		clk := clock.NewManual(150)
		report, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clk}).RunDue(ctx, ns, 100)
		if err != nil {
			t.Fatal(err)
		}
		if report.Done != 3 || report.Woke != 1 {
			t.Fatalf("report %+v, want 3 done, 1 woke", report)
		}
	})
}
