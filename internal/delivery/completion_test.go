package delivery

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// A fire's completion must not lose to what changes beside it: outcomes
// accepted while it plans, an operator editing the endpoint.

// ingesting is a store on which an outcome of the stream is accepted just
// after every read of its backlog, up to limit: steady ingest, landing in
// every window between a fire's read and its completion.
type ingesting struct {
	store.NamespaceStore
	e     *env
	limit int

	mu       sync.Mutex
	accepted []string
}

func (s *ingesting) land() {
	s.mu.Lock()
	n := len(s.accepted)
	if n >= s.limit {
		s.mu.Unlock()
		return
	}
	rid := fmt.Sprintf("landed-%02d", n)
	s.accepted = append(s.accepted, rid)
	s.mu.Unlock()
	s.e.append(aborted(rid))
}

func (s *ingesting) Get(ctx context.Context, p store.Partition, key store.Key) (store.Value, bool, error) {
	v, found, err := s.NamespaceStore.Get(ctx, p, key)
	if bk, _ := schema.BacklogKey(ep); key == bk {
		s.land()
	}
	return v, found, err
}

func (s *ingesting) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	rows, err := s.NamespaceStore.GetMany(ctx, p, keys)
	if bk, _ := schema.BacklogKey(ep); slices.Contains(keys, bk) {
		s.land()
	}
	return rows, err
}

// runOn runs the stream's due timers once on st, as a driver would.
func (e *env) runOn(st store.NamespaceStore, h *Handler) timers.Report {
	e.T.Helper()
	reg, err := timers.NewHandlers(h)
	if err != nil {
		e.T.Fatal(err)
	}
	rep, err := timers.NewRunner(timers.RunnerConfig{Store: st, Handlers: reg, Clock: e.Clk}).RunDue(e.Ctx, e.P, e.NowMs())
	if err != nil {
		e.T.Fatalf("run due: %v", err)
	}
	return rep
}

// Under steady ingest every read of the backlog is followed by an append
// before the completion applies. The completion still commits: the
// acknowledgements subtract from the backlog rather than guard the count
// they read, so no number of re-plans runs out and no delivered row is sent
// again. Guarded by the count, every plan fails, the timer is released with
// its old state and the next fire sends the whole page a second time.
func TestSteadyIngestDoesNotSendDeliveredRowsAgain(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		ids := rids("row", DefaultMaxRows)
		e.seed(ids...)
		sink := &capture{}
		racing := &ingesting{NamespaceStore: e.St, e: e, limit: 40}
		h := &Handler{Sink: sink, Clock: e.Clk}
		if rep := e.runOn(racing, h); rep.Replanned != 0 || rep.LeaseLost != 0 || rep.Rescheduled != 1 {
			t.Fatalf("report %+v: want the completion rescheduled, not released", rep)
		}
		for _, rid := range ids {
			if _, found := e.record(rid); found {
				t.Fatalf("delivered row %s was not acknowledged", rid)
			}
		}
		// The rest drains; each row reaches the endpoint once.
		for range 8 {
			if e.backlogRows() == 0 {
				break
			}
			e.fireAtDue(h)
		}
		racing.mu.Lock()
		all := append(slices.Clone(ids), racing.accepted...)
		racing.mu.Unlock()
		for _, rid := range all {
			if n := sink.count(rid); n != 1 {
				t.Errorf("%s delivered %d times, want once", rid, n)
			}
		}
		if n := e.backlogRows(); n != 0 || len(e.pending()) != 0 {
			t.Fatalf("backlog %d, pending %v: want both empty", n, e.pending())
		}
		if _, ok := e.timer(); ok {
			t.Fatal("timer left on an empty stream")
		}
	})
}

// A 410 that acknowledges nothing plans only the disable, guarded by the
// endpoint row, not by the backlog that ingest keeps changing: under steady
// ingest the gone endpoint is still disabled and parked at once.
func TestAGoneEndpointIsDisabledUnderSteadyIngest(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("first")
		sink := newGated()
		sink.fail["first"] = &Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}
		racing := &ingesting{NamespaceStore: e.St, e: e, limit: 40}
		rep := e.runOn(racing, &Handler{Sink: sink, Clock: e.Clk})
		if rep.Replanned != 0 || rep.Rescheduled != 1 {
			t.Fatalf("report %+v: want the disable applied, not released", rep)
		}
		if cfg := e.endpoint(); cfg.Enabled || cfg.DisabledReason != "gone" {
			t.Fatalf("endpoint %+v, want disabled as gone", cfg)
		}
		if due := e.timerDue(); due != timers.NeverMs {
			t.Fatalf("timer due %d, want parked", due)
		}
	})
}

// editDuringGone delivers a, and answers 410 for b after an operator edits
// the endpoint during that call.
type editDuringGone struct {
	e    *env
	edit schema.Endpoint
	capture
}

func (s *editDuringGone) Deliver(ctx context.Context, o Parcel) error {
	if o.Outcome.ReservationID != "b" {
		return s.capture.Deliver(ctx, o)
	}
	s.e.putEndpoint(s.edit)
	return &Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}
}

// An operator who edits the endpoint while its call answers 410 neither
// loses the fire its acknowledgements nor keeps the gone endpoint called:
// the completion re-reads the endpoint row. The edit wins where it bears on
// the 410 (a new URL, a disable) and is kept, with the endpoint disabled,
// where it does not.
func TestAnEndpointEditedDuringA410KeepsTheAcknowledgementsAndTheRightState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		edit       schema.Endpoint
		wantEp     schema.Endpoint
		wantParked bool
	}{
		{
			name:       "other settings",
			edit:       schema.Endpoint{Enabled: true, MaxInFlight: 4, Kinds: []schema.Kind{"committed"}},
			wantEp:     schema.Endpoint{Enabled: false, DisabledReason: "gone", MaxInFlight: 4, Kinds: []schema.Kind{"committed"}},
			wantParked: true,
		},
		{
			name:   "new URL",
			edit:   schema.Endpoint{Enabled: true, URL: "https://hooks.example.com/moved"},
			wantEp: schema.Endpoint{Enabled: true, URL: "https://hooks.example.com/moved"},
		},
		{
			name:       "disabled",
			edit:       schema.Endpoint{Enabled: false, DisabledReason: "paused"},
			wantEp:     schema.Endpoint{Enabled: false, DisabledReason: "paused"},
			wantParked: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, e *env) {
				e.seed("a", "b")
				sink := &editDuringGone{e: e, edit: tc.edit}
				rep := e.fire(&Handler{Sink: sink, Clock: e.Clk})
				if rep.Replanned != 0 || rep.Rescheduled != 1 {
					t.Fatalf("report %+v: want the completion applied, not released", rep)
				}
				if got := e.pending(); !slices.Equal(got, []string{"b"}) {
					t.Fatalf("pending %v: want a acknowledged and b kept", got)
				}
				cfg := e.endpoint()
				want := tc.wantEp.WithDefaults()
				if want.URL == "" {
					want.URL = "https://hooks.example.com/" + ep
				}
				if cfg.Enabled != want.Enabled || cfg.DisabledReason != want.DisabledReason || cfg.URL != want.URL ||
					cfg.MaxInFlight != want.MaxInFlight || !slices.Equal(cfg.Kinds, want.Kinds) {
					t.Fatalf("endpoint %+v, want %+v", cfg, want)
				}
				if parked := e.timerDue() == timers.NeverMs; parked != tc.wantParked {
					t.Fatalf("timer due %d: parked %v, want %v", e.timerDue(), parked, tc.wantParked)
				}
				if !tc.wantParked {
					// The new URL is called for b; a is not sent again.
					ok := &capture{}
					e.fireAtDue(&Handler{Sink: ok, Clock: e.Clk})
					if got := ok.rids(); !slices.Equal(got, []string{"b"}) {
						t.Fatalf("next fire delivered %v, want [b]", got)
					}
				}
				if n := sink.count("a"); n != 1 {
					t.Fatalf("a delivered %d times, want once", n)
				}
			})
		})
	}
}

// editAfterRead is a store on which an operator edits the endpoint just
// after a fire's completion has read it (the second read of the endpoint
// row; the first is the fire's own, before its calls).
type editAfterRead struct {
	store.NamespaceStore
	e     *env
	edit  schema.Endpoint
	reads int
}

func (s *editAfterRead) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	rows, err := s.NamespaceStore.GetMany(ctx, p, keys)
	if ek, _ := schema.EndpointKey(ep); slices.Contains(keys, ek) {
		if s.reads++; s.reads == 2 {
			s.e.putEndpoint(s.edit)
		}
	}
	return rows, err
}

// An edit landing between the completion's read of the endpoint row and its
// apply fails the disable's guard; the re-plan reads the row again, so the
// edit is kept, the endpoint disabled and the acknowledgement applied.
func TestAnEndpointEditedAfterTheCompletionsReadIsReplannedOnANewRead(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b")
		sink := newGated()
		sink.fail["b"] = &Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}
		racing := &editAfterRead{NamespaceStore: e.St, e: e, edit: schema.Endpoint{Enabled: true, MaxInFlight: 3}}
		rep := e.runOn(racing, &Handler{Sink: sink, Clock: e.Clk})
		if racing.reads < 3 {
			t.Fatalf("the endpoint row was read %d times: the edit did not race a completion", racing.reads)
		}
		if rep.Replanned != 0 || rep.Rescheduled != 1 {
			t.Fatalf("report %+v: want the re-planned completion applied, not released", rep)
		}
		if cfg := e.endpoint(); cfg.Enabled || cfg.DisabledReason != "gone" || cfg.MaxInFlight != 3 {
			t.Fatalf("endpoint %+v, want the edit kept and the endpoint disabled as gone", cfg)
		}
		if got := e.pending(); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("pending %v: want a acknowledged", got)
		}
	})
}
