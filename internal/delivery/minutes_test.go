package delivery

import (
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// minutesSum is the stream's last hour, summed.
func (e *env) minutesSum() schema.Minute {
	e.T.Helper()
	ms, err := (&outbox.Admin{Store: e.St, Clock: e.Clk}).PerMinute(e.Ctx, e.P, ep, e.Clk.Now().UnixMilli())
	if err != nil {
		e.T.Fatal(err)
	}
	var sum schema.Minute
	for _, m := range ms {
		sum.Delivered += m.Delivered
		sum.Failed += m.Failed
	}
	return sum
}

// Real fires count their deliveries and failed calls in the minutes as in
// the lifetime counters: a completion that delivers and fails in the same
// minute joins the two into one Add, and over the hour the minutes add up
// to the counters.
func TestFiresCountTheirMinutesAsTheirCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 1})
		e.seed("a", "b", "c")
		e.fire(&Handler{Sink: failOn(&Error{Class: "status", Status: 503}, "b"), Clock: e.Clk})
		if m := e.minutesSum(); m.Delivered != 1 || m.Failed != 1 {
			t.Fatalf("after a delivered and b failed: %+v", m)
		}
		e.fireAtDue(&Handler{Sink: failOn(&Error{Class: "status", Status: 503}, "b", "c"), Clock: e.Clk})
		for len(e.pending()) > 0 {
			e.fireAtDue(&Handler{Sink: failOn(nil), Clock: e.Clk})
		}
		c, m := e.counters(), e.minutesSum()
		if m.Delivered != c.Delivered || m.Failed != c.FailedAttempts || c != (schema.Counters{Delivered: 3, FailedAttempts: 2}) {
			t.Fatalf("minutes %+v, counters %+v", m, c)
		}
	})
}
