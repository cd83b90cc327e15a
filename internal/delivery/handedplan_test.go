package delivery

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// lingeringDriver is quietDriver with h given the production handler's
// arrivals and linger: the fire watches its partition's arrivals in this
// process.
func lingeringDriver(t *testing.T, f *fleet, st DueStore, h *Handler) (*Driver, *Arrivals) {
	t.Helper()
	arr := NewArrivals(4)
	h.Linger, h.Arrivals = DefaultLinger, arr
	return quietDriverOf(t, f, st, h, Config{Arrivals: arr}), arr
}

// refusals counts the batches applied through it that failed a guard.
type refusals struct {
	DueStore
	mu      sync.Mutex
	refused int
}

func (r *refusals) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	res, err := r.DueStore.Apply(ctx, p, b)
	if err == nil && !res.Committed {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
	}
	return res, err
}

func (r *refusals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// A fire handed its whole stream by its ingest, with nothing arriving in
// its process meanwhile, plans against the backlog it was handed: the
// completion is all it asks of the store.
func TestAQuietHandedFireCompletesWithNoRead(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		st := &counting{DueStore: f.st, calls: map[string]int{}}
		sink := newTally(2)
		d, _ := lingeringDriver(t, f, st, &Handler{Sink: sink})
		st.mu.Lock()
		clear(st.calls)
		st.mu.Unlock()
		p := store.Partition{Namespace: "acme"}
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
		if _, err := app.Append(f.ctx, p, []schema.Outcome{committed("r-1"), committed("r-2")}); err != nil {
			t.Fatal(err)
		}
		sink.wait(t)
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if want := map[string]int{"apply": 1}; !maps.Equal(st.calls, want) {
			t.Fatalf("store calls %v, want %v", st.calls, want)
		}
		if got := f.backlog("acme", "billing"); got != 0 {
			t.Fatalf("backlog %d after the fire, want 0", got)
		}
		if n := deliveryTimers(t, f, p); n != 0 {
			t.Fatalf("the delivered stream kept %d timers", n)
		}
	})
}

// appendingSink appends r-2 to its stream while it delivers r-1, through
// an appender of its own, and tells arrivals of it when set: as an ingest
// in the fire's process would, or, nil, as one in another process.
type appendingSink struct {
	f        *fleet
	arrivals *Arrivals
	once     sync.Once
	mu       sync.Mutex
	seen     []string
	done     chan struct{}
}

func (s *appendingSink) Deliver(ctx context.Context, o Parcel) error {
	s.once.Do(func() {
		p := store.Partition{Namespace: o.Namespace}
		app := &outbox.Appender{Store: s.f.st, Clock: clock.System{}}
		st, err := app.Append(ctx, p, []schema.Outcome{committed("r-2")})
		if err != nil {
			s.f.t.Error(err)
			return
		}
		if s.arrivals != nil {
			s.arrivals.Arrived(p, []outbox.StreamRef{{Seq: st[0].Seq, RID: "r-2", Logged: true}})
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen = append(s.seen, o.Outcome.ReservationID); len(s.seen) == 2 {
		close(s.done)
	}
	return nil
}

func (s *appendingSink) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(patience):
		t.Fatal("r-2 was not delivered")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// handedFireWithAnAppend runs r-1 through a handed fire of a driver on h,
// during whose call r-2 is appended to the stream, told to the driver's
// arrivals when local. It checks both are delivered once, in order, and
// the backlog emptied, and returns the store calls from the append of r-1
// on and how many batches failed their guards.
func handedFireWithAnAppend(t *testing.T, f *fleet, h *Handler, local bool) (map[string]int, int) {
	t.Helper()
	f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
	st := &counting{DueStore: f.st, calls: map[string]int{}}
	ref := &refusals{DueStore: st}
	sink := &appendingSink{f: f, done: make(chan struct{})}
	h.Sink = sink
	d, arr := lingeringDriver(t, f, ref, h)
	if local {
		sink.arrivals = arr
	}
	app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
	st.mu.Lock()
	clear(st.calls)
	st.mu.Unlock()
	if _, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed("r-1")}); err != nil {
		t.Fatal(err)
	}
	if got := sink.wait(t); !slices.Equal(got, []string{"r-1", "r-2"}) {
		t.Fatalf("delivered %v, want r-1 then r-2, each once", got)
	}
	if err := d.Stop(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.backlog("acme", "billing"); got != 0 {
		t.Fatalf("backlog %d after the fires, want 0", got)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return maps.Clone(st.calls), ref.count()
}

// An outcome that arrives in the fire's process during its calls, and
// that the fire does not linger to take, is past what the ingest handed:
// the completion reads the backlog after the calls, plans r-2 as left, and
// commits at its first try.
func TestAnArrivalDuringAHandedFiresCallsIsReadAfterThem(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		// A page of one row: the fire cannot linger to take r-2 itself.
		calls, refused := handedFireWithAnAppend(t, f, &Handler{MaxRows: 1}, true)
		if calls["get"] < 1 {
			t.Fatalf("store calls %v: the first fire did not read its backlog after the call", calls)
		}
		if refused != 0 {
			t.Fatalf("%d batches failed their guards: the completion was planned without the arrival", refused)
		}
	})
}

// An outcome another process appends during the calls is not seen by the
// fire's watch: the completion planned against the handed backlog fails
// its guard, the re-plan reads, and r-1 is not sent again.
func TestAnAppendFromAnotherProcessDuringAHandedFireFailsItsGuardAndReplans(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		if _, refused := handedFireWithAnAppend(t, f, &Handler{}, false); refused != 1 {
			t.Fatalf("%d batches failed their guards, want the first completion's", refused)
		}
	})
}

// A handed fire that lingers takes in rows its ingest did not hand: its
// completion reads the backlog after the calls, which counts them, and
// acknowledges both rows at its first try.
func TestAHandedFireThatLingersReadsItsBacklogAfterItsCalls(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		calls, refused := handedFireWithAnAppend(t, f, &Handler{}, true)
		// The lingering read of r-2, the backlog read, one completion.
		if want := map[string]int{"getmany": 1, "get": 1, "apply": 1}; !maps.Equal(calls, want) {
			t.Fatalf("store calls %v, want %v", calls, want)
		}
		if refused != 0 {
			t.Fatalf("%d batches failed their guards", refused)
		}
	})
}

// deliveryTimers counts p's delivery timers.
func deliveryTimers(t *testing.T, f *fleet, p store.Partition) int {
	t.Helper()
	rows, err := timers.All(f.ctx, f.st, p)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rows {
		if r.Kind == timers.KindOutcomeDelivery {
			n++
		}
	}
	return n
}
