package delivery

import (
	"context"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func (e *env) counters() schema.Counters {
	e.T.Helper()
	s, err := (&outbox.Admin{Store: e.St, Clock: e.Clk}).Endpoint(e.Ctx, e.P, ep)
	if err != nil {
		e.T.Fatal(err)
	}
	return s.Counters
}

// failOn fails the calls of the rids given, with err, and delivers the rest.
func failOn(err error, rids ...string) Sink {
	fail := map[string]bool{}
	for _, r := range rids {
		fail[r] = true
	}
	return SinkFunc(func(_ context.Context, p Parcel) error {
		if fail[p.Outcome.ReservationID] {
			return err
		}
		return nil
	})
}

// One completion counts both what it delivered and the calls that failed,
// in one Add (a row takes one Add a batch), on an endpoint stored before
// streams kept counters.
func TestAFireCountsItsDeliveriesAndEachFailedCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 1})
		e.seed("a", "b", "c")
		e.fire(&Handler{Sink: failOn(&Error{Class: "status", Status: 503}, "b"), Clock: e.Clk})
		if c := e.counters(); c != (schema.Counters{Delivered: 1, FailedAttempts: 1}) {
			t.Fatalf("after a delivered and b failed: %+v", c)
		}
		// A fire that fails every call: counted from the notes alone.
		e.fireAtDue(&Handler{Sink: failOn(&Error{Class: "status", Status: 503}, "b", "c"), Clock: e.Clk})
		if c := e.counters(); c != (schema.Counters{Delivered: 1, FailedAttempts: 2}) {
			t.Fatalf("after c failed: %+v", c)
		}
		for len(e.pending()) > 0 {
			e.fireAtDue(&Handler{Sink: failOn(nil), Clock: e.Clk})
		}
		if c := e.counters(); c != (schema.Counters{Delivered: 3, FailedAttempts: 2}) {
			t.Fatalf("after all delivered: %+v", c)
		}
	})
}

// A 410 counts as a failed call, in the completion that disables the
// endpoint.
func TestAGoneEndpointCountsItsFailedCall(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 1})
		e.seed("a", "b")
		e.fire(&Handler{Sink: failOn(&Error{Class: "gone", Status: 410, Gone: true, Reason: "gone"}, "b"), Clock: e.Clk})
		if e.endpoint().Enabled {
			t.Fatal("endpoint still enabled after a 410")
		}
		if c := e.counters(); c != (schema.Counters{Delivered: 1, FailedAttempts: 1}) {
			t.Fatalf("counters %+v", c)
		}
	})
}
