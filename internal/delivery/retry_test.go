package delivery

import (
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// failing is a sink that refuses every call with a 503.
func failing() *capture {
	return &capture{fail: &Error{Class: "status", Status: 503, Reason: "unavailable"}}
}

// backOff fails the stream's fires until its next one is due a while off.
func (e *env) backOff() {
	e.T.Helper()
	for range 4 {
		e.fireAtDue(&Handler{Sink: failing(), Clock: e.Clk})
	}
	if e.state().FailedFires != 4 || e.timerDue() <= e.NowMs() {
		e.T.Fatalf("not backing off: state %+v, due %d at %d", e.state(), e.timerDue(), e.NowMs())
	}
}

// A retry's rows all go at the very next fire, which without it would not
// have come for seconds.
func TestARetriedStreamDeliversEveryPendingRowAtTheNextFire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 4})
		e.seed("a", "b", "c")
		e.backOff()
		ok := &capture{}
		e.fire(&Handler{Sink: ok, Clock: e.Clk})
		if len(ok.rids()) != 0 {
			t.Fatalf("a backing-off stream was called before its time: %v", ok.rids())
		}
		res, err := (&outbox.Admin{Store: e.St, Clock: e.Clk}).Retry(e.Ctx, e.P, ep, false)
		if err != nil || res.Rows != 3 {
			t.Fatalf("retry %+v %v", res, err)
		}
		e.fire(&Handler{Sink: ok, Clock: e.Clk})
		// Four calls in flight: in any order.
		if got := slices.Sorted(slices.Values(ok.rids())); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("delivered %v after the retry, want every pending row", got)
		}
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d after the retry's fire", e.backlogRows())
		}
	})
}

// Enabled and made due in one step, a disabled endpoint's backing-off
// stream delivers at the next fire.
func TestAnEnableAndDeliverDeliversAtTheNextFire(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.seed("a", "b")
		e.backOff()
		adm := &outbox.Admin{Store: e.St, Clock: e.Clk}
		if _, err := adm.SetEnabled(e.Ctx, e.P, ep, false); err != nil {
			t.Fatal(err)
		}
		ok := &capture{}
		e.fireAtDue(&Handler{Sink: ok, Clock: e.Clk})
		if len(ok.rids()) != 0 {
			t.Fatalf("a disabled endpoint was called: %v", ok.rids())
		}
		if _, err := adm.Retry(e.Ctx, e.P, ep, false); err == nil {
			t.Fatal("a retry of a disabled endpoint without enable was taken")
		}
		if _, err := adm.Retry(e.Ctx, e.P, ep, true); err != nil {
			t.Fatal(err)
		}
		e.fire(&Handler{Sink: ok, Clock: e.Clk})
		if got := ok.rids(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("delivered %v after enable and deliver", got)
		}
	})
}
