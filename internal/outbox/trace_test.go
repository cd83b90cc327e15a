package outbox_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// An outcome accepted under a trace is read back with it, by the reads a
// delivery fire makes, on every stream; one accepted untraced has none.
// Sent again under another trace it is the same outcome (a duplicate),
// and keeps the trace it was accepted under.
func TestAnOutcomeKeepsTheTraceItWasAcceptedUnder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		first := schema.TraceParent{TraceID: [16]byte{0x0a, 15: 0x9c}, SpanID: [8]byte{7: 0x31}, Flags: 1}
		traced, plain := committed("r-traced"), committed("r-plain")
		traced.Trace = first
		if got := codes(e.Append(traced, plain)); got[0] != outbox.Accepted || got[1] != outbox.Accepted {
			t.Fatalf("append: %v", got)
		}
		again := committed("r-traced")
		again.Trace = schema.TraceParent{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1}
		if got := codes(e.Append(again)); got[0] != outbox.Duplicate {
			t.Fatalf("the same outcome under another trace: %v, want duplicate", got)
		}
		for _, ep := range []string{"audit", "billing"} {
			var refs []outbox.StreamRef
			for _, q := range outboxtest.Queue(t, e.St, e.P, ep) {
				refs = append(refs, outbox.StreamRef{Seq: q.Seq, RID: q.RID, Logged: q.Logged})
			}
			rows, err := outbox.ReadStreamRows(e.Ctx, e.St, e.P, ep, refs)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 2 {
				t.Fatalf("%s: %d rows", ep, len(rows))
			}
			for _, r := range rows {
				want := schema.TraceParent{}
				if r.Outcome.ReservationID == "r-traced" {
					want = first
				}
				if r.Err != nil || r.Outcome.Trace != want {
					t.Errorf("%s %s: trace %+v (%v), want %+v", ep, r.Outcome.ReservationID, r.Outcome.Trace, r.Err, want)
				}
			}
		}
	})
}
