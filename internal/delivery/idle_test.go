package delivery

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// An idle process must cost Redis at most this many commands a second: a
// serverless Redis bills every one.
const idleCommandsPerSecond = 10

// What an idle process issues by default: a full poll (one read per bucket)
// every poll interval, and the backlog sampler's walk of every bucket's due
// index every pass.
func TestAnIdleProcessCostsRedisAtMostItsBudget(t *testing.T) {
	t.Parallel()
	perSecond := float64(redisstore.DefaultBuckets)/DefaultPollInterval.Seconds() +
		float64(redisstore.DefaultBuckets)/DefaultBacklogEvery.Seconds()
	if perSecond > idleCommandsPerSecond {
		t.Fatalf("an idle process issues %.1f commands/s (polls every %v, samples every %v), want at most %d",
			perSecond, DefaultPollInterval, DefaultBacklogEvery, idleCommandsPerSecond)
	}
}

// failsFirst fails the first call of each row and delivers every later one.
type failsFirst struct {
	mu        sync.Mutex
	calls     map[string]int
	delivered chan string
}

func (s *failsFirst) Deliver(_ context.Context, o Parcel) error {
	s.mu.Lock()
	s.calls[o.Outcome.ReservationID]++
	n := s.calls[o.Outcome.ReservationID]
	s.mu.Unlock()
	if n == 1 {
		return errors.New("refused")
	}
	s.delivered <- o.Outcome.ReservationID
	return nil
}

// waits hands the test each wait a driver asks for, with the channel that
// ends it.
type waits struct {
	asked chan time.Duration
	ends  chan time.Time
}

func newWaits() *waits {
	return &waits{asked: make(chan time.Duration, 16), ends: make(chan time.Time, 1)}
}

func (w *waits) after(d time.Duration) <-chan time.Time {
	w.asked <- d
	return w.ends
}

// awaitWait returns once the driver asks to sleep exactly d.
func (w *waits) awaitWait(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.After(patience)
	for {
		select {
		case got := <-w.asked:
			if got == d {
				return
			}
		case <-deadline:
			t.Fatalf("the driver never asked to sleep %v", d)
		}
	}
}

// A backoff is known to the process that wrote it: the driver sleeps until
// it ends and fires it then, without reading every due index again.
func TestABackoffIsFiredWhenItEndsWithoutAFullPoll(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(time.Now().UnixMilli())
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.seed("acme", "r-1")
		sink := &failsFirst{calls: map[string]int{}, delivered: make(chan string, 1)}
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		cs := &counting{DueStore: f.st, calls: map[string]int{}}
		soon := newWaits()
		f.start(Config{Store: cs, Handlers: reg, Clock: clk, until: soon.after,
			after: func(time.Duration) <-chan time.Time { return nil }}) // no full poll but the first
		// The first fire fails and backs off; the driver learns when to.
		var dueMs int64
		deadline := time.After(patience)
		for dueMs == 0 {
			select {
			case d := <-soon.asked:
				row, found, err := timers.Find(f.ctx, f.st, store.Partition{Namespace: "acme"}, timers.KindOutcomeDelivery, "billing")
				if err != nil {
					t.Fatal(err)
				}
				if found && row.Lease == nil && clk.Now().UnixMilli()+d.Milliseconds() == row.DueAtMs && row.DueAtMs > clk.Now().UnixMilli() {
					dueMs = row.DueAtMs
				}
			case <-deadline:
				t.Fatal("the driver never slept until the backoff ends")
			}
		}
		clk.Set(dueMs)
		soon.ends <- clk.Now()
		select {
		case <-sink.delivered:
		case <-time.After(patience):
			t.Fatal("the row was not delivered when its backoff ended")
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.calls["dueall"] != 1 {
			t.Fatalf("due indexes read %d times, want only the start's 1", cs.calls["dueall"])
		}
	})
}

// A timer another process wrote, due now or later, is found by the next
// full poll, and one due later is fired when it falls due.
func TestATimerAnotherProcessWroteIsFoundByTheNextFullPoll(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(time.Now().UnixMilli())
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.endpoint("later", "billing", schema.Endpoint{Enabled: true})
		sink := newTally(2)
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		full, soon := newWaits(), newWaits()
		f.start(Config{Store: f.st, Handlers: reg, Clock: clk, after: full.after, until: soon.after})
		full.awaitWait(t, DefaultPollInterval)
		// Written as another process would, without waking this driver.
		f.seed("acme", "r-1")
		f.seed("later", "r-2")
		const in = 5 * time.Second
		f.dueAt("later", clk.Now().Add(in).UnixMilli())
		full.ends <- clk.Now()
		soon.awaitWait(t, in)
		clk.Advance(in)
		soon.ends <- clk.Now()
		sink.wait(t)
	})
}
