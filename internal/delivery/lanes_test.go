package delivery

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// hangers is a sink whose calls to namespaces named hang-* (or those hang
// names, when set) never answer until released or cut; every other call is
// delivered.
type hangers struct {
	hang      func(ns string) bool
	entered   chan string // a hanging call began, by namespace
	delivered chan string // a call was delivered, by namespace

	mu      sync.Mutex
	open    int // hanging calls open now
	most    int
	release map[string]chan struct{}
}

func newHangers() *hangers {
	return &hangers{entered: make(chan string, 64), delivered: make(chan string, 64), release: map[string]chan struct{}{}}
}

func (h *hangers) Deliver(ctx context.Context, o Parcel) error {
	if h.hang != nil && !h.hang(o.Namespace) || h.hang == nil && !strings.HasPrefix(o.Namespace, "hang-") {
		h.delivered <- o.Namespace
		return nil
	}
	h.mu.Lock()
	h.open++
	h.most = max(h.most, h.open)
	rel, ok := h.release[o.Namespace]
	if !ok {
		rel = make(chan struct{})
		h.release[o.Namespace] = rel
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.open--
		h.mu.Unlock()
	}()
	h.entered <- o.Namespace
	select {
	case <-rel:
		return &Error{Class: "status", Status: 503, Reason: "unavailable"}
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answer makes the hanging call of ns fail now.
func (h *hangers) answer(ns string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.release[ns])
}

func (h *hangers) openCalls() (open, most int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.most
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(patience):
		t.Fatalf("waited %v for %s", patience, what)
		panic("unreachable")
	}
}

// lanesFleet seeds one row for each namespace's billing endpoint, due in
// the order given (the first the oldest); those listed in failed have a
// timer whose state counts a failed fire, as after a fire that timed out.
func lanesFleet(f *fleet, namespaces []string, failed map[string]bool) {
	f.t.Helper()
	now := time.Now().UnixMilli()
	for i, ns := range namespaces {
		f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
		f.seed(ns, ns+"-r")
		due := now - int64(len(namespaces)-i)*1000
		if !failed[ns] {
			f.dueAt(ns, due)
			continue
		}
		p := store.Partition{Namespace: ns}
		row, found, err := timers.Find(f.ctx, f.st, p, timers.KindOutcomeDelivery, "billing")
		if err != nil || !found {
			f.t.Fatalf("timer of %s: %v %v", ns, found, err)
		}
		state, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 1})
		if err != nil {
			f.t.Fatal(err)
		}
		var b store.Batch
		row.Replace(&b, due, state)
		if res, err := f.st.Apply(f.ctx, p, b); err != nil || !res.Committed {
			f.t.Fatalf("fail timer of %s: %+v %v", ns, res, err)
		}
	}
}

// lanesDriver starts a driver over sink whose calls are never cut by a
// timeout: a hanging call lasts until the test ends it. Its store is the
// fleet's unless cfg names one.
func lanesDriver(f *fleet, sink Sink, cfg Config) *Driver {
	f.t.Helper()
	reg, err := timers.NewHandlers(&Handler{Sink: sink, SinkTimeout: time.Hour, FireBudget: time.Hour, Metrics: cfg.Metrics})
	if err != nil {
		f.t.Fatal(err)
	}
	if cfg.Store == nil {
		cfg.Store = f.st
	}
	cfg.Handlers = reg
	if cfg.after == nil {
		cfg.after = never // the poll interval never ends: every launch is the driver's own doing
	}
	return f.start(cfg)
}

func (d *Driver) lanes() (main, slow, slowWaiting, moving int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.main, d.slow, d.slowWait.len(), len(d.moving)
}

// Streams that start hanging at once (their endpoints never answered
// before, so nothing marks them) are fired in the main lane, oldest first,
// ahead of a healthy stream due after them. Each holds its main worker only
// until SlowAfter ends, then moves to the slow lane: the healthy stream is
// fired as soon as the thresholds of all but workers-1 hangers have ended
// (about hangers/workers thresholds in turn), while every hanging call is
// still open.
func TestStreamsThatStartHangingHoldAMainWorkerOnlyUntilTheyMoveToTheSlowLane(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		const hanging, workers = 6, 2
		var namespaces []string
		for i := range hanging {
			namespaces = append(namespaces, fmt.Sprintf("hang-%d", i))
		}
		lanesFleet(f, append(namespaces, "healthy"), nil)
		sink := newHangers()
		thresholds := make(chan chan time.Time, 64)
		moved := make(chan bool, 64)
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		d := lanesDriver(f, sink, Config{Concurrency: workers, SlowConcurrency: 8, Metrics: m,
			slowTimer: func(time.Duration) <-chan time.Time {
				c := make(chan time.Time, 1)
				thresholds <- c
				return c
			},
			slowed: func(ok bool) { moved <- ok }})

		// End the thresholds of the fires in the main lane as they come,
		// until one main worker is left to the healthy stream, and no
		// more: it must then be fired without any further one ending.
		const moves = hanging - workers + 1
		healthy := false
		for ended := 0; ended < moves; {
			select {
			case ns := <-sink.delivered:
				t.Fatalf("%s delivered after %d thresholds ended, before the hangers due ahead of it were fired", ns, ended)
			case c := <-thresholds:
				c <- time.Now()
				if !recv(t, moved, "the fire to move") {
					t.Fatal("a fire past its threshold did not move to a slow lane with room")
				}
				ended++
			case <-time.After(patience):
				main, slow, _, _ := d.lanes()
				t.Fatalf("%d thresholds ended; main %d, slow %d", ended, main, slow)
			}
		}
		select {
		case ns := <-sink.delivered:
			healthy = ns == "healthy"
		case <-time.After(patience):
		}
		if !healthy {
			main, slow, _, _ := d.lanes()
			t.Fatalf("the healthy stream was not fired once %d hangers' thresholds ended (main %d, slow %d)", moves, main, slow)
		}
		for range hanging {
			recv(t, sink.entered, "a hanging call")
		}
		if open, _ := sink.openCalls(); open != hanging {
			t.Fatalf("%d hanging calls open, want all %d still waiting", open, hanging)
		}
		if _, slow, _, _ := d.lanes(); slow != moves {
			t.Fatalf("%d fires in the slow lane, want the %d hangers that moved", slow, moves)
		}
		if got := testutil.ToFloat64(m.slowedFires); got != moves {
			t.Fatalf("relay_fires_slowed_total = %v, want %d", got, moves)
		}
		if got := testutil.ToFloat64(m.lanes.WithLabelValues("slow")); got != moves {
			t.Fatalf(`relay_fires_in_flight{lane="slow"} = %v, want %d`, got, moves)
		}
	})
}

// A stream whose last fire failed (its timer counts a failed fire) is
// fired in the slow lane from the start: hanging again, it never holds a
// main worker, even for SlowAfter. With one main worker and the slow-lane
// threshold never ending, a healthy stream due after three such hangers is
// fired at once.
func TestAStreamWhoseLastFireFailedNeverTakesAMainWorker(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		namespaces := []string{"hang-0", "hang-1", "hang-2"}
		failed := map[string]bool{}
		for _, ns := range namespaces {
			failed[ns] = true
		}
		lanesFleet(f, append(namespaces, "healthy"), failed)
		sink := newHangers()
		d := lanesDriver(f, sink, Config{Concurrency: 1, SlowConcurrency: 4, slowTimer: never})
		for range namespaces {
			recv(t, sink.entered, "a hanging call")
		}
		select {
		case <-sink.delivered:
		case <-time.After(patience):
			main, slow, _, _ := d.lanes()
			t.Fatalf("the healthy stream waits behind streams that failed before (main %d, slow %d)", main, slow)
		}
		if _, slow, _, _ := d.lanes(); slow != len(namespaces) {
			t.Fatalf("%d fires in the slow lane, want the %d that failed before", slow, len(namespaces))
		}
	})
}

// The slow lane bounds the calls open to endpoints that hang: with room
// for three, eight streams that failed before get three calls, the other
// five wait for a slot without a claim, and the main lane still delivers.
// When one call ends its slot goes to the next waiting stream.
func TestCallsToHangingEndpointsAreBoundedByTheSlowLane(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		const hanging, slots = 8, 3
		var namespaces []string
		failed := map[string]bool{}
		for i := range hanging {
			ns := fmt.Sprintf("hang-%d", i)
			namespaces = append(namespaces, ns)
			failed[ns] = true
		}
		lanesFleet(f, append(namespaces, "healthy"), failed)
		sink := newHangers()
		d := lanesDriver(f, sink, Config{Concurrency: 2, SlowConcurrency: slots, slowTimer: never})
		called := map[string]bool{}
		for range slots {
			called[recv(t, sink.entered, "a hanging call")] = true
		}
		// The healthy stream, due last, is scanned after every hanger.
		recv(t, sink.delivered, "the healthy stream")
		if _, slow, waiting, _ := d.lanes(); slow != slots || waiting != hanging-slots {
			t.Fatalf("slow lane %d, %d waiting; want %d and %d", slow, waiting, slots, hanging-slots)
		}
		if open, most := sink.openCalls(); open != slots || most != slots {
			t.Fatalf("%d hanging calls open (at most %d), want %d", open, most, slots)
		}
		// Those waiting were not claimed: another relay may fire them.
		for _, ns := range namespaces {
			row, found, err := timers.Find(f.ctx, f.st, store.Partition{Namespace: ns}, timers.KindOutcomeDelivery, "billing")
			if err != nil || !found {
				t.Fatalf("timer of %s: %v %v", ns, found, err)
			}
			if (row.Lease != nil) != called[ns] {
				t.Fatalf("%s: leased %v, called %v", ns, row.Lease != nil, called[ns])
			}
		}
		var first string
		for ns := range called {
			first = ns
			break
		}
		sink.answer(first)
		if next := recv(t, sink.entered, "the next waiting stream's call"); called[next] {
			t.Fatalf("%s called again, want a stream that waited", next)
		}
		if _, most := sink.openCalls(); most != slots {
			t.Fatalf("at most %d hanging calls open, want %d", most, slots)
		}
	})
}

// A fire past its threshold that finds the slow lane full keeps its main
// worker until a slow slot frees; the slot goes to whichever waited
// longest. hang-1 starts to wait before hang-2, a stream that failed
// before, finds the lane full: the first slot to free goes to hang-1, the
// next to hang-2.
func TestAFreedSlowSlotGoesToAFireWaitingToLeaveTheMainLaneSinceBeforeAStreamWaitingForIt(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		// hang-0 failed before and takes the only slow slot; hang-1 is
		// new and takes a main worker.
		lanesFleet(f, []string{"hang-0", "hang-1"}, map[string]bool{"hang-0": true})
		sink := newHangers()
		thresholds := make(chan chan time.Time, 8)
		moved := make(chan bool, 8)
		finished := make(chan struct{}, 8)
		waits := make(chan store.Partition, 8)
		d := lanesDriver(f, sink, Config{Concurrency: 2, SlowConcurrency: 1,
			slowTimer: func(time.Duration) <-chan time.Time {
				c := make(chan time.Time, 1)
				thresholds <- c
				return c
			},
			slowed:    func(ok bool) { moved <- ok },
			finished:  func(bool) { finished <- struct{}{} },
			slowWaits: func(p store.Partition) { offer(waits, p) }})
		for range 2 {
			recv(t, sink.entered, "a hanging call")
		}
		recv(t, thresholds, "hang-1's threshold") <- time.Now()
		if recv(t, moved, "hang-1 past its threshold") {
			t.Fatal("hang-1 moved to a full slow lane")
		}
		lanesFleet(f, []string{"hang-2"}, map[string]bool{"hang-2": true})
		d.WakePartition(store.Partition{Namespace: "hang-2"})
		if p := recv(t, waits, "hang-2 to wait for the slow lane"); p.Namespace != "hang-2" {
			t.Fatalf("%s waits for the slow lane, want hang-2", p)
		}
		if main, slow, waiting, moving := d.lanes(); main != 1 || slow != 1 || waiting != 1 || moving != 1 {
			t.Fatalf("main %d, slow %d, waiting %d, moving %d; want 1 of each", main, slow, waiting, moving)
		}
		sink.answer("hang-0")
		recv(t, finished, "hang-0's fire to end")
		if main, slow, waiting, moving := d.lanes(); main != 0 || slow != 1 || waiting != 1 || moving != 0 {
			t.Fatalf("main %d, slow %d, waiting %d, moving %d; want hang-1 in the slow lane, hang-2 waiting", main, slow, waiting, moving)
		}
		select {
		case ns := <-sink.entered:
			t.Fatalf("%s called while hang-1 holds the only slow slot", ns)
		default:
		}
		sink.answer("hang-1")
		if ns := recv(t, sink.entered, "hang-2's call"); ns != "hang-2" {
			t.Fatalf("%s called, want hang-2", ns)
		}
	})
}

// offer sends v unless c is full: a hook the driver calls again and again
// must not block it.
func offer[T any](c chan T, v T) {
	select {
	case c <- v:
	default:
	}
}

// farSink answers calls to far-* namespaces only when the test closes the
// call's done, as a distant endpoint would after more than SlowAfter;
// every other call is delivered at once.
type farSink struct {
	calls     chan farCall
	delivered chan string
}

type farCall struct {
	ns   string
	done chan struct{}
}

func (s *farSink) Deliver(ctx context.Context, o Parcel) error {
	if !strings.HasPrefix(o.Namespace, "far-") {
		s.delivered <- o.Namespace
		return nil
	}
	done := make(chan struct{})
	s.calls <- farCall{o.Namespace, done}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Healthy streams whose calls outlast SlowAfter (distant endpoints) keep
// both lanes busy: each freed slow slot could go to the next of them
// waiting to leave the main lane. A stream whose last fire failed, and
// whose endpoint answers now, waits for the slow lane since before the
// newer of them: it gets the second slot to free (the first goes to the
// fire waiting since before it), not never.
func TestAStreamWaitingForTheSlowLaneIsNotOvertakenByFiresThatStartedWaitingAfterIt(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		now := time.Now().UnixMilli()
		for i, ns := range []string{"far-a", "far-b", "failed"} {
			if ns == "failed" {
				lanesFleet(f, []string{ns}, map[string]bool{ns: true})
				continue
			}
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, rids(ns, 30)...)
			f.dueAt(ns, now-int64(3-i)*1000)
		}
		sink := &farSink{calls: make(chan farCall, 8), delivered: make(chan string, 8)}
		reg, err := timers.NewHandlers(&Handler{Sink: sink, SinkTimeout: time.Hour, FireBudget: time.Hour, MaxRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		immediate := func(time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			c <- time.Now()
			return c
		}
		slowed := make(chan bool, 8)
		d := f.start(Config{Store: f.st, Handlers: reg, Concurrency: 1, SlowConcurrency: 1, slowTimer: immediate, after: never,
			slowed: func(moved bool) { slowed <- moved }})
		// The first fire moves to the slow lane, the second waits in moving.
		var open []farCall
		open = append(open, recv(t, sink.calls, "the first far call"))
		if !recv(t, slowed, "the first threshold") {
			t.Fatal("the first far fire did not move")
		}
		open = append(open, recv(t, sink.calls, "the second far call"))
		if recv(t, slowed, "the second threshold") {
			t.Fatal("the second far fire moved into a full slow lane")
		}
		for answered := 1; answered <= 2; answered++ {
			// Answer the call holding the slow slot: the slot goes to the
			// oldest waiter; the answered stream's next fire takes the
			// main worker, outlasts SlowAfter and waits in moving.
			close(open[0].done)
			open = open[1:]
			select {
			case ns := <-sink.delivered:
				if ns != "failed" || answered != 2 {
					t.Fatalf("%s delivered after %d calls answered, want failed after 2", ns, answered)
				}
				return
			case c := <-sink.calls:
				open = append(open, c)
			case <-time.After(patience):
				main, slow, waiting, moving := d.lanes()
				t.Fatalf("stuck: main %d, slow %d, waiting %d, moving %d", main, slow, waiting, moving)
			}
			if recv(t, slowed, "the next far fire's threshold") {
				t.Fatal("a far fire moved into a full slow lane")
			}
			d.Wake() // a full poll too, as the poll interval would start
		}
		main, slow, waiting, moving := d.lanes()
		t.Fatalf("the stream that failed before was not fired when 2 slow slots freed; main %d, slow %d, waiting %d, moving %d",
			main, slow, waiting, moving)
	})
}

// gatedScans holds the first due-timer scan of one namespace it is armed
// for until the test opens it.
type gatedScans struct {
	DueStore
	mu      sync.Mutex
	ns      string
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedScans) arm(ns string) {
	g.mu.Lock()
	g.ns = ns
	g.mu.Unlock()
}

func (g *gatedScans) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	g.mu.Lock()
	hold := g.ns != "" && g.ns == p.Namespace
	if hold {
		g.ns = ""
	}
	g.mu.Unlock()
	if hold {
		g.entered <- struct{}{}
		select {
		case <-g.open:
		case <-ctx.Done():
			return store.Page{}, ctx.Err()
		}
	}
	return g.DueStore.Scan(ctx, p, start, end, after, limit)
}

// A slow slot that frees goes to a stream waiting for it, and is held for
// it until its partition is scanned, main workers free or not: a fire
// passing its threshold meanwhile waits in the main lane rather than take
// it, and a healthy stream of the partition that finds no main worker does
// not end the scan before the waiting one.
func TestASlowSlotHandedToAWaitingStreamIsHeldForItUntilItsPartitionIsScanned(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		// hang-0 failed before and takes the only slow slot; waiter failed
		// before too (its endpoint answers now) and waits for the slow
		// lane; hang-far is new and takes the only main worker.
		lanesFleet(f, []string{"hang-0", "waiter", "hang-far"}, map[string]bool{"hang-0": true, "waiter": true})
		sink := newHangers()
		thresholds := make(chan chan time.Time, 8)
		moved := make(chan bool, 8)
		waits := make(chan store.Partition, 8)
		gate := &gatedScans{DueStore: f.st, entered: make(chan struct{}, 1), open: make(chan struct{})}
		d := lanesDriver(f, sink, Config{Store: gate, Concurrency: 1, SlowConcurrency: 1,
			slowTimer: func(time.Duration) <-chan time.Time {
				c := make(chan time.Time, 1)
				thresholds <- c
				return c
			},
			slowed:    func(ok bool) { moved <- ok },
			slowWaits: func(p store.Partition) { offer(waits, p) }})
		for range 2 {
			recv(t, sink.entered, "a hanging call")
		}
		if p := recv(t, waits, "waiter to wait for the slow lane"); p.Namespace != "waiter" {
			t.Fatalf("%s waits for the slow lane, want waiter", p)
		}
		threshold := recv(t, thresholds, "hang-far's threshold")
		// Another process accepts an outcome for waiter's audit endpoint,
		// due before billing: the scan comes to audit first, finds no
		// main worker, and must still go on to billing.
		waiter := store.Partition{Namespace: "waiter"}
		f.endpoint("waiter", "audit", schema.Endpoint{Enabled: true})
		f.seed("waiter", "later")
		audit, found, err := timers.Find(f.ctx, f.st, waiter, timers.KindOutcomeDelivery, "audit")
		if err != nil || !found {
			t.Fatalf("audit's timer: %v %v", found, err)
		}
		var b store.Batch
		audit.MoveTo(&b, time.Now().UnixMilli()-time.Hour.Milliseconds())
		if res, err := f.st.Apply(f.ctx, waiter, b); err != nil || !res.Committed {
			t.Fatalf("move audit's timer: %+v %v", res, err)
		}
		gate.arm("waiter")
		sink.answer("hang-0")
		recv(t, gate.entered, "the scan of waiter the freed slot sent")
		// The scan is under way: hang-far passes its threshold now.
		threshold <- time.Now()
		if recv(t, moved, "hang-far past its threshold") {
			t.Fatal("hang-far took the slow slot handed to waiter")
		}
		// Read while the scan is held: once waiter's fire ends, its slot
		// goes to hang-far, as it should.
		if main, _, waiting, moving := d.lanes(); main != 1 || waiting != 0 || moving != 1 {
			t.Fatalf("main %d, waiting %d, moving %d; want hang-far still waiting to leave the main lane", main, waiting, moving)
		}
		close(gate.open)
		if ns := recv(t, sink.delivered, "waiter's call"); ns != "waiter" {
			t.Fatalf("%s delivered, want waiter", ns)
		}
	})
}

// A partition with a stream waiting for the slow lane is still scanned by
// full polls: only that stream waits. mixed's billing failed last and
// waits for the slot hang-x's hanging call holds; another process then
// accepts an outcome for mixed, so its healthy audit stream is due with no
// WakePartition here, and the next full poll fires it.
func TestAFullPollFiresTheHealthyStreamsOfAPartitionWaitingForTheSlowLane(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		lanesFleet(f, []string{"hang-x", "mixed"}, map[string]bool{"hang-x": true, "mixed": true})
		f.endpoint("mixed", "audit", schema.Endpoint{Enabled: true})
		sink := newHangers()
		sink.hang = func(ns string) bool { return ns == "hang-x" }
		waits := make(chan store.Partition, 8)
		d := lanesDriver(f, sink, Config{Concurrency: 4, SlowConcurrency: 1, slowTimer: never,
			slowWaits: func(p store.Partition) { offer(waits, p) }})
		recv(t, sink.entered, "hang-x's call")
		if p := recv(t, waits, "mixed to wait for the slow lane"); p.Namespace != "mixed" {
			t.Fatalf("%s waits for the slow lane, want mixed", p)
		}
		mixed := store.Partition{Namespace: "mixed"}
		f.seed("mixed", "later")
		row, found, err := timers.Find(f.ctx, f.st, mixed, timers.KindOutcomeDelivery, "audit")
		if err != nil || !found || row.DueAtMs > time.Now().UnixMilli() {
			t.Fatalf("audit's timer %+v (found %v, %v): want it due", row, found, err)
		}
		d.Wake() // a full poll, as the poll interval would start
		select {
		case ns := <-sink.delivered:
			if ns != "mixed" {
				t.Fatalf("%s delivered, want mixed's audit", ns)
			}
		case <-time.After(patience):
			main, slow, waiting, _ := d.lanes()
			t.Fatalf("mixed's audit, due, not fired by a full poll while mixed's billing waits for the slow lane: main %d, slow %d, waiting %d", main, slow, waiting)
		}
		if _, slow, waiting, _ := d.lanes(); slow != 1 || waiting != 1 {
			t.Fatalf("slow lane %d, %d waiting; want hang-x's call and mixed's billing waiting", slow, waiting)
		}
		billing, _, err := timers.Find(f.ctx, f.st, mixed, timers.KindOutcomeDelivery, "billing")
		if err != nil || billing.Lease != nil {
			t.Fatalf("billing's timer %+v (%v): want it unclaimed, waiting", billing, err)
		}
	})
}

// Stop waits for the fires that moved to the slow lane as for any other.
func TestStopLetsTheFiresInTheSlowLaneFinish(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		lanesFleet(f, []string{"hang-0"}, nil)
		sink := newHangers()
		moved := make(chan bool, 1)
		d := lanesDriver(f, sink, Config{Concurrency: 1,
			slowTimer: func(time.Duration) <-chan time.Time {
				c := make(chan time.Time, 1)
				c <- time.Now()
				return c
			},
			slowed: func(ok bool) { moved <- ok }})
		recv(t, sink.entered, "the hanging call")
		if !recv(t, moved, "the fire to move") {
			t.Fatal("the fire did not move to the slow lane")
		}
		stopped := make(chan error, 1)
		go func() { stopped <- d.Stop(f.ctx) }()
		sink.answer("hang-0")
		if err := recv(t, stopped, "Stop"); err != nil {
			t.Fatal(err)
		}
		row, found, err := timers.Find(f.ctx, f.st, store.Partition{Namespace: "hang-0"}, timers.KindOutcomeDelivery, "billing")
		if err != nil || !found || row.Lease != nil {
			t.Fatalf("timer %+v (found %v, %v): want the fire's completion written before Stop returned", row, found, err)
		}
	})
}

// A full read of the due indexes takes a bucket's oldest partitions, as
// many as there are main workers; those waiting for the slow lane are read
// past, not counted, so however many of them come first in a bucket, one
// poll finds a healthy stream due behind them.
func TestStreamsWaitingForTheSlowLaneDoNotHideTheOthersOfTheirBucket(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		namespaces := sameBucket(f, 5) // four that failed before, then a healthy one
		failed := map[string]bool{}
		for _, ns := range namespaces[:4] {
			failed[ns] = true
		}
		lanesFleet(f, namespaces, failed)
		sink := newHangers()
		sink.hang = func(ns string) bool { return failed[ns] }
		d := lanesDriver(f, sink, Config{Concurrency: 1, SlowConcurrency: 1, slowTimer: never})
		// The oldest holds the only slow slot; the first poll read no
		// further than it. One more poll, as an ingest or the poll
		// interval would start.
		recv(t, sink.entered, "the slow lane's hanging call")
		d.Wake()
		select {
		case <-sink.delivered:
		case <-time.After(patience):
			_, _, waiting, _ := d.lanes()
			t.Fatalf("the healthy stream of the bucket was not found behind %d streams waiting for the slow lane", waiting)
		}
		if _, slow, waiting, _ := d.lanes(); slow != 1 || waiting != 3 {
			t.Fatalf("slow lane %d, %d waiting; want 1 and 3", slow, waiting)
		}
	})
}

// A partition removed from a queue and queued again goes to the back, also
// once the queue has dropped what removals left behind.
func TestAPartitionQueuedAgainAfterItsRemovalGoesToTheBack(t *testing.T) {
	part := func(ns string) store.Partition { return store.Partition{Namespace: ns} }
	for _, removals := range []int{0, 200} {
		q := newPartitionQueue()
		q.push(part("a"))
		q.push(part("b"))
		q.push(part("c"))
		q.remove(part("a"))
		q.push(part("a"))
		q.push(part("b")) // already queued: stays where it is
		for i := range removals {
			// Enough of them to make the queue compact itself.
			ns := fmt.Sprintf("x-%d", i)
			q.push(part(ns))
			q.remove(part(ns))
			q.remove(part("a"))
			q.push(part("a"))
		}
		if q.len() != 3 {
			t.Fatalf("%d removals: len %d, want 3", removals, q.len())
		}
		if len(q.items) > 2*3+64 {
			t.Fatalf("%d removals: %d items kept for 3 partitions", removals, len(q.items))
		}
		var got []string
		for p, ok := q.pop(); ok; p, ok = q.pop() {
			got = append(got, p.Namespace)
		}
		if strings.Join(got, ",") != "b,c,a" {
			t.Fatalf("%d removals: popped %v, want b, c, a", removals, got)
		}
		if len(q.items) != 0 {
			t.Fatalf("%d removals: %d items left", removals, len(q.items))
		}
	}
}

// The production watch, a timer of SlowAfter rather than a goroutine
// waiting on one, moves a hanging fire to the slow lane.
func TestTheSlowAfterTimerMovesAHangingFire(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		lanesFleet(f, []string{"hang-0"}, nil)
		sink := newHangers()
		moved := make(chan bool, 8)
		d := lanesDriver(f, sink, Config{Concurrency: 2, SlowConcurrency: 2, SlowAfter: time.Millisecond,
			slowed: func(ok bool) { moved <- ok }})
		recv(t, sink.entered, "the hanging call")
		if !recv(t, moved, "the hanging fire to move") {
			t.Fatal("the hanging fire did not move to a slow lane with room")
		}
		if main, slow, _, _ := d.lanes(); main != 0 || slow != 1 {
			t.Fatalf("main %d, slow %d, want the hanging fire in the slow lane", main, slow)
		}
		sink.answer("hang-0")
		d.Stop(f.ctx)
	})
}
