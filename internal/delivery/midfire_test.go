package delivery

import (
	"errors"
	"github.com/hookrelay/relay/internal/store"
	"time"

	"context"
	"github.com/hookrelay/relay/internal/timers"
	"slices"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Operators' changes that land while a fire's calls are under way: the
// fire's completion must read what they changed, never send a row twice or
// after its erasure was answered.

const other = "other"

// changeDuring is a sink that runs change once, when it is asked to deliver
// the row at, and records every call of the stream ep.
type changeDuring struct {
	at     string
	change func()
	once   sync.Once

	mu    sync.Mutex
	calls []string
}

func (c *changeDuring) Deliver(_ context.Context, p Parcel) error {
	if p.EndpointID != ep {
		return nil
	}
	c.mu.Lock()
	c.calls = append(c.calls, p.Outcome.ReservationID)
	c.mu.Unlock()
	if p.Outcome.ReservationID == c.at {
		c.once.Do(c.change)
	}
	return nil
}

func (c *changeDuring) rids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// With nothing retained, a row whose other streams are done is deleted by
// its last acknowledgement, guarded by the whole log row as read. A resend
// of it to another endpoint meanwhile rewrites that row: the re-plan must
// read it again, rather than fail the same guard until the timer is
// released and the whole page sent again.
func TestAResendToAnotherEndpointDuringAFireIsReadByTheReplan(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		outboxtest.PutEndpoint(t, e.St, e.P, other, schema.Endpoint{Enabled: true})
		e.putEndpoint(schema.Endpoint{Enabled: false})
		e.seed("x", "y", "z")
		// The other stream delivers all three; ep, disabled, keeps them.
		if rep := e.fire(&Handler{Sink: &capture{}, Clock: e.Clk}); rep.Fired != 1 {
			t.Fatalf("first fires: %+v", rep)
		}
		if got := e.pendingOf(other); len(got) != 0 {
			t.Fatalf("other still holds %v", got)
		}
		admin := &outbox.Admin{Store: e.St, Clock: e.Clk}
		if _, err := admin.PutEndpoint(e.Ctx, e.P, ep, outbox.EndpointSpec{URL: "https://hooks.example.com/ep", Enabled: true}); err != nil {
			t.Fatal(err)
		}
		sink := &changeDuring{at: "y", change: func() {
			if _, err := admin.Resend(e.Ctx, e.P, other, "x"); err != nil {
				t.Errorf("resend: %v", err)
			}
		}}
		h := &Handler{Sink: sink, Clock: e.Clk}
		rep := e.fire(h)
		if rep.Replanned != 0 {
			t.Fatalf("report %+v: the timer was released, its page to be sent again", rep)
		}
		for range 3 {
			if _, ok := e.timer(); !ok {
				break
			}
			e.fireAtDue(h)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"x", "y", "z"}) {
			t.Fatalf("ep was called with %v, want each of x y z once", got)
		}
		if got := e.pending(); len(got) != 0 {
			t.Fatalf("ep still holds %v", got)
		}
		if got := e.pendingOf(other); !slices.Equal(got, []string{"x"}) {
			t.Fatalf("other holds %v, want the resent x", got)
		}
	})
}

// events is what happened, in order, across the test's goroutines.
type events struct {
	mu  sync.Mutex
	log []string
}

func (ev *events) add(s string) {
	ev.mu.Lock()
	ev.log = append(ev.log, s)
	ev.mu.Unlock()
}

func (ev *events) all() []string {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return slices.Clone(ev.log)
}

// holding is a sink that holds its first call until released, logs every
// call, and refuses the rids in fail.
type holding struct {
	ev      *events
	fail    map[string]bool
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *holding) Deliver(ctx context.Context, p Parcel) error {
	s.ev.add("call " + p.Outcome.ReservationID)
	s.once.Do(func() {
		close(s.arrived)
		<-s.release
	})
	if s.fail[p.Outcome.ReservationID] {
		return &Error{Class: "status", Status: 500}
	}
	return nil
}

// eraseDuringFire fires the stream with a sink held on its first call,
// erases rid meanwhile, and returns what happened in order and what the
// erasure answered. The erasure's first wait blocks until the fire has
// returned, so the test knows the erasure saw the fire's lease.
func eraseDuringFire(t *testing.T, e *env, rid string, fail ...string) ([]string, outbox.Erased, error) {
	t.Helper()
	ev := &events{}
	sink := &holding{ev: ev, fail: map[string]bool{}, arrived: make(chan struct{}), release: make(chan struct{})}
	for _, f := range fail {
		sink.fail[f] = true
	}
	h := &Handler{Sink: sink, Clock: e.Clk, Retention: 24 * time.Hour}
	reg, err := timers.NewHandlers(h)
	if err != nil {
		t.Fatal(err)
	}
	fired := make(chan error, 1)
	go func() {
		_, err := timers.NewRunner(timers.RunnerConfig{Store: e.St, Handlers: reg, Clock: e.Clk}).RunDue(e.Ctx, e.P, e.NowMs())
		fired <- err
	}()
	<-sink.arrived
	waiting := make(chan struct{})
	var once sync.Once
	admin := &outbox.Admin{Store: e.St, Clock: e.Clk, Retention: 24 * time.Hour, Wait: func(ctx context.Context, _ time.Duration) error {
		once.Do(func() {
			close(waiting)
			if err := <-fired; err != nil {
				t.Errorf("fire: %v", err)
			}
		})
		return nil
	}}
	type erased struct {
		out outbox.Erased
		err error
	}
	done := make(chan erased, 1)
	go func() {
		out, err := admin.Erase(e.Ctx, e.P, rid)
		ev.add("erased")
		done <- erased{out, err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		close(sink.release)
		<-fired
		t.Fatalf("the erasure answered (%+v, %v) while a fire held its stream", r.out, r.err)
	}
	close(sink.release)
	r := <-done
	return ev.all(), r.out, r.err
}

// An erasure that lands while a fire holds the outcome's stream waits for
// the fire: it answers only once no fire can send the outcome, and the
// fire's completion, which it let through, sends nothing twice.
func TestAnEraseDuringAFireWaitsForItAndNothingIsSentAfter(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b", "c", "d")
		got, out, err := eraseDuringFire(t, e, "c")
		if err != nil {
			t.Fatalf("erase: %v", err)
		}
		if want := []string{"call a", "call b", "call c", "call d", "erased"}; !slices.Equal(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		if len(out.Dropped) != 0 {
			t.Fatalf("erasure dropped %v: c was delivered before it applied", out.Dropped)
		}
		if key, ok := schema.AttemptKey(ep, "c"); ok == nil {
			if _, found := e.Get(key); found {
				t.Fatal("c's attempt row outlived its erasure")
			}
		}
		if _, ok := e.timer(); ok {
			t.Fatal("a timer is left: its next fire would send the page again")
		}
		if n := e.backlogRows(); n != 0 {
			t.Fatalf("backlog %d, want 0", n)
		}
	})
}

// A call that fails while its row is being erased is recorded by the fire
// and counted; the erasure that follows takes the attempt row with the
// outcome, so nothing of it is left to show an outcome reusing the id.
func TestAnEraseDuringAFailingCallLeavesNoAttemptRowAndCountsTheCall(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b")
		got, out, err := eraseDuringFire(t, e, "a", "a")
		if err != nil {
			t.Fatalf("erase: %v", err)
		}
		if i := slices.Index(got, "erased"); i < 0 || slices.Contains(got[i:], "call a") {
			t.Fatalf("events %v: a called after its erasure", got)
		}
		if !slices.Equal(out.Dropped, []string{ep}) {
			t.Fatalf("erasure dropped %v, want [%s]", out.Dropped, ep)
		}
		key, _ := schema.AttemptKey(ep, "a")
		if _, found := e.Get(key); found {
			t.Fatal("the failed call's attempt row outlived the erasure")
		}
		s, err := (&outbox.Admin{Store: e.St, Clock: e.Clk}).Endpoint(e.Ctx, e.P, ep)
		if err != nil {
			t.Fatal(err)
		}
		if s.Counters.FailedAttempts != 1 || s.Counters.Dropped != 1 {
			t.Fatalf("counters %+v, want 1 failed attempt and 1 dropped", s.Counters)
		}
	})
}

// claimBeforeErase is a store on which a driver claims the stream's timer
// between an erasure's reads and its batch.
type claimBeforeErase struct {
	store.NamespaceStore
	e    *env
	once sync.Once
}

func (s *claimBeforeErase) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	s.once.Do(func() {
		r, ok := s.e.timer()
		if !ok {
			s.e.T.Error("no timer to claim")
			return
		}
		if _, ok, err := timers.Claim(ctx, s.NamespaceStore, p, r, s.e.NowMs(), timers.DefaultLease); err != nil || !ok {
			s.e.T.Errorf("claim: %v %v", ok, err)
		}
	})
	return s.NamespaceStore.Apply(ctx, p, b)
}

// An erasure guards the timer of each stream with the outcome pending as it
// read it: a fire that claims the stream after that read, and so may send
// the outcome, fails the erasure, which then waits for that fire.
func TestAnEraseFailsWhenAFireClaimsTheStreamAfterItsRead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		waited := false
		admin := &outbox.Admin{Store: &claimBeforeErase{NamespaceStore: e.St, e: e}, Clock: e.Clk,
			Wait: func(context.Context, time.Duration) error {
				waited = true
				return context.Canceled
			}}
		_, err := admin.Erase(e.Ctx, e.P, "a")
		if !waited || !errors.Is(err, context.Canceled) {
			t.Fatalf("erase answered %v without waiting for the fire that claimed its stream", err)
		}
		if got := e.pending(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("pending %v: the erasure applied under the fire's lease", got)
		}
	})
}

// editDuring is a sink that, when it takes the row at, edits the endpoint
// as an operator would, then accepts next, as a producer would once the
// edit was answered, and tells the fire's Arrivals of it (by its row, or
// not knowing it).
type editDuring struct {
	e      *env
	admin  *outbox.Admin
	arr    *Arrivals
	at     string
	next   string
	spec   outbox.EndpointSpec
	byRows bool
	once   sync.Once

	mu    sync.Mutex
	calls []Parcel
	errs  []error
}

func (s *editDuring) Deliver(ctx context.Context, p Parcel) error {
	s.mu.Lock()
	s.calls = append(s.calls, p)
	s.mu.Unlock()
	if p.Outcome.ReservationID != s.at {
		return nil
	}
	s.once.Do(func() {
		_, err := s.admin.PutEndpoint(ctx, s.e.P, ep, s.spec)
		var st []outbox.Status
		if err == nil {
			os := []schema.Outcome{committed(s.next)}
			if st, err = s.e.App.Append(ctx, s.e.P, os); err == nil {
				refs := refsOf(os, st)
				if !s.byRows {
					refs = nil
				}
				s.arr.Arrived(s.e.P, refs)
			}
		}
		if err != nil {
			s.mu.Lock()
			s.errs = append(s.errs, err)
			s.mu.Unlock()
		}
	})
	return nil
}

// An outcome accepted after an edit of its endpoint was answered goes as
// the edit says, even to a fire that began before the edit and lingers
// for the next outcome: a new URL, a disable, headers removed, a new
// secret, a rotated key.
func TestAnOutcomeAcceptedAfterAnEditGoesAsTheEditSays(t *testing.T) {
	t.Parallel()
	const url = "https://hooks.example.com/ep"
	before := outbox.EndpointSpec{URL: url, Enabled: true, Headers: map[string]schema.HeaderValue{"x-api-key": "k1"}}
	v1a := outbox.EndpointSpec{URL: url, Enabled: true, Scheme: schema.SchemeStandardWebhooksV1a}
	sw := outbox.EndpointSpec{URL: url, Enabled: true, Scheme: schema.SchemeStandardWebhooks}
	edits := []struct {
		name         string
		before, edit outbox.EndpointSpec
		// same reports whether b went as the edit says.
		same func(old, got schema.Endpoint) bool
	}{
		{"url", before, outbox.EndpointSpec{URL: url + "/v2", Enabled: true, Headers: before.Headers},
			func(_, got schema.Endpoint) bool { return got.URL == url+"/v2" }},
		{"disabled", before, outbox.EndpointSpec{URL: url, Enabled: false}, nil},
		{"headers", before, outbox.EndpointSpec{URL: url, Enabled: true},
			func(_, got schema.Endpoint) bool { return len(got.Headers) == 0 }},
		{"secret", sw, outbox.EndpointSpec{URL: url, Enabled: true, Scheme: schema.SchemeStandardWebhooks,
			Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
			func(old, got schema.Endpoint) bool { return got.Secrets[0] != old.Secrets[0] }},
		{"key", v1a, outbox.EndpointSpec{URL: url, Enabled: true, Scheme: schema.SchemeStandardWebhooksV1a, RotateKey: true},
			func(old, got schema.Endpoint) bool {
				return got.SigningKeys[0].PublicKey() != old.SigningKeys[0].PublicKey()
			}},
	}
	for _, ed := range edits {
		for _, byRows := range []bool{true, false} {
			name := ed.name + "/unknown"
			if byRows {
				name = ed.name + "/rows"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				eachBackend(t, func(t *testing.T, e *env) {
					admin := &outbox.Admin{Store: e.St, Clock: e.Clk}
					if _, err := admin.PutEndpoint(e.Ctx, e.P, ep, ed.before); err != nil {
						t.Fatal(err)
					}
					e.seed("a")
					old := e.endpoint()
					arr := NewArrivals(4)
					busy(arr, e.P)
					sink := &editDuring{e: e, admin: admin, arr: arr, at: "a", next: "b", spec: ed.edit, byRows: byRows}
					h := lingering(sink, arr, e)
					e.fire(h)
					for range 3 {
						if _, ok := e.timer(); !ok || !e.endpoint().Enabled {
							break
						}
						e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
					}
					sink.mu.Lock()
					defer sink.mu.Unlock()
					if len(sink.errs) > 0 {
						t.Fatal(sink.errs)
					}
					var b []Parcel
					for _, p := range sink.calls {
						if p.Outcome.ReservationID == "b" {
							b = append(b, p)
						}
					}
					if ed.same == nil {
						if len(b) != 0 {
							t.Fatalf("b was sent to an endpoint disabled before it was accepted")
						}
						if got := e.pending(); !slices.Equal(got, []string{"b"}) {
							t.Fatalf("pending %v, want b kept", got)
						}
						return
					}
					if len(b) != 1 {
						t.Fatalf("b sent %d times, want once", len(b))
					}
					if !ed.same(old, b[0].Endpoint) {
						t.Fatalf("b went the old way: %+v", b[0].Endpoint)
					}
				})
			})
		}
	}
}

// editBeforeQueueRead is a store on which an edit of the endpoint and an
// outcome accepted after it land between a fire's read of its endpoint and
// its read of the queue.
type editBeforeQueueRead struct {
	store.NamespaceStore
	once sync.Once
	edit func()
}

func (s *editBeforeQueueRead) ReadMany(ctx context.Context, p store.Partition, reads []store.Read) ([]store.ReadResult, error) {
	s.once.Do(s.edit)
	return store.ReadMany(ctx, s.NamespaceStore, p, reads)
}

func TestAnEditBetweenAFiresReadsIsSeenByItsPage(t *testing.T) {
	t.Parallel()
	const url = "https://hooks.example.com/ep"
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		admin := &outbox.Admin{Store: e.St, Clock: e.Clk}
		st := &editBeforeQueueRead{NamespaceStore: e.St, edit: func() {
			if _, err := admin.PutEndpoint(e.Ctx, e.P, ep, outbox.EndpointSpec{URL: url + "/v2", Enabled: true}); err != nil {
				t.Error(err)
			}
			e.append(committed("b"))
		}}
		sink := &capture{}
		e.St = st
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		e.St = st.NamespaceStore
		for _, p := range sink.seen {
			if p.Outcome.ReservationID == "b" && p.Endpoint.URL != url+"/v2" {
				t.Fatalf("b, accepted after the edit, went to %s", p.Endpoint.URL)
			}
		}
		if sink.count("b") != 1 {
			t.Fatalf("delivered %v, want b once", sink.rids())
		}
	})
}
