package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// answering is a StatusSink that takes every parcel with one 2xx status.
type answering struct {
	capture
	status int
}

func (a *answering) DeliverStatus(ctx context.Context, o Parcel) (int, error) {
	return a.status, a.Deliver(ctx, o)
}

// With retention, a delivered row's log entry keeps when it was delivered,
// how long the call took and the status it got; its attempt row stays.
func TestARetainedDeliveryKeepsItsStatusAndTime(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		key, _ := e.logKey("a")
		e.fire(&Handler{Sink: &capture{fail: &Error{Class: "status", Status: 503}}, Clock: e.Clk, Retention: time.Hour})
		e.Clk.Set(e.timerDue())
		sink := &answering{status: 204}
		e.fire(&Handler{Sink: sink, Clock: e.Clk, Retention: time.Hour})
		if got := sink.rids(); len(got) != 1 {
			t.Fatalf("delivered %v", got)
		}
		v, found := e.Get(key)
		if !found {
			t.Fatal("log row deleted though retained")
		}
		l, err := schema.DecodeLog(v)
		if err != nil {
			t.Fatal(err)
		}
		en, _ := l.Entry(ep)
		if en.State != schema.EntryDelivered || en.Status != 204 || en.AtMs != e.NowMs() || !en.Attempts {
			t.Errorf("entry %+v, want delivered now with 204 and its attempt row kept", en)
		}
		if _, found := e.attempts("a"); !found {
			t.Error("attempt row deleted though retained")
		}
	})
}

// Without retention the row goes at acknowledgement, as it always did.
func TestWithoutRetentionADeliveredRowLeavesNothing(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a")
		key, _ := e.logKey("a")
		e.fire(&Handler{Sink: &answering{status: 200}, Clock: e.Clk})
		if _, found := e.Get(key); found {
			t.Error("log row kept without retention")
		}
	})
}
