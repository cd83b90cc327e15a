package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

const ops = "ops"

// opsSink fails every call to ep with err (while err is set) and takes
// every other call, recording the events the operator endpoint receives.
type opsSink struct {
	mu     sync.Mutex
	err    error
	events []schema.Event
	seen   map[string]int
}

func (s *opsSink) Deliver(_ context.Context, p Parcel) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]int{}
	}
	s.seen[p.EndpointID+"/"+p.Outcome.ReservationID]++
	if p.EndpointID == ops {
		if p.Outcome.Event == nil {
			panic("the operator endpoint was sent an outcome")
		}
		s.events = append(s.events, *p.Outcome.Event)
		return nil
	}
	if p.Outcome.Event != nil {
		panic("an event was sent to an endpoint that does not take events")
	}
	return s.err
}

func (s *opsSink) setErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// types are the event types the operator endpoint received, in order.
func (s *opsSink) types() []schema.EventType {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []schema.EventType
	for _, e := range s.events {
		out = append(out, e.Type)
	}
	return out
}

var unavailable = &Error{Class: "status", Status: 503, Reason: "unavailable"}

// opsEnv is an env whose namespace also has an operator endpoint taking
// every event, and a handler that disables after an hour.
func opsEnv(t *testing.T, e *env) (*Handler, *opsSink) {
	t.Helper()
	e.putEndpoint(schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindCommitted}})
	putByAdmin(t, e, ops, schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindEvents}})
	sink := &opsSink{}
	return &Handler{Sink: sink, Clock: e.Clk, DisableAfter: time.Hour, Events: e.App}, sink
}

// putByAdmin puts the endpoint of id as an operator does, through
// outbox.Admin, so that enabling it wakes its stream.
func putByAdmin(t *testing.T, e *env, id string, cfg schema.Endpoint) {
	t.Helper()
	admin := &outbox.Admin{Store: e.St, Clock: e.Clk}
	if _, err := admin.PutEndpoint(e.Ctx, e.P, id, outbox.EndpointSpec{Enabled: cfg.Enabled, Kinds: cfg.Kinds,
		URL: "https://hooks.example.com/" + id}); err != nil {
		t.Fatal(err)
	}
}

// fireUntil fires the partition's timers at the earliest due one until
// done holds, at most n times.
func (e *env) fireUntil(h *Handler, n int, done func() bool) {
	e.T.Helper()
	for range n {
		if done() {
			return
		}
		e.Clk.Set(max(e.earliestDue(), e.NowMs()))
		e.fire(h)
	}
	if !done() {
		e.T.Fatalf("not done after %d fires", n)
	}
}

// earliestDue is the due time of the partition's earliest timer.
func (e *env) earliestDue() int64 {
	e.T.Helper()
	due := int64(timers.NeverMs)
	for _, r := range e.timers() {
		due = min(due, r.DueAtMs)
	}
	return due
}

// An endpoint that delivers nothing for the disable-after period while
// its calls fail is disabled as failing, with its rows kept; the operator
// endpoint hears endpoint.failing at the first failure and exactly one
// endpoint.disabled. Enabled again, it delivers its backlog and the
// operator hears endpoint.recovered.
func TestAnEndpointFailingForTheDisableAfterPeriodIsDisabledAndRecovers(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		sink.setErr(unavailable)
		e.seed("a", "b")
		start := e.NowMs()
		e.fireUntil(h, 200, func() bool { return !e.endpoint().Enabled })
		cfg := e.endpoint()
		if cfg.DisabledReason != ReasonFailing || cfg.DisabledMs < start+time.Hour.Milliseconds() {
			t.Fatalf("endpoint %+v, want disabled as failing an hour on", cfg)
		}
		if got := e.pending(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("pending %v, want both rows kept", got)
		}
		// The events reach the operator endpoint; a few more fires change
		// nothing: the stream is parked.
		e.fireUntil(h, 20, func() bool { return len(sink.types()) == 2 })
		for range 5 {
			e.Clk.Advance(time.Hour)
			e.fire(h)
		}
		if got := sink.types(); !slices.Equal(got, []schema.EventType{schema.EventFailing, schema.EventDisabled}) {
			t.Fatalf("events %v", got)
		}
		d := sink.events[1]
		if d.Endpoint != ep || d.Reason != ReasonFailing || d.FailingSinceMs != start || d.LastStatus != 503 || d.LastError != "status" {
			t.Fatalf("disabled event %+v", d)
		}
		if due := e.timerOf(ep); due != timers.NeverMs {
			t.Fatalf("timer of the disabled stream due %d, want parked", due)
		}

		// Enabled again by its operator: the backlog goes out, and the
		// operator hears it recovered.
		sink.setErr(nil)
		putByAdmin(t, e, ep, schema.Endpoint{Enabled: true, Kinds: cfg.Kinds})
		e.fireUntil(h, 20, func() bool { return len(sink.types()) == 3 && e.backlogRows() == 0 })
		r := sink.events[2]
		if r.Type != schema.EventRecovered || r.FailingSinceMs != start {
			t.Fatalf("third event %+v, want endpoint.recovered since %d", r, start)
		}
	})
}

// The period restarts when the operator edits the endpoint: enabled
// again, a failing endpoint is not disabled at its next failure.
func TestEnablingAFailingEndpointGivesItAWholePeriod(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		sink.setErr(unavailable)
		e.seed("a")
		e.fireUntil(h, 200, func() bool { return !e.endpoint().Enabled })
		cfg := e.endpoint()
		putByAdmin(t, e, ep, schema.Endpoint{Enabled: true, Kinds: cfg.Kinds})
		enabled := e.NowMs()
		e.fireUntil(h, 200, func() bool { return !e.endpoint().Enabled })
		if got := e.endpoint().DisabledMs; got < enabled+time.Hour.Milliseconds() {
			t.Fatalf("disabled again at %d, %d ms after it was enabled", got, got-enabled)
		}
	})
}

// A flapping endpoint tells endpoint.failing at most once an hour, even
// when its backlog empties between the failures.
func TestFailingIsToldAtMostOnceAnHour(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		for i := range 4 {
			sink.setErr(unavailable)
			rid := "r-" + string(rune('a'+i))
			e.seed(rid)
			e.fireUntil(h, 5, func() bool { return sink.seen[ep+"/"+rid] > 0 })
			sink.setErr(nil)
			e.fireUntil(h, 20, func() bool { return e.backlogRows() == 0 })
			e.Clk.Advance(10 * time.Minute)
		}
		// Whatever is still to be told, told.
		e.fireUntil(h, 20, func() bool { return len(e.pendingOf(ops)) == 0 && !e.hasPendingEvents() })
		want := []schema.EventType{schema.EventFailing, schema.EventRecovered}
		if got := sink.types(); !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		// An hour after the first, a failure is told again.
		e.Clk.Advance(time.Hour)
		sink.setErr(unavailable)
		e.seed("late")
		e.fireUntil(h, 20, func() bool { return len(sink.types()) == 3 })
		if got := sink.types()[2]; got != schema.EventFailing {
			t.Fatalf("event %s, want endpoint.failing", got)
		}
	})
}

// A 410 disables the endpoint and tells endpoint.gone, not failing.
func TestAGoneEndpointTellsGone(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		sink.setErr(&Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"})
		e.seed("a")
		e.fireUntil(h, 20, func() bool { return len(sink.types()) == 1 })
		for range 3 {
			e.Clk.Advance(time.Hour)
			e.fire(h)
		}
		if got := sink.types(); !slices.Equal(got, []schema.EventType{schema.EventGone}) {
			t.Fatalf("events %v", got)
		}
		if g := sink.events[0]; g.Reason != ReasonGone || g.LastStatus != 410 {
			t.Fatalf("gone event %+v", g)
		}
		if cfg := e.endpoint(); cfg.Enabled || cfg.DisabledReason != ReasonGone || cfg.DisabledMs == 0 {
			t.Fatalf("endpoint %+v", cfg)
		}
	})
}

// A fire that appended its events and did not live to complete leaves
// them to the next fire, whose append is a duplicate: one event each.
func TestEventsAppendedTwiceAreOneEvent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		sink.setErr(unavailable)
		e.seed("a")
		e.fireUntil(h, 5, func() bool { return e.hasPendingEvents() })
		// The fire appends, and its completion is lost.
		e.Clk.Set(e.timerOf(ep))
		if _, fired := e.planned(h); fired.Done {
			t.Fatal("the flushing fire ended the stream")
		}
		if got := e.pendingOf(ops); len(got) != 1 {
			t.Fatalf("operator stream %v after the lost fire", got)
		}
		e.fireUntil(h, 5, func() bool { return !e.hasPendingEvents() && len(e.pendingOf(ops)) == 0 })
		if got := sink.types(); !slices.Equal(got, []schema.EventType{schema.EventFailing}) {
			t.Fatalf("the operator endpoint received %v, want the one event", got)
		}
	})
}

// An endpoint that takes events is told of by log and metric only: an
// event about it would go to it, failing as it is.
func TestNoEventIsSentAboutTheOperatorEndpoint(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		putByAdmin(t, e, ep, schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindEvents, schema.KindCommitted}})
		failing := &capture{fail: unavailable}
		h := &Handler{Sink: failing, Clock: e.Clk, DisableAfter: time.Hour, Events: e.App}
		e.seed("a")
		e.fireUntil(h, 200, func() bool { return !e.endpoint().Enabled })
		e.fireUntil(h, 5, func() bool { return !e.hasPendingEvents() })
		for _, o := range failing.seen {
			if o.Outcome.Event != nil {
				t.Fatalf("sent %+v about itself", o.Outcome.Event)
			}
		}
		if got := e.pending(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("pending %v", got)
		}
	})
}

// Without DisableAfter an endpoint is never disabled, however long it
// fails.
func TestNoDisableAfterNeverDisables(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		h.DisableAfter = 0
		sink.setErr(unavailable)
		e.seed("a")
		for range 100 {
			e.Clk.Set(max(e.earliestDue(), e.NowMs()))
			e.fire(h)
		}
		if e.NowMs()-t0 < 10*time.Hour.Milliseconds() || !e.endpoint().Enabled {
			t.Fatalf("after %v: endpoint %+v", time.Duration(e.NowMs()-t0)*time.Millisecond, e.endpoint())
		}
	})
}

// timers are the partition's delivery timers.
func (e *env) timers() []timers.Row {
	e.T.Helper()
	rows, err := timers.All(e.Ctx, e.St, e.P)
	if err != nil {
		e.T.Fatal(err)
	}
	return slices.DeleteFunc(rows, func(r timers.Row) bool { return r.Kind != timers.KindOutcomeDelivery })
}

// timerOf is the due time of the stream of id, NeverMs when it has none.
func (e *env) timerOf(id string) int64 {
	for _, r := range e.timers() {
		if r.Reference == id {
			return r.DueAtMs
		}
	}
	return timers.NeverMs
}

// hasPendingEvents reports whether ep's timer holds events to append.
func (e *env) hasPendingEvents() bool {
	e.T.Helper()
	r, ok := e.timer()
	if !ok {
		return false
	}
	s, err := schema.DecodeDeliveryState(r.State)
	if err != nil {
		e.T.Fatal(err)
	}
	return s.Health != nil && len(s.Health.Pending) > 0
}

// failingAppender fails every append with err.
type failingAppender struct{ err error }

func (f failingAppender) Append(context.Context, store.Partition, []schema.Outcome) ([]outbox.Status, error) {
	return nil, f.err
}

// An append that would fail again does not hold the stream: the events
// are logged and dropped, and delivery goes on; one that fails for now is
// tried again by the next fire.
func TestAnEventThatCannotBeAppendedDoesNotHoldTheStream(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		h, sink := opsEnv(t, e)
		h.Events = failingAppender{err: fmt.Errorf("append: %w", outbox.ErrTooManyEndpoints)}
		sink.setErr(unavailable)
		e.seed("a")
		e.fireUntil(h, 5, func() bool { return e.hasPendingEvents() })
		e.fireUntil(h, 5, func() bool { return !e.hasPendingEvents() })
		sink.setErr(nil)
		e.fireUntil(h, 10, func() bool { return e.backlogRows() == 0 && !e.hasPendingEvents() })

		h.Events = failingAppender{err: store.ErrUnavailable}
		sink.setErr(unavailable)
		e.Clk.Advance(2 * time.Hour)
		e.seed("b")
		e.fireUntil(h, 5, func() bool { return e.hasPendingEvents() })
		e.Clk.Set(max(e.timerOf(ep), e.NowMs()))
		r, _ := e.timer()
		_, err := h.Fire(e.Ctx, timers.FireContext{Store: e.St, Partition: e.P, NowMs: e.NowMs()},
			timers.DueTimer{DueAtMs: r.DueAtMs, Kind: r.Kind, Reference: r.Reference, State: r.State})
		if !errors.Is(err, store.ErrUnavailable) || !e.hasPendingEvents() {
			t.Fatalf("fire: %v; events kept: %v", err, e.hasPendingEvents())
		}
		h.Events = e.App
		e.fireUntil(h, 5, func() bool { return !e.hasPendingEvents() && len(e.pendingOf(ops)) == 0 })
		// The first episode's events were dropped, the second's kept.
		if got := sink.types(); !slices.Equal(got, []schema.EventType{schema.EventFailing}) {
			t.Fatalf("the operator received %v", got)
		}
	})
}
