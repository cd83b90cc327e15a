package delivery

// The core rules of one fire, one test per rule, on every configured
// backend: acknowledgements against a fresh backlog read, sequence order,
// synthetic rows, poison rows, the fire budget and the sink timeout, the
// first failure stopping the fire, a refused row not starving the rows
// behind it, the page bound and its rotating cursor, the batch limit, and a
// fresh signature on every retry.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// appendDuring accepts a second outcome inside the call of the first.
type appendDuring struct {
	e    *env
	once sync.Once
}

func (a *appendDuring) Deliver(_ context.Context, o Parcel) error {
	if o.Outcome.ReservationID != "first" {
		return fmt.Errorf("unexpected %s", o.Outcome.ReservationID)
	}
	a.once.Do(func() { a.e.append(aborted("second")) })
	return nil
}

// The acknowledgement is planned against the backlog as read after the
// call, which counts the append: the plan leaves that row, so it is no Done
// and commits as planned, in the one completion after the claim. Planned
// against the read before the call it would be a Done that the append fails,
// and only a re-plan would save the delivered row from being sent again.
func TestAppendDuringAckKeepsATimerAndDeliversOnTheNextFire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first")
		cs := &counting{DueStore: e.St.(DueStore), calls: map[string]int{}}
		rep := e.runOn(cs, &Handler{Sink: &appendDuring{e: e}, Clock: e.Clk})
		if rep.Fired != 1 || rep.Rescheduled != 1 {
			t.Fatalf("report %+v, want one fire rescheduled", rep)
		}
		if n := cs.calls["apply"]; n != 2 {
			t.Fatalf("%d batches: want the claim and one completion, planned after the call", n)
		}
		if got := e.backlogRows(); got != 1 {
			t.Fatalf("backlog %d, want 1", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"second"}) {
			t.Fatalf("pending %v, want [second]", got)
		}
		if due := e.timerDue(); due > e.NowMs()+1 {
			t.Fatalf("remaining outcome due at %d, want now (%d)", due, e.NowMs())
		}
		sink := &capture{}
		if rep := e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk}); rep.Fired != 1 {
			t.Fatalf("second fire: %+v", rep)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"second"}) || sink.seen[0].Outcome.Aborted == nil {
			t.Fatalf("delivered %v, want the aborted second", got)
		}
		if e.backlogRows() != 0 || len(e.pending()) != 0 {
			t.Fatalf("backlog %d, pending %v after delivery", e.backlogRows(), e.pending())
		}
	})
}

func TestAppendAfterTheFreshReadFailsTheGuardAndReplansDelivery(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first")
		prior, _ := e.backlogRow()
		sink := &capture{}
		timer, fired := e.planned(&Handler{Sink: sink, Clock: e.Clk})
		if !fired.Done {
			t.Fatal("the only row was delivered: want Done")
		}
		backlogKey, _ := schema.BacklogKey(ep)
		if !hasEquals(fired.Batch, backlogKey, prior) {
			t.Fatal("Done is not guarded by the backlog as read")
		}
		// An append lands after the fire's fresh read, before its Done.
		e.append(aborted("second"))
		b := fired.Batch
		b.RequireEquals(timer.Key, timer.Raw)
		b.Delete(timer.Key)
		if res := e.Apply(b); res.Committed {
			t.Fatal("a stale acknowledgement committed over a newer append")
		}
		if got := e.backlogRows(); got != 2 {
			t.Fatalf("backlog %d, want 2", got)
		}
		if _, ok := e.timer(); !ok {
			t.Fatal("the timer was lost")
		}
		if rep := e.fire(&Handler{Sink: sink, Clock: e.Clk}); rep.Fired != 1 {
			t.Fatalf("re-plan: %+v", rep)
		}
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d after the re-plan", e.backlogRows())
		}
		if _, ok := e.timer(); ok {
			t.Fatal("timer left after every row was acknowledged")
		}
		if sink.count("first") != 2 || sink.count("second") != 1 {
			t.Fatalf("delivered %v: want first twice, second once", sink.rids())
		}
	})
}

func TestNoAcknowledgementsStillGuardTheInitialBacklog(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first")
		prior, _ := e.backlogRow()
		_, fired := e.planned(&Handler{Sink: &capture{fail: errors.New("refused")}, Clock: e.Clk})
		if fired.Done {
			t.Fatal("a failed call finished the stream")
		}
		backlogKey, _ := schema.BacklogKey(ep)
		if !hasEquals(fired.Batch, backlogKey, prior) {
			t.Fatal("the reschedule is not guarded by the backlog as first read")
		}
		if len(fired.Batch.Writes) != 0 {
			t.Fatalf("a failed call planned writes: %+v", fired.Batch.Writes)
		}
		if !fired.Backoff {
			t.Fatal("a failed call that delivered nothing does not back off")
		}
	})
}

func TestAllAcknowledgedReturnsDoneWithAnEmptyBacklog(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first", "second")
		sink := &capture{}
		timer, fired := e.planned(&Handler{Sink: sink, Clock: e.Clk})
		if !fired.Done {
			t.Fatal("all rows delivered: want Done")
		}
		b := fired.Batch
		b.RequireEquals(timer.Key, timer.Raw)
		b.Delete(timer.Key)
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("Done failed: %+v", res)
		}
		if len(sink.seen) != 2 || e.backlogRows() != 0 {
			t.Fatalf("delivered %v, backlog %d", sink.rids(), e.backlogRows())
		}
		if _, ok := e.timer(); ok {
			t.Fatal("timer left")
		}
	})
}

func TestDeliversInSequenceAndAcknowledgesSyntheticRowsLocally(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("one", "s:local", "three")
		sink := &capture{}
		if rep := e.fire(&Handler{Sink: sink, Clock: e.Clk}); rep.Fired != 1 {
			t.Fatalf("fire: %+v", rep)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"one", "three"}) {
			t.Fatalf("delivered %v, want [one three]", got)
		}
		for _, o := range sink.seen {
			if o.Outcome.Committed == nil || o.Namespace != "acme" || o.EndpointID != ep || o.Endpoint.URL == "" {
				t.Fatalf("delivered %+v", o)
			}
		}
		if _, found := e.backlogRow(); found {
			t.Fatal("backlog row left")
		}
		for _, rid := range []string{"one", "s:local", "three"} {
			if _, found := e.record(rid); found {
				t.Fatalf("record %s left", rid)
			}
		}
	})
}

func TestSinkErrorAndPoisonRowAreRetriedWithoutDeletion(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("poison", "behind")
		poison, _ := e.logKey("poison")
		e.put(poison, store.Value("bad"))
		sink := &capture{}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if got := sink.rids(); !slices.Equal(got, []string{"behind"}) {
			t.Fatalf("delivered %v, want [behind]", got)
		}
		if e.backlogRows() != 1 {
			t.Fatalf("backlog %d, want the poison row's 1", e.backlogRows())
		}
		if v, found := e.Get(poison); !found || string(v) != "bad" {
			t.Fatal("the poison row's record was deleted or changed")
		}
	})
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("retry")
		failing := &capture{fail: &Error{Class: "status", Status: 500, Reason: "secret sink failure"}}
		e.fire(&Handler{Sink: failing, Clock: e.Clk})
		if e.backlogRows() != 1 {
			t.Fatalf("backlog %d, want 1", e.backlogRows())
		}
		if due := e.timerDue(); due < t0+1000 {
			t.Fatalf("retry due at +%d ms, want a backoff of at least 1 s", due-t0)
		}
		e.fireAtDue(&Handler{Sink: failing, Clock: e.Clk})
		if len(failing.seen) != 2 || failing.seen[0].Outcome.ReservationID != "retry" {
			t.Fatalf("delivered %v", failing.rids())
		}
		first, second := failing.seen[0], failing.seen[1]
		if first.Seq != second.Seq || first.Outcome.Repository != second.Outcome.Repository {
			t.Fatalf("the retry is not the same outcome: %+v vs %+v", first, second)
		}
		if e.backlogRows() != 1 {
			t.Fatal("a failing row was acknowledged")
		}
	})
}

// slow succeeds, but only after moving the clock by step.
type slow struct {
	e    *env
	step time.Duration
	capture
}

func (s *slow) Deliver(ctx context.Context, o Parcel) error {
	s.e.Clk.Advance(s.step)
	return s.capture.Deliver(ctx, o)
}

// The page is larger than the budget allows, and rows follow it: a cut that
// resumed at the page's end rather than at the first untried row would skip
// c and d until the cursor wrapped.
func TestASlowButSuccessfulSinkIsCutAtTheFireBudget(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c", "d", "e", "f")
		sink := &slow{e: e, step: 400 * time.Millisecond}
		// A budget of 2 x 250 ms: two 400 ms calls spend it, on a page of 4.
		e.fire(&Handler{Sink: sink, Clock: e.Clk, SinkTimeout: 250 * time.Millisecond, MaxRows: 4})
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("delivered %v, want [a b]", got)
		}
		if e.backlogRows() != 4 {
			t.Fatalf("backlog %d, want 4", e.backlogRows())
		}
		if due := e.timerDue(); due > e.NowMs()+1 {
			t.Fatalf("due at %d, want now (%d), not backed off", due, e.NowMs())
		}
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk, MaxRows: 4})
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b", "c", "d", "e", "f"}) {
			t.Fatalf("delivered %v, want a, b, then the untried c, d and the rest", got)
		}
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d", e.backlogRows())
		}
	})
}

func TestAnUndeliverablePageDoesNotRaiseTheBackoff(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("poison")
		poison, _ := e.logKey("poison")
		e.put(poison, store.Value("bad"))
		sink := &capture{}
		var gaps []int64
		for range 3 {
			now := e.NowMs()
			e.fire(&Handler{Sink: sink, Clock: e.Clk})
			due := e.timerDue()
			gaps = append(gaps, due-now)
			e.Clk.Set(due)
		}
		if len(sink.seen) != 0 {
			t.Fatalf("delivered %v", sink.rids())
		}
		// No call failed, so the delay stays at the first step.
		for _, g := range gaps {
			if g < 1000 || g > 1200 {
				t.Fatalf("gaps %v ms, want each within 1 s plus 20 %%", gaps)
			}
		}
		if got := e.state().FailedFires; got != 0 {
			t.Fatalf("attempt %d, want 0", got)
		}
	})
}

// hang never answers and ignores its context, as a call stuck where nothing
// interrupts it: only the fire's own bound ends the call. It is let go when
// the test ends.
type hang struct {
	mu    sync.Mutex
	calls int
	// enter is called once the call started: the test's deadline.
	enter   func()
	release chan struct{}
}

func (h *hang) Deliver(context.Context, Parcel) error {
	h.mu.Lock()
	h.calls++
	enter := h.enter
	h.mu.Unlock()
	enter()
	<-h.release
	return errors.New("let go")
}

func TestAHangingSinkIsCutAtTheTimeoutAndEndsTheFiresCalls(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c")
		sink := &hang{release: make(chan struct{})}
		t.Cleanup(func() { close(sink.release) })
		var requested []time.Duration
		h := &Handler{Sink: sink, Clock: e.Clk, SinkTimeout: 250 * time.Millisecond}
		// The call's deadline passes as soon as the call has started.
		h.deadline = func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
			requested = append(requested, d)
			c, cancel := context.WithCancel(ctx)
			sink.mu.Lock()
			sink.enter = cancel
			sink.mu.Unlock()
			return c, cancel
		}
		reg, err := timers.NewHandlers(h)
		if err != nil {
			t.Fatal(err)
		}
		// Fired apart, so a fire held by the call fails the test rather
		// than hanging it.
		done := make(chan error, 1)
		go func() {
			_, err := timers.NewRunner(timers.RunnerConfig{Store: e.St, Handlers: reg, Clock: e.Clk}).RunDue(e.Ctx, e.P, e.NowMs())
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run due: %v", err)
			}
		case <-time.After(patience):
			t.Fatalf("the fire did not end within %v: a call whose sink ignores its context was not cut", patience)
		}
		sink.mu.Lock()
		calls := sink.calls
		sink.mu.Unlock()
		if calls != 1 {
			t.Fatalf("%d calls, want 1: the fire makes no call after the hung one", calls)
		}
		if !slices.Equal(requested, []time.Duration{250 * time.Millisecond}) {
			t.Fatalf("timeouts requested %v, want [250ms]", requested)
		}
		if e.backlogRows() != 3 {
			t.Fatalf("backlog %d, want 3", e.backlogRows())
		}
		if due := e.timerDue(); due < t0+1000 {
			t.Fatalf("due at +%d ms: want backed off", due-t0)
		}
		if a, ok := e.attempt("a"); !ok || a.ErrorClass != ClassTimeout || a.Count != 1 {
			t.Fatalf("attempt row %+v (found %v), want one timeout", a, ok)
		}
	})
}

func TestFirstFailureEndsTheFiresCallsAndNoRowIsLost(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c")
		failing := &capture{fail: errors.New("refused")}
		e.fire(&Handler{Sink: failing, Clock: e.Clk})
		if len(failing.seen) != 1 || e.backlogRows() != 3 {
			t.Fatalf("calls %v, backlog %d: want one call, nothing lost", failing.rids(), e.backlogRows())
		}
		if due := e.timerDue(); due < t0+1000 {
			t.Fatalf("due at +%d ms: want backed off", due-t0)
		}
		// The next fire resumes after the failed a: b and c first, a once
		// the cursor wraps.
		ok := &capture{}
		e.fireAtDue(&Handler{Sink: ok, Clock: e.Clk})
		if got := ok.rids(); !slices.Equal(got, []string{"b", "c"}) || e.backlogRows() != 1 {
			t.Fatalf("delivered %v, backlog %d: want [b c] and a kept", got, e.backlogRows())
		}
		e.fireAtDue(&Handler{Sink: ok, Clock: e.Clk})
		if got := ok.rids(); !slices.Equal(got, []string{"b", "c", "a"}) || e.backlogRows() != 0 {
			t.Fatalf("delivered %v, backlog %d", got, e.backlogRows())
		}
	})
}

// picky refuses b and takes the rest.
type picky struct{ capture }

func (p *picky) Deliver(ctx context.Context, o Parcel) error {
	if o.Outcome.ReservationID == "b" {
		return &Error{Class: "status", Status: 422, Reason: "rejected"}
	}
	return p.capture.Deliver(ctx, o)
}

func TestARefusedRowDoesNotStarveTheRowsBehindIt(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c", "d")
		sink := &picky{}
		for range 3 {
			e.fire(&Handler{Sink: sink, Clock: e.Clk})
			e.Clk.Advance(time.Hour)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"a", "c", "d"}) {
			t.Fatalf("delivered %v, want [a c d]", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("pending %v, want only b", got)
		}
	})
}

// Each fire takes exactly the next MaxRows rows, from the head and again
// once the cursor has wrapped past the stream's last row: a page scanned
// larger than that would call more rows in a fire, or strand the rows
// between the last one called and the page's end until a whole rotation.
func TestMaxRowsBoundsOneFireAndTheCursorRotates(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h := &Handler{Clock: e.Clk, MaxRows: 2}
		drain := func(from string, fires ...[]string) {
			t.Helper()
			left := e.backlogRows()
			for i, want := range fires {
				sink := &capture{}
				h.Sink = sink
				e.fireAtDue(h)
				left -= uint64(len(want))
				if got := sink.rids(); !slices.Equal(got, want) || e.backlogRows() != left {
					t.Fatalf("%s, fire %d: delivered %v, backlog %d; want %v and %d", from, i+1, got, e.backlogRows(), want, left)
				}
			}
		}
		e.seed("a", "b", "c", "d", "e")
		drain("from the head", []string{"a", "b"}, []string{"c", "d"}, []string{"e"})

		// A cursor past the last row, as a fire that failed at the stream's
		// last row leaves it: the next fire wraps to the head.
		e.seed("v", "w", "x", "y", "z")
		queue := outboxtest.Queue(t, e.St, e.P, ep)
		state, err := schema.EncodeDeliveryState(schema.DeliveryState{Cursor: store.CursorAfter(queue[len(queue)-1].Key)})
		if err != nil {
			t.Fatal(err)
		}
		r, _ := e.timer()
		var b store.Batch
		r.Replace(&b, r.DueAtMs, state)
		e.Apply(b)
		drain("wrapped", []string{"v", "w"}, []string{"x", "y"}, []string{"z"})
	})
}

func TestConfiguredMaxRowsOf24Or25DrainsWithinTheBatchLimit(t *testing.T) {
	t.Parallel()
	for _, configured := range []int{24, 25} {
		t.Run(fmt.Sprint(configured), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				var rids []string
				for i := range 25 {
					rids = append(rids, fmt.Sprintf("row-%d", i))
				}
				// An ingest request takes at most so many outcomes per batch;
				// the appender splits it.
				e.seed(rids...)
				sink := &capture{}
				for range 3 {
					e.fire(&Handler{Sink: sink, Clock: e.Clk, MaxRows: configured})
					e.Clk.Advance(time.Hour)
				}
				if len(sink.seen) != 25 || e.backlogRows() != 0 {
					t.Fatalf("delivered %d, backlog %d", len(sink.seen), e.backlogRows())
				}
			})
		})
	}
}

func TestAFailingRemoteHookKeepsTheRowAndEachRetryIsSignedAfresh(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		seen := make(chan http.Header, 4)
		bodies := make(chan []byte, 4)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			seen <- r.Header.Clone()
			bodies <- body
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		defer srv.Close()
		ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		if err != nil {
			t.Fatal(err)
		}
		defer ch.CloseIdleConnections()
		key, err := signing.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		signer, err := signing.NewMkitSigner("relay-1", key)
		if err != nil {
			t.Fatal(err)
		}
		e.putEndpoint(schema.Endpoint{Enabled: true, URL: srv.URL + "/hooks"})
		e.seed("retry")
		// The sender shares the test's clock, so a retry's window moves.
		sink := &Webhooks{Audience: "https://relay.example.com",
			Sender: &outbound.Sender{Channel: ch, Mkit: signer, Now: e.Clk.Now}}
		if rep := e.fire(&Handler{Sink: sink, Clock: e.Clk}); rep.Fired != 1 || e.backlogRows() != 1 {
			t.Fatalf("report %+v, backlog %d", rep, e.backlogRows())
		}
		if rep := e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk}); rep.Fired != 1 || e.backlogRows() != 1 {
			t.Fatalf("report %+v, backlog %d", rep, e.backlogRows())
		}
		first, second := <-seen, <-seen
		for _, h := range []string{signing.HeaderMkitNonce, signing.HeaderMkitCreatedAt, signing.HeaderMkitSignature} {
			if first.Get(h) == "" || first.Get(h) == second.Get(h) {
				t.Fatalf("%s: %q then %q, want a fresh value on the retry", h, first.Get(h), second.Get(h))
			}
		}
		if b1, b2 := <-bodies, <-bodies; string(b1) != string(b2) {
			t.Fatal("the retry's body differs")
		}
		if a, ok := e.attempt("retry"); !ok || a.Status != 503 || a.Count != 2 {
			t.Fatalf("attempt row %+v (found %v), want two 503s", a, ok)
		}
	})
}
