package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// receiver is an endpoint on the simulated clock: it counts the calls that
// land in each simulated second and, when refuseAbove is set, answers 429
// to every call past that many accepted in the current second, as a
// fixed-window rate limiter does.
type receiver struct {
	e           *env
	mu          sync.Mutex
	refuseAbove int
	accepted    map[int64]int // by second since t0
	refused     map[int64]int
	calls       int
}

func newReceiver(e *env) *receiver {
	return &receiver{e: e, accepted: map[int64]int{}, refused: map[int64]int{}}
}

func (r *receiver) Deliver(_ context.Context, _ Parcel) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sec := (r.e.NowMs() - t0) / 1000
	r.calls++
	if r.refuseAbove > 0 && r.accepted[sec] >= r.refuseAbove {
		r.refused[sec]++
		return &Error{Class: "status", Status: 429, Reason: "too many requests"}
	}
	r.accepted[sec]++
	return nil
}

// between sums a per-second count over seconds [from, to).
func between(m map[int64]int, from, to int64) int {
	n := 0
	for s := from; s < to; s++ {
		n += m[s]
	}
	return n
}

// sim drives one stream over simulated time: every tickMs it ingests
// perTick outcomes unless the backlog holds that many already (always more
// than the stream may send, never a store-slowing pile), and in between fires the stream's timer at its due time,
// with the handlers in turn (each one a relay process).
type sim struct {
	e        *env
	hs       []*Handler
	perTick  int
	tickMs   int64
	nextRID  int
	nextTick int64
	fires    int
}

func (s *sim) ingest() {
	if s.e.backlogRows() >= uint64(s.perTick) {
		return
	}
	var os []schema.Outcome
	for range s.perTick {
		os = append(os, committed(fmt.Sprintf("r-%d", s.nextRID)))
		s.nextRID++
	}
	s.e.append(os...)
}

// run goes on until the simulated clock reaches untilMs.
func (s *sim) run(untilMs int64) {
	s.e.T.Helper()
	for {
		due := int64(-1)
		if r, ok := s.e.timer(); ok {
			due = max(r.DueAtMs, s.e.NowMs())
		}
		if s.nextTick <= untilMs && (due < 0 || s.nextTick <= due) {
			s.e.Clk.Set(max(s.nextTick, s.e.NowMs()))
			s.ingest()
			s.nextTick += s.tickMs
			continue
		}
		if due < 0 || due >= untilMs {
			s.e.Clk.Set(untilMs)
			return
		}
		s.e.Clk.Set(due)
		s.e.fire(s.hs[s.fires%len(s.hs)])
		s.fires++
	}
}

func newSim(e *env, sink Sink, processes, perTick int, tickMs int64) *sim {
	s := &sim{e: e, perTick: perTick, tickMs: tickMs, nextTick: e.NowMs()}
	for range processes {
		s.hs = append(s.hs, &Handler{Sink: sink, Clock: e.Clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	return s
}

// A stream at rate_limit 50 whose receiver takes everything makes, over a
// simulated minute, at most 50 a second plus one bucket (50) of calls, and
// at least 90 % of 50 a second, while ingest keeps adding rows faster than
// that (a row every 10 ms) and pulls nothing ahead of its tokens. Two
// handlers firing the stream in turn, two processes, share the one limit.
func TestRateLimitHoldsOverAMinuteAcrossProcesses(t *testing.T) {
	for _, processes := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d processes", processes), func(t *testing.T) {
			eachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 4, RateLimit: 50})
				rcv := newReceiver(e)
				s := newSim(e, rcv, processes, 25, 250)
				s.run(t0 + 60_000)
				got := between(rcv.accepted, 0, 60)
				t.Logf("%d calls in a simulated minute at rate_limit 50 (%.1f/s), %d fires, backlog %d", got, float64(got)/60, s.fires, e.backlogRows())
				if limit := 50*60 + 50; got > limit {
					t.Errorf("%d calls, more than %d", got, limit)
				}
				if floor := 50 * 60 * 9 / 10; got < floor {
					t.Errorf("%d calls, fewer than %d", got, floor)
				}
				// No second holds more than its own 50 and a bucket's.
				for sec, n := range rcv.accepted {
					if n > 100 {
						t.Errorf("second %d: %d calls", sec, n)
					}
				}
				// Pacing is not backing off.
				if st := e.state(); st.FailedFires != 0 || st.Throttle != nil {
					t.Errorf("state %+v", st)
				}
			})
		})
	}
}

// A trickle of outcomes, each drained at once, must not get a fresh bucket
// with every new timer: the drained stream keeps its timer, and its
// bucket, until the bucket is full again.
func TestADrainedStreamKeepsItsBucket(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 4, RateLimit: 5})
		rcv := newReceiver(e)
		// 4 outcomes every 100 ms: 40/s offered to a 5/s endpoint.
		s := newSim(e, rcv, 1, 4, 100)
		s.run(t0 + 20_000)
		got := between(rcv.accepted, 0, 20)
		t.Logf("%d calls in 20 s at rate_limit 5", got)
		if limit := 5*20 + 5; got > limit {
			t.Errorf("%d calls, more than %d", got, limit)
		}
	})
}

// A receiver that takes 20 calls a second and answers 429 to the rest
// brings a stream configured for 100/s down to near 20/s: the throttle
// halves the rate at each refusal and climbs back, slowly near the rate
// refused, so refusals become rare once it has settled. When the receiver
// stops refusing the stream returns to its configured limits.
func TestThrottleSettlesNearTheReceiversLimitAndRecovers(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 8, RateLimit: 100})
		rcv := newReceiver(e)
		rcv.refuseAbove = 20
		// 50 outcomes every 500 ms: always more than the receiver takes.
		s := newSim(e, rcv, 2, 50, 500)
		s.run(t0 + 60_000)
		first, last := between(rcv.refused, 0, 10), between(rcv.refused, 10, 60)
		rate := float64(between(rcv.accepted, 10, 60)) / 50
		t.Logf("refusals: %d in the first 10 s, %d in the next 50 s; %.1f calls/s accepted after settling; %d calls, %d fires",
			first, last, rate, rcv.calls, s.fires)
		for sec := int64(0); sec < 60; sec++ {
			if rcv.refused[sec] > 0 {
				t.Logf("second %d: %d accepted, %d refused", sec, rcv.accepted[sec], rcv.refused[sec])
			}
		}
		if st := e.state(); st.Throttle == nil {
			t.Error("not throttled while the receiver refuses")
		} else {
			t.Logf("throttle %+v", *st.Throttle)
		}
		// The band: the receiver takes at most 20/s, and a halving rate
		// that climbs slowly near where it was refused averages well above
		// the 15/s of a sawtooth between 10 and 20.
		if rate < 15 || rate > 20 {
			t.Errorf("settled at %.1f calls/s, want 15 to 20", rate)
		}
		// No storm: at most one refused call in five seconds once settled,
		// under 1 % of the calls.
		if last > 10 {
			t.Errorf("%d refusals after settling", last)
		}

		rcv.mu.Lock()
		rcv.refuseAbove = 0
		rcv.mu.Unlock()
		s.run(t0 + 120_000)
		rate = float64(between(rcv.accepted, 110, 120)) / 10
		t.Logf("after the receiver stops refusing: %.1f calls/s over the last 10 s", rate)
		if st := e.state(); st.Throttle != nil {
			t.Errorf("still throttled a minute after the last refusal: %+v", *st.Throttle)
		}
		if rate < 90 {
			t.Errorf("recovered to %.1f calls/s, want the configured 100", rate)
		}
	})
}
