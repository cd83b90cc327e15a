package timers_test

import (
	"context"
	"testing"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// putHeld writes a timer held from nowMs, as an ingest would, and returns
// the claim it stands for.
func putHeld(t *testing.T, st store.NamespaceStore, nowMs int64, ref, state string) (store.Entry, timers.Claimed) {
	t.Helper()
	e, err := timers.NewHeld(nowMs, lease, 8, ref, []byte(state))
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(e.Key, e.Value)
	apply(t, st, ns, b)
	c, ok := timers.Held(ns, e)
	if !ok {
		t.Fatalf("a held row %q does not read as held", e.Key)
	}
	return e, c
}

// A held timer is the row a claim at nowMs would have left: not due until
// its lease ends, and fired by its holder with no claim.
func TestAHeldTimerIsFiredByItsHolderWithNoClaim(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		_, c := putHeld(t, st, 100, "billing", "s")
		row := onlyTimer(t, st, ns)
		if row.Lease == nil || row.Lease.DueAtMs != 100 || row.DueAtMs != 100+lease.Milliseconds() || string(row.State) != "s" {
			t.Fatalf("held row %+v, want leased until 100+lease, due 100", row)
		}
		if c.Timer.DueAtMs != 100 || c.ExpiresAtMs != 100+lease.Milliseconds() || string(c.Timer.State) != "s" {
			t.Fatalf("claim %+v", c)
		}
		if start, end := timers.DueRange(100 + lease.Milliseconds() - 1); scanCount(t, st, start, end) != 0 {
			t.Fatal("a held timer is due before its lease ends")
		}
		var saw timers.DueTimer
		h := handlerFunc{kind: 8, fire: func(_ timers.FireContext, tm timers.DueTimer) (timers.Fired, error) {
			saw = tm
			return timers.Fired{Done: true}, nil
		}}
		counted := &countingStore{NamespaceStore: st}
		r := timers.NewRunner(timers.RunnerConfig{Store: counted, Handlers: handlers(t, h), Clock: clock.NewManual(120), Budget: timers.Budget{Lease: lease}})
		report, err := r.RunHeld(ctx, 120, c)
		if err != nil || report.Fired != 1 {
			t.Fatalf("report %+v, %v", report, err)
		}
		if saw.Reference != "billing" || saw.DueAtMs != 100 {
			t.Fatalf("fired %+v", saw)
		}
		if counted.applies != 1 {
			t.Fatalf("%d batches applied, want the completion alone", counted.applies)
		}
		if n := len(allTimers(t, st, ns)); n != 0 {
			t.Fatalf("%d timers remain after Done", n)
		}
		assertDueIndex(t, st, ns)
	})
}

// A holder that will not fire its timer releases it: idle and due when it
// was held. Once another driver took the timer over, the release writes
// nothing.
func TestAReleasedHeldTimerIsDueAsItWas(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		_, c := putHeld(t, st, 100, "billing", "s")
		if err := timers.Release(ctx, st, c); err != nil {
			t.Fatal(err)
		}
		row := onlyTimer(t, st, ns)
		if row.Lease != nil || row.DueAtMs != 100 || string(row.State) != "s" {
			t.Fatalf("released row %+v, want idle and due 100", row)
		}
		assertDueIndex(t, st, ns)

		// Held again, its holder dies; another driver takes it over at
		// the lease's end, and the first holder's late release is refused.
		if _, ok, err := timers.Claim(ctx, st, ns, row, 100, lease); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		var b store.Batch
		b.Delete(timers.Key(100+lease.Milliseconds(), 8, "billing"))
		apply(t, st, ns, b)
		_, c = putHeld(t, st, 200, "billing", "s")
		taken, ok, err := timers.Claim(ctx, st, ns, onlyTimer(t, st, ns), 200+lease.Milliseconds(), lease)
		if err != nil || !ok || taken.Timer.DueAtMs != 200 {
			t.Fatalf("takeover at the lease's end: %+v %v %v", taken, ok, err)
		}
		if err := timers.Release(ctx, st, c); err != nil {
			t.Fatal(err)
		}
		if row := onlyTimer(t, st, ns); row.Lease == nil || row.DueAtMs != 200+2*lease.Milliseconds() {
			t.Fatalf("a late release moved the new holder's timer: %+v", row)
		}
	})
}

// An idle row is no claim.
func TestAnIdleRowIsNotHeld(t *testing.T) {
	e := store.Entry{Key: timers.Key(100, 8, "billing"), Value: timers.EncodeIdle(nil)}
	if _, ok := timers.Held(ns, e); ok {
		t.Fatal("an idle row read as held")
	}
	if _, ok := timers.Held(ns, store.Entry{Key: e.Key, Value: store.Value{0x7f}}); ok {
		t.Fatal("a corrupt row read as held")
	}
}

// countingStore counts the batches applied through it.
type countingStore struct {
	store.NamespaceStore
	applies int
}

func (s *countingStore) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	s.applies++
	return s.NamespaceStore.Apply(ctx, p, b)
}

// A fire that stays leaves its timer in place, idle, due when its lease
// would have ended; a writer holding that timer again keeps it in place
// while its due time is within the last quarter of a lease from now, and
// otherwise moves it to a whole lease from now. Each hold is leased
// afresh, with the state it had.
func TestATimerThatStaysIsHeldAgainInPlace(t *testing.T) {
	eachBackend(t, func(t *testing.T, st *redisstore.Store) {
		ctx := context.Background()
		_, c := putHeld(t, st, 100, "billing", "")
		h := handlerFunc{kind: 8, fire: func(timers.FireContext, timers.DueTimer) (timers.Fired, error) {
			return timers.Fired{Done: true, Stay: true, State: []byte("s")}, nil
		}}
		r := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: handlers(t, h), Clock: clock.NewManual(120), Budget: timers.Budget{Lease: lease}})
		if report, err := r.RunHeld(ctx, 120, c); err != nil || report.Done != 1 {
			t.Fatalf("report %+v, %v", report, err)
		}
		stayed := onlyTimer(t, st, ns)
		if stayed.Key != c.Key || stayed.Lease != nil || string(stayed.State) != "s" {
			t.Fatalf("stayed row %+v, want idle with state s under the leased key %q", stayed, c.Key)
		}
		end := c.ExpiresAtMs
		for _, tc := range []struct {
			name    string
			nowMs   int64
			inPlace bool
		}{
			{"held at once", 100, true},
			{"with a quarter of a lease gone", end - lease.Milliseconds()*3/4, true},
			{"with more than a quarter gone", end - lease.Milliseconds()*3/4 + 1, false},
			{"due beyond a lease from now", end - lease.Milliseconds() - 1, false},
		} {
			var b store.Batch
			if err := stayed.Hold(&b, tc.nowMs, lease); err != nil {
				t.Fatal(err)
			}
			put := b.Writes[len(b.Writes)-1]
			row, err := timers.DecodeRow(put.Key, put.Value)
			if err != nil || row.Lease == nil || row.Lease.DueAtMs != tc.nowMs || string(row.State) != "s" {
				t.Fatalf("%s: held row %+v, %v", tc.name, row, err)
			}
			wantDue := tc.nowMs + lease.Milliseconds()
			if tc.inPlace {
				wantDue = end
			}
			if (put.Key == stayed.Key) != tc.inPlace || row.DueAtMs != wantDue {
				t.Fatalf("%s: held until %d under %q, want %d (in place %v)", tc.name, row.DueAtMs, put.Key, wantDue, tc.inPlace)
			}
			if b.Preconditions[0].Key != stayed.Key || string(b.Preconditions[0].Value) != string(stayed.Raw) {
				t.Fatalf("%s: not guarded by the row as read", tc.name)
			}
		}
		var b store.Batch
		if err := stayed.Hold(&b, 100, lease); err != nil {
			t.Fatal(err)
		}
		apply(t, st, ns, b)
		if held := onlyTimer(t, st, ns); held.Key != stayed.Key || held.Lease == nil {
			t.Fatalf("held row %+v, want leased in place", held)
		}
	})
}
