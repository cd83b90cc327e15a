package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// The rules beyond a single sequential fire: concurrent calls within a
// stream, 410, attempt rows, Retry-After, disabled endpoints, and a stopped
// fire.

// gated blocks the calls of the rids in hold until release is closed.
type gated struct {
	capture
	hold    map[string]bool
	release chan struct{}
	entered chan string

	// mu guards fail once calls run; a test sets it before the fire.
	mu        sync.Mutex
	fail      map[string]error
	open, max int
}

func newGated() *gated {
	return &gated{hold: map[string]bool{}, fail: map[string]error{}, release: make(chan struct{}), entered: make(chan string, 64)}
}

func (g *gated) Deliver(ctx context.Context, o Parcel) error {
	rid := o.Outcome.ReservationID
	g.mu.Lock()
	g.open++
	g.max = max(g.max, g.open)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.open--
		g.mu.Unlock()
	}()
	g.entered <- rid
	if g.hold[rid] || g.hold["*"] {
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Calls run at once, so the failures are taken under the lock.
	g.mu.Lock()
	err := g.fail[rid]
	delete(g.fail, rid) // fails once
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.capture.Deliver(ctx, o)
}

func TestAFailingRowAmongConcurrentCallsIsKeptAndRetriedAndTheRestAcknowledgedOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 2})
		e.seed("a", "b", "c", "d", "e")
		sink := newGated()
		sink.hold["a"] = true
		sink.fail["b"] = &Error{Class: "status", Status: 500, Reason: "internal error"}
		h := &Handler{Sink: sink, Clock: e.Clk}
		// a is held open until the fire has taken in b's failure: then it
		// must launch nothing more, and wait for a.
		h.collected = func(rid string, err error) {
			if rid == "b" && err != nil {
				close(sink.release)
			}
		}
		e.fire(h)
		if got := sink.rids(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("delivered %v, want only a: nothing is launched after b failed", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"b", "c", "d", "e"}) {
			t.Fatalf("pending %v, want b kept and c, d, e untried", got)
		}
		if a, ok := e.attempt("b"); !ok || a.Status != 500 || a.Count != 1 {
			t.Fatalf("attempt of b %+v (found %v)", a, ok)
		}
		if due := e.timerDue(); due > e.NowMs()+1 || e.state().FailedFires != 0 {
			t.Fatalf("due +%d ms, failed fires %d: something was delivered, so no backoff", due-e.NowMs(), e.state().FailedFires)
		}
		// The next fire resumes after b, the last row launched; b follows
		// once the cursor wraps, and succeeds.
		h.collected = nil
		e.fireAtDue(h)
		// Launched in order; two open at once may end in either order.
		if got := sink.rids(); got[0] != "a" || !slices.Equal(slices.Sorted(slices.Values(got[1:])), []string{"c", "d", "e"}) {
			t.Fatalf("delivered %v, want a, then c, d, e", got)
		}
		e.fireAtDue(h)
		for _, rid := range []string{"a", "b", "c", "d", "e"} {
			if n := sink.count(rid); n != 1 {
				t.Fatalf("%s delivered %d times, want once", rid, n)
			}
		}
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d", e.backlogRows())
		}
		if _, ok := e.attempt("b"); ok {
			t.Fatal("a delivered row kept its attempt row")
		}
	})
}

func TestCallsInFlightNeverExceedTheEndpointsSetting(t *testing.T) {
	t.Parallel()
	for _, width := range []int{1, 4, 16} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: width})
				ids := rids("row", MaxRowsCeiling)
				e.seed(ids...)
				sink := newGated()
				sink.hold["*"] = true
				go func() {
					// Open the gate once the window is full.
					for range width {
						<-sink.entered
					}
					close(sink.release)
				}()
				rep := e.fire(&Handler{Sink: sink, Clock: e.Clk, MaxRows: MaxRowsCeiling})
				if rep.Done != 1 {
					t.Fatalf("report %+v, want one fire delivering every row", rep)
				}
				if sink.max != width {
					t.Fatalf("at most %d calls open, want exactly %d", sink.max, width)
				}
				if got := sink.rids(); len(got) != len(ids) {
					t.Fatalf("delivered %d rows, want %d", len(got), len(ids))
				}
				if width == 1 && !slices.Equal(sink.rids(), ids) {
					t.Fatalf("at one in flight, order %v", sink.rids())
				}
			})
		})
	}
}

func TestAGoneEndpointIsDisabledWithItsRowsKeptUntilEnabledAgain(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ids := rids("row", MaxRowsCeiling)
		e.seed(ids...)
		sink := newGated()
		last := ids[len(ids)-1]
		sink.fail[last] = &Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}
		// The fullest batch: 22 acknowledgements, the disable, the attempt
		// record and the timer, within 100 operations.
		rep := e.fire(&Handler{Sink: sink, Clock: e.Clk, MaxRows: MaxRowsCeiling})
		if rep.Rescheduled != 1 {
			t.Fatalf("report %+v", rep)
		}
		if got := e.pending(); !slices.Equal(got, []string{last}) {
			t.Fatalf("pending %v, want only the refused row", got)
		}
		cfg := e.endpoint()
		if cfg.Enabled || cfg.DisabledReason != "gone" {
			t.Fatalf("endpoint %+v, want disabled as gone", cfg)
		}
		if due := e.timerDue(); due != timers.NeverMs {
			t.Fatalf("timer due %d, want parked", due)
		}
		if a, ok := e.attempt(last); !ok || a.Status != 410 {
			t.Fatalf("attempt %+v (found %v)", a, ok)
		}
		// Enabled again, the next ingest pulls the parked timer.
		cfg.Enabled, cfg.DisabledReason, cfg.DisabledMs = true, "", 0
		e.putEndpoint(cfg)
		e.append(committed("after"))
		if due := e.timerDue(); due > e.NowMs() {
			t.Fatalf("timer due %d after enabling, want now", due)
		}
		// The cursor is still after the refused row: the new row goes
		// first, the refused one when the cursor wraps.
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
		if e.backlogRows() != 0 || sink.count(last) != 1 || sink.count("after") != 1 {
			t.Fatalf("backlog %d, delivered %v", e.backlogRows(), sink.rids())
		}
	})
}

func TestAFailingStreamBacksOffExponentiallyAndRecordsEachAttempt(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		failing := &capture{fail: &Error{Class: "status", Status: 503, Reason: "unavailable"}}
		for i, base := range []int64{1000, 2000, 4000, 8000} {
			now := e.NowMs()
			e.fire(&Handler{Sink: failing, Clock: e.Clk})
			gap := e.timerDue() - now
			if gap < base || gap > base+base/5 {
				t.Fatalf("failure %d: next fire in %d ms, want %d plus at most 20 %%", i+1, gap, base)
			}
			if got := e.state().FailedFires; got != uint32(i+1) {
				t.Fatalf("failure %d: attempt %d", i+1, got)
			}
			a, ok := e.attempt("a")
			if !ok || a.Count != uint32(i+1) || a.Status != 503 || a.ErrorClass != "status" || a.AtMs != now {
				t.Fatalf("failure %d: attempt row %+v (found %v)", i+1, a, ok)
			}
			e.Clk.Set(e.timerDue())
		}
		ok := &capture{}
		if rep := e.fire(&Handler{Sink: ok, Clock: e.Clk}); rep.Done != 1 {
			t.Fatalf("report %+v, want Done", rep)
		}
		if _, found := e.attempt("a"); found {
			t.Fatal("the attempt row outlived the delivery")
		}
	})
}

func TestRetryAfterIsHonouredOverAShorterBackoff(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		sink := &capture{fail: &Error{Class: "status", Status: 429, RetryAfter: 90 * time.Second}}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if gap := e.timerDue() - e.NowMs(); gap < 90_000 {
			t.Fatalf("next fire in %d ms, want at least the 90 s asked for", gap)
		}
	})
}

func TestRetryAfterIsCappedAtTheLongestBackoff(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		sink := &capture{fail: &Error{Class: "status", Status: 503, RetryAfter: 48 * time.Hour}}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if gap := e.timerDue() - e.NowMs(); gap != MaxBackoff.Milliseconds() {
			t.Fatalf("next fire in %d ms, want the %v cap", gap, MaxBackoff)
		}
	})
}

func TestADisabledEndpointsStreamIsParkedWithoutACall(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		e.putEndpoint(schema.Endpoint{Enabled: false, DisabledReason: "paused"})
		sink := &capture{}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if len(sink.seen) != 0 || e.backlogRows() != 1 {
			t.Fatalf("delivered %v, backlog %d", sink.rids(), e.backlogRows())
		}
		if due := e.timerDue(); due != timers.NeverMs {
			t.Fatalf("timer due %d, want parked", due)
		}
	})
}

func TestAStoppedFireWritesNothingAndLeavesItsLease(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b")
		before, _ := e.backlogRow()
		sink := newGated()
		sink.hold["*"] = true
		ctx, cancel := context.WithCancel(e.Ctx)
		go func() {
			<-sink.entered
			cancel()
		}()
		reg, _ := timers.NewHandlers(&Handler{Sink: sink, Clock: e.Clk})
		_, err := timers.NewRunner(timers.RunnerConfig{Store: e.St, Handlers: reg, Clock: e.Clk}).RunDue(ctx, e.P, e.NowMs())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v, want canceled", err)
		}
		if after, _ := e.backlogRow(); string(after) != string(before) || len(sink.seen) != 0 {
			t.Fatal("a stopped fire changed the backlog")
		}
		if _, found := e.attempt("a"); found {
			t.Fatal("a stopped fire recorded an attempt")
		}
		if r, ok := e.timer(); !ok || r.Lease == nil {
			t.Fatalf("timer %+v: want it still leased, to expire", r)
		}
	})
}

func TestBackoffJitterIsDeterministicPerStreamAndBounded(t *testing.T) {
	t.Parallel()
	spread := map[int64]bool{}
	for i := range 50 {
		ep := fmt.Sprintf("ep-%d", i)
		for failedFires := range uint32(40) {
			base := min(int64(1000)<<min(failedFires, 20), MaxBackoff.Milliseconds())
			d := backoffMs("acme", ep, failedFires)
			if d < base || d > base+base/5 {
				t.Fatalf("failed fires %d: %d ms outside [%d, %d]", failedFires, d, base, base+base/5)
			}
			if d != backoffMs("acme", ep, failedFires) {
				t.Fatal("not deterministic")
			}
			if failedFires == 30 {
				spread[d] = true
			}
		}
	}
	// Streams failing together for long spread out even at the cap.
	if len(spread) < 40 {
		t.Fatalf("%d distinct delays among 50 streams at the cap", len(spread))
	}
}

func TestAStreamWithNoBacklogIsDoneAndItsEmptyBacklogRowRemoved(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		key, _ := schema.BacklogKey(ep)
		e.put(key, schema.EncodeBacklog(schema.Backlog{}))
		if rep := e.fire(&Handler{Sink: &capture{}, Clock: e.Clk}); rep.Done != 1 {
			t.Fatalf("report %+v, want Done", rep)
		}
		if _, found := e.Get(key); found {
			t.Fatal("an empty backlog row was left")
		}
		if _, ok := e.timer(); ok {
			t.Fatal("timer left")
		}
	})
}

func TestAFireReadsItsPageInAConstantNumberOfRoundTrips(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ids := rids("row", DefaultMaxRows)
		e.seed(ids...)
		cs := &counting{DueStore: e.St.(DueStore), calls: map[string]int{}}
		_, fired := (&env{&outboxtest.Env{T: t, Ctx: e.Ctx, St: cs, Clk: e.Clk, P: e.P}}).planned(&Handler{Sink: &capture{}, Clock: e.Clk})
		if !fired.Done {
			t.Fatal("want Done")
		}
		// Backlog and endpoint; the queue, with the endpoint again; records
		// and attempts; the fresh backlog.
		if cs.calls["getmany"] != 2 || cs.calls["readmany"] != 1 || cs.calls["get"] != 1 {
			t.Fatalf("store calls %v for %d rows", cs.calls, len(ids))
		}
	})
}

// goneWhileIngesting answers 410 Gone and, during that call, an outcome for
// the same stream is accepted, as a producer that keeps sending does.
type goneWhileIngesting struct {
	e     *env
	once  sync.Once
	calls int
	mu    sync.Mutex
}

func (g *goneWhileIngesting) Deliver(_ context.Context, _ Parcel) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	g.once.Do(func() { g.e.append(aborted("during")) })
	return &Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}
}

// A 410 disables the endpoint and parks its stream even when an append
// lands while the call is open: a disable that acknowledges nothing is not
// guarded by the backlog. Guarded by the backlog as read before the call,
// the append would fail it, the timer would be released due at once, and a
// gone endpoint would be called back to back for as long as ingest
// continued.
func TestAGoneEndpointIsDisabledAndParkedEvenWhenAnAppendLandsDuringTheCall(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first")
		sink := &goneWhileIngesting{e: e}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if got := e.backlogRows(); got != 2 {
			t.Fatalf("backlog %d, want both rows kept", got)
		}
		cfg := e.endpoint()
		due := e.timerDue()
		if cfg.Enabled || due != timers.NeverMs {
			t.Fatalf("after a 410: endpoint enabled=%v, timer due %+d ms from now (failed fires %d); "+
				"want the endpoint disabled and its stream parked",
				cfg.Enabled, due-e.NowMs(), e.state().FailedFires)
		}
	})
}

func TestAnUndecodableTimerStateRestartsTheStreamFromItsHead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b")
		r, _ := e.timer()
		var b store.Batch
		r.Replace(&b, r.DueAtMs, []byte("not a delivery state"))
		e.Apply(b)
		sink := &capture{}
		if rep := e.fire(&Handler{Sink: sink, Clock: e.Clk}); rep.Done != 1 {
			t.Fatalf("report %+v, want the stream delivered", rep)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("delivered %v", got)
		}
	})
}

func TestAStreamParkedWithAnUndecodableStateIsWokenWhenItsEndpointIsEnabled(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		r, _ := e.timer()
		var b store.Batch
		r.Replace(&b, r.DueAtMs, []byte("not a delivery state"))
		e.Apply(b)
		e.putEndpoint(schema.Endpoint{Enabled: false, DisabledReason: "paused"})
		sink := &capture{}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if due := e.timerDue(); due != timers.NeverMs {
			t.Fatalf("timer due %d, want parked", due)
		}
		e.putEndpoint(schema.Endpoint{Enabled: true})
		e.append(committed("b"))
		if due := e.timerDue(); due > e.NowMs() {
			t.Fatalf("timer due %d after the endpoint was enabled and an outcome accepted, want now", due)
		}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("delivered %v after the endpoint was enabled", got)
		}
	})
}

// appendAfterBacklogRead is a store on which an append lands just after
// the fire reads its backlog to plan acknowledgements: between that read
// and the completion that the plan is guarded by.
type appendAfterBacklogRead struct {
	store.NamespaceStore
	e    *env
	once sync.Once
}

func (s *appendAfterBacklogRead) Get(ctx context.Context, p store.Partition, key store.Key) (store.Value, bool, error) {
	v, found, err := s.NamespaceStore.Get(ctx, p, key)
	if bk, _ := schema.BacklogKey(ep); string(key) == string(bk) {
		s.once.Do(func() { s.e.append(aborted("landed")) })
	}
	return v, found, err
}

// An append that lands between the fire's last read and its completion
// fails the completion's guard. The completion is planned again under the
// same lease, so the rows the fire delivered are acknowledged, not sent a
// second time by the next fire.
func TestAnAppendRacingTheCompletionDoesNotSendDeliveredRowsAgain(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first", "second")
		sink := &capture{}
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: e.Clk})
		if err != nil {
			t.Fatal(err)
		}
		racing := &appendAfterBacklogRead{NamespaceStore: e.St, e: e}
		rep, err := timers.NewRunner(timers.RunnerConfig{Store: racing, Handlers: reg, Clock: e.Clk}).RunDue(e.Ctx, e.P, e.NowMs())
		if err != nil {
			t.Fatalf("run due: %v", err)
		}
		if rep.Replanned != 0 || rep.Rescheduled != 1 {
			t.Fatalf("report %+v: want the completion rescheduled, not released", rep)
		}
		if got := e.pending(); !slices.Equal(got, []string{"landed"}) {
			t.Fatalf("pending %v, want only the row that landed during the fire", got)
		}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		for _, rid := range []string{"first", "second", "landed"} {
			if n := sink.count(rid); n != 1 {
				t.Errorf("%s delivered %d times, want once", rid, n)
			}
		}
	})
}

// refusing answers 500 to the rids it holds ("*" for all) and takes the
// rest, noting when each call came by the test's clock.
type refusing struct {
	capture
	e      *env
	refuse map[string]bool
	// called and at are every call's rid, delivered or not, and time.
	called []string
	at     []int64
}

func (r *refusing) Deliver(ctx context.Context, o Parcel) error {
	r.mu.Lock()
	r.called = append(r.called, o.Outcome.ReservationID)
	r.at = append(r.at, r.e.NowMs())
	refused := r.refuse[o.Outcome.ReservationID] || r.refuse["*"]
	r.mu.Unlock()
	if refused {
		return &Error{Class: "status", Status: 500, Reason: "internal error"}
	}
	return r.capture.Deliver(ctx, o)
}

// A dead endpoint with many rows waiting backs off as its stream keeps
// failing, though each fire fails a row that never failed before: in its
// first minute it is called a handful of times, each wait double the last,
// not once a second for as many fires as it has rows.
func TestADeadEndpointWithManyRowsWaitingBacksOffAsItsStreamFails(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ids := rids("row", 200)
		e.seed(ids[:100]...) // at most 100 a request
		e.seed(ids[100:]...)
		dead := &refusing{e: e, refuse: map[string]bool{"*": true}}
		start := e.NowMs()
		for e.timerDue() < start+60_000 {
			e.fireAtDue(&Handler{Sink: dead, Clock: e.Clk})
		}
		t.Logf("calls at %v ms", offsets(dead.at, start))
		if n := len(dead.at); n > 10 {
			t.Fatalf("%d calls in the first 60 s, want at most 10", n)
		}
		for i := 1; i < len(dead.at); i++ {
			base := int64(1000) << (i - 1)
			if gap := dead.at[i] - dead.at[i-1]; gap < base || gap > base+base/5 {
				t.Fatalf("calls at %v ms: wait %d is %d ms, want %d plus at most 20 %%", offsets(dead.at, start), i, gap, base)
			}
		}
		// Each fire called a row that had not failed before.
		if got := dead.calls(); len(got) < 5 || !slices.Equal(got, ids[:len(got)]) {
			t.Fatalf("calls %v, want the first rows, one a fire", got)
		}
		if got := e.state().FailedFires; got != uint32(len(dead.at)) {
			t.Fatalf("stream attempt %d after %d failing fires", got, len(dead.at))
		}
		if e.backlogRows() != 200 {
			t.Fatalf("backlog %d, want every row kept", e.backlogRows())
		}
	})
}

func offsets(at []int64, start int64) []int64 {
	out := make([]int64, len(at))
	for i, ms := range at {
		out[i] = ms - start
	}
	return out
}

// Behind a stream that failed throughout, a row failing for the first time
// waits the stream's step, not the first one; once something is delivered
// the count starts afresh, and the next failure waits the first step again.
func TestAFailureWaitsTheStreamsStepUntilSomethingIsDelivered(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("old")
		sink := &refusing{e: e, refuse: map[string]bool{"*": true}}
		for range 4 {
			e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
		}
		e.Clk.Set(e.timerDue())
		e.seed("new")
		now := e.NowMs()
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if rids := sink.calls(); rids[len(rids)-1] != "new" {
			t.Fatalf("calls %v: want the fire after the old row's to call the new one", rids)
		}
		if gap := e.timerDue() - now; gap < 16000 || gap > 19200 {
			t.Fatalf("a first failure on a stream failing for 4 fires waits %d ms, want 16 s plus at most 20 %%", gap)
		}
		if got := e.state().FailedFires; got != 5 {
			t.Fatalf("stream attempt %d, want 5", got)
		}
		// A healthy fire: old is delivered, new refused.
		sink.mu.Lock()
		sink.refuse = map[string]bool{"new": true, "later": true}
		sink.mu.Unlock()
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
		if got := sink.rids(); !slices.Equal(got, []string{"old"}) {
			t.Fatalf("delivered %v, want [old]", got)
		}
		if due, st := e.timerDue(), e.state(); due > e.NowMs() || st.FailedFires != 0 {
			t.Fatalf("due +%d ms, failed fires %d: something was delivered, so due now and the count reset", due-e.NowMs(), st.FailedFires)
		}
		e.seed("later")
		now = e.NowMs()
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if rids := sink.calls(); rids[len(rids)-1] != "later" {
			t.Fatalf("calls %v: want later called last", rids)
		}
		if gap := e.timerDue() - now; gap < 1000 || gap > 1200 {
			t.Fatalf("the first failure after a delivery waits %d ms, want the first step (1 s plus at most 20 %%)", gap)
		}
	})
}

func (r *refusing) calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.called...)
}

// A Retry-After holds even when the same fire delivered rows, as one call
// can be delivered while the next is told to wait; and an outcome accepted
// meanwhile does not pull the stream sooner.
func TestRetryAfterHoldsWhenTheSameFireDeliveredRows(t *testing.T) {
	t.Parallel()
	for _, width := range []int{1, 3} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: width})
				e.seed("a", "b", "c")
				sink := newGated()
				sink.fail["b"] = &Error{Class: "status", Status: 429, RetryAfter: 90 * time.Second, Reason: "slow down"}
				h := &Handler{Sink: sink, Clock: e.Clk}
				e.fire(h)
				if got := sink.rids(); !slices.Contains(got, "a") || slices.Contains(e.pending(), "a") {
					t.Fatalf("delivered %v, pending %v: want a delivered", got, e.pending())
				}
				due := e.timerDue()
				if gap := due - e.NowMs(); gap < 90_000 {
					t.Fatalf("next fire in %d ms after a 429 with Retry-After: 90, want at least 90 s", gap)
				}
				if got := e.state().FailedFires; got != 1 {
					t.Fatalf("stream attempt %d, want 1: the count restarts with this fire", got)
				}
				e.Clk.Advance(time.Second)
				e.append(committed("d"))
				if got := e.timerDue(); got != due {
					t.Fatalf("an accepted outcome moved the stream from +%d to +%d ms", due-e.NowMs(), got-e.NowMs())
				}
				e.fireAtDue(h)
				e.fireAtDue(h)
				if e.backlogRows() != 0 {
					t.Fatalf("backlog %d, pending %v once the endpoint takes calls again", e.backlogRows(), e.pending())
				}
			})
		})
	}
}
