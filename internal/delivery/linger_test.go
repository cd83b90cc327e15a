package delivery

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// arriving is a sink that, as it takes a row, lets the test append the
// next outcomes, as producers would while the fire runs.
type arriving struct {
	refusing
	// then maps a rid to what to do once it is called: append outcomes,
	// and whether to tell Arrivals of them.
	then map[string]appends
	arr  *Arrivals
	errs []error
}

type appends struct {
	rids []string
	tell bool
}

func (a *arriving) Deliver(ctx context.Context, o Parcel) error {
	err := a.refusing.Deliver(ctx, o)
	next, ok := a.then[o.Outcome.ReservationID]
	if !ok {
		return err
	}
	var os []schema.Outcome
	for _, rid := range next.rids {
		os = append(os, committed(rid))
	}
	st, aerr := a.e.App.Append(ctx, a.e.P, os)
	a.mu.Lock()
	defer a.mu.Unlock()
	if aerr != nil {
		a.errs = append(a.errs, aerr)
		return err
	}
	if next.tell {
		a.arr.Arrived(a.e.P, refsOf(os, st))
	}
	return err
}

// scanCounting counts the scans of a store it hides the MultiReader of.
type scanCounting struct {
	store.NamespaceStore
	n atomic.Int64
}

func (s *scanCounting) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	s.n.Add(1)
	return s.NamespaceStore.Scan(ctx, p, start, end, after, limit)
}

// refsOf is the rows of the accepted outcomes, as ingest tells Arrivals.
func refsOf(os []schema.Outcome, st []outbox.Status) []outbox.StreamRef {
	var refs []outbox.StreamRef
	for i, s := range st {
		if s.Code == outbox.Accepted {
			refs = append(refs, s.Ref(os[i].ReservationID))
		}
	}
	return refs
}

func (a *arriving) failures() []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.errs
}

// busy has p's last two arrivals come at once, as in a namespace that
// takes outcomes faster than a linger apart.
func busy(arr *Arrivals, p store.Partition) {
	arr.Arrived(p, nil)
	arr.Arrived(p, nil)
}

func lingering(sink Sink, arr *Arrivals, e *env) *Handler {
	return &Handler{Sink: sink, Clock: e.Clk, MaxRows: 4, Linger: MaxLinger, Arrivals: arr}
}

// A fire that delivered every row of its stream takes the outcomes that
// arrive while it lingers, and acknowledges them with the first in one
// completion: one fire, one claim, the backlog empty, the head past them.
func TestALingeringFireTakesTheRowsThatArrive(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		arr := NewArrivals(4)
		sink := &arriving{refusing: refusing{e: e}, arr: arr, then: map[string]appends{
			"a": {rids: []string{"b"}, tell: true},
			"b": {rids: []string{"c", "d"}, tell: true},
			// d fills the page of 4: the fire ends without waiting.
			"d": {rids: []string{"e"}, tell: true},
		}}
		scans := &scanCounting{NamespaceStore: e.St}
		e.St = scans
		rep := e.fire(lingering(sink, arr, e))
		e.St = scans.NamespaceStore
		if errs := sink.failures(); len(errs) > 0 {
			t.Fatal(errs)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b", "c", "d"}) {
			t.Fatalf("delivered %v, want a to d in one fire", got)
		}
		// The runner's of the due timers and the first page's two (its
		// pending rows and its log): the rows the arrivals named are read
		// by key.
		if n := scans.n.Load(); n != 3 {
			t.Fatalf("%d scans, want 3: the due timers and the first page", n)
		}
		if rep.Claimed != 1 {
			t.Fatalf("report %+v, want one claim", rep)
		}
		if got := e.pending(); !slices.Equal(got, []string{"e"}) {
			t.Fatalf("queue %v, want e alone", got)
		}
		if e.backlogRows() != 1 {
			t.Fatalf("backlog %d, want 1 (e)", e.backlogRows())
		}
		queue := outboxtest.Queue(t, e.St, e.P, ep)
		if h := e.head(); h.Seq != queue[0].Seq {
			t.Fatalf("head at %d, want e's %d", h.Seq, queue[0].Seq)
		}
		// e arrived past the page: the stream is due now for it.
		if due := e.timerDue(); due > e.NowMs() {
			t.Fatalf("due at %d, want now (%d)", due, e.NowMs())
		}
	})
}

// Rows another process appended, which no arrival named, are read with
// the next arrival's, never skipped: the head moves past only what the
// fire read.
func TestALingeringFireReadsRowsNoArrivalNamed(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		arr := NewArrivals(4)
		busy(arr, e.P)
		// b is another process's: no arrival here names it.
		sink := &arriving{refusing: refusing{e: e}, arr: arr, then: map[string]appends{"a": {rids: []string{"b"}}}}
		var errs []error
		arr.began = func() {
			// The fire waits: append c and name it alone.
			arr.began = func() { arr.Close() } // the next wait ends the fire
			os := []schema.Outcome{committed("c")}
			st, err := e.App.Append(e.Ctx, e.P, os)
			if err != nil {
				errs = append(errs, err)
				arr.Close()
				return
			}
			arr.Arrived(e.P, refsOf(os, st))
		}
		e.fire(lingering(sink, arr, e))
		if errs := append(sink.failures(), errs...); len(errs) > 0 {
			t.Fatal(errs)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("delivered %v, want a, b and c", got)
		}
		if e.backlogRows() != 0 || len(e.pending()) != 0 {
			t.Fatalf("backlog %d, queue %v", e.backlogRows(), e.pending())
		}
	})
}

// Rows appended while a fire lingers that no arrival tells it of are not
// lost: the completion counts them and the stream is due at once.
func TestRowsAppendedUntoldAreDeliveredByTheNextFire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		arr := NewArrivals(4)
		sink := &arriving{refusing: refusing{e: e}, arr: arr, then: map[string]appends{"a": {rids: []string{"b"}}}}
		h := lingering(sink, arr, e)
		h.Linger = time.Millisecond
		e.fire(h)
		if got := sink.rids(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("first fire delivered %v, want a", got)
		}
		if due := e.timerDue(); due > e.NowMs() {
			t.Fatalf("due at %d, want now", due)
		}
		e.fireAtDue(h)
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b"}) || e.backlogRows() != 0 {
			t.Fatalf("delivered %v, backlog %d", got, e.backlogRows())
		}
	})
}

// A call that fails ends the lingering: the rows delivered before it are
// acknowledged, the refused one keeps its row and its attempt, and the
// endpoint is failing from then.
func TestAFailedCallEndsTheLingering(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		arr := NewArrivals(4)
		sink := &arriving{refusing: refusing{e: e, refuse: map[string]bool{"b": true}}, arr: arr, then: map[string]appends{
			"a": {rids: []string{"b"}, tell: true},
			"b": {rids: []string{"c"}, tell: true},
		}}
		e.fire(lingering(sink, arr, e))
		if got := sink.called; !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("called %v, want a then b, and nothing after b failed", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"b", "c"}) {
			t.Fatalf("queue %v, want b and c", got)
		}
		if a, ok := e.attempts("b"); !ok || a.Total != 1 {
			t.Fatalf("b's attempts %+v %v, want one", a, ok)
		}
		// b, refused in a round of its own after a was delivered, starts
		// the failing period as a fire of its own would have.
		if hl := e.state().Health; hl == nil || hl.FailingSinceMs == 0 || hl.LastStatus != 500 {
			t.Fatalf("health %+v, want failing since b", hl)
		}
	})
}

// Stopping the driver ends a lingering fire at once, which completes what
// it delivered; a watch after Close lingers no more.
func TestCloseEndsTheLingering(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		arr := NewArrivals(4)
		busy(arr, e.P)
		arr.began = func() { arr.Close() }
		sink := &refusing{e: e}
		e.fire(&Handler{Sink: sink, Clock: e.Clk, Linger: time.Hour, Arrivals: arr})
		if got := sink.rids(); !slices.Equal(got, []string{"a"}) || e.backlogRows() != 0 {
			t.Fatalf("delivered %v, backlog %d", got, e.backlogRows())
		}
		if w := arr.watch(e.P); w != nil {
			t.Fatal("a closed Arrivals still watches")
		}

	})
}

// A stream with a rate limit does not linger: its tokens, not arrivals,
// say when it is called.
func TestARateLimitedStreamDoesNotLinger(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, RateLimit: 100})
		e.seed("a")
		arr := NewArrivals(4)
		busy(arr, e.P)
		arr.began = func() { t.Error("a rate-limited stream lingered") }
		e.fire(&Handler{Sink: &refusing{e: e}, Clock: e.Clk, Linger: time.Hour, Arrivals: arr})
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d", e.backlogRows())
		}
	})
}

// An arrival between a watch's read and its wait is not missed; one after
// the wait marked it is waited for; at most max watches wait at once.
func TestArrivalsAreNotMissedAndWaitsAreBounded(t *testing.T) {
	t.Parallel()
	p := store.Partition{Namespace: "acme"}
	arr := NewArrivals(1)
	w := arr.watch(p)
	arr.Arrived(p, []outbox.StreamRef{{Seq: 6, RID: "r-6"}, {Seq: 7, RID: "r-7"}})
	// Bounded, so a missed arrival fails rather than hangs.
	if !w.wait(t.Context(), 10*time.Second) || w.to != 7 {
		t.Fatalf("an arrival before the wait: to %d", w.to)
	}
	if got := w.arrived(6, 7); len(got) != 2 || got[0].RID != "r-6" || got[1].RID != "r-7" {
		t.Fatalf("the rows named: %+v", got)
	}
	if got := w.arrived(5, 7); got != nil {
		t.Fatalf("a range with a row no arrival named: %+v", got)
	}
	arr.Arrived(p, nil)
	if !w.wait(t.Context(), 10*time.Second) || w.to != 0 {
		t.Fatalf("an arrival naming no row must read to the log's end: to %d", w.to)
	}
	if w.wait(t.Context(), time.Nanosecond) {
		t.Fatal("nothing arrived, yet the wait reported an arrival")
	}

	// One waits; a second, at the bound, returns at once.
	other := arr.watch(p)
	var wg sync.WaitGroup
	waiting := make(chan struct{})
	arr.began = func() { close(waiting) }
	var got bool
	wg.Go(func() { got = w.wait(t.Context(), time.Hour) })
	<-waiting
	arr.began = nil
	if other.wait(t.Context(), time.Hour) {
		t.Fatal("a wait beyond the bound waited and saw an arrival")
	}
	arr.Arrived(store.Partition{Namespace: "other"}, []outbox.StreamRef{{Seq: 9, RID: "o-9"}})
	arr.Arrived(p, []outbox.StreamRef{{Seq: 9, RID: "r-9"}})
	wg.Wait()
	if !got || w.to != 9 {
		t.Fatalf("the waiting watch: %v, to %d", got, w.to)
	}
	w.release()
	other.release()
	if len(arr.parts) != 0 {
		t.Fatalf("released watches left %d partitions", len(arr.parts))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if w := arr.watch(p); w.wait(ctx, time.Hour) {
		t.Fatal("a canceled wait reported an arrival")
	} else if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal(ctx.Err())
	}
}

// Ingest goes on while the driver stops: an arrival after Close, with a
// fire still watching, changes nothing and does not fail.
func TestAnArrivalAfterCloseIsNoFault(t *testing.T) {
	t.Parallel()
	p := store.Partition{Namespace: "acme"}
	arr := NewArrivals(4)
	w := arr.watch(p)
	arr.Close()
	arr.Arrived(p, []outbox.StreamRef{{Seq: 9, RID: "late"}})
	arr.Close()
	if w.wait(t.Context(), time.Hour) {
		t.Fatal("a closed Arrivals reported an arrival")
	}
	w.release()
}

// A fire waits only where arrivals come closer together than its linger:
// at a slower rate the next outcome is not worth holding a worker for.
func TestAFireWaitsOnlyWhereArrivalsComeWithinItsLinger(t *testing.T) {
	t.Parallel()
	p := store.Partition{Namespace: "acme"}
	arr := NewArrivals(4)
	waited := false
	arr.began = func() { waited = true }
	w := arr.watch(p)
	defer w.release()
	if w.wait(t.Context(), time.Nanosecond) || waited {
		t.Fatal("a partition with no arrivals was waited on")
	}
	now := time.Now()
	arr.times[p] = arrivalTimes{prev: now.Add(-time.Second), last: now}
	if w.wait(t.Context(), 50*time.Millisecond) || waited {
		t.Fatal("arrivals a second apart were waited on for 50ms")
	}
	arr.times[p] = arrivalTimes{prev: now.Add(-time.Millisecond), last: now}
	if w.wait(t.Context(), 2*time.Millisecond); !waited {
		t.Fatal("arrivals a millisecond apart were not waited on")
	}
	// Quiet partitions are pruned.
	arr.times[store.Partition{Namespace: "quiet"}] = arrivalTimes{prev: now.Add(-time.Hour), last: now.Add(-time.Hour)}
	for range pruneEvery {
		arr.Arrived(p, nil)
	}
	if _, ok := arr.times[store.Partition{Namespace: "quiet"}]; ok || len(arr.times) != 1 {
		t.Fatalf("times %v, want the quiet partition pruned", arr.times)
	}
}
