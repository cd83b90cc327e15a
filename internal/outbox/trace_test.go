package outbox_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
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

// Each batch an ingest sends to the store is a span under the request's:
// one that failed its guards says so, and the batch that follows counts
// it as a retry. A combined append's batches link the other requests.
func TestEachIngestBatchIsASpanOfTheRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		spy := &spyStore{NamespaceStore: e.St}
		e.App.Store, e.App.Tracer = spy, tp.Tracer(outbox.TracerName)
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		spy.beforeApply = func(store.Batch) {
			// Another ingest lands first: the batch fails its guard on
			// the sequence.
			spy.beforeApply = nil
			other := &outbox.Appender{Store: e.St, Clock: e.Clk}
			if _, err := other.Append(e.Ctx, e.P, []schema.Outcome{committed("r-other")}); err != nil {
				t.Error(err)
			}
		}
		ctx, request := tp.Tracer("test").Start(e.Ctx, "request")
		st, err := e.App.Append(ctx, e.P, []schema.Outcome{committed("r-1")})
		request.End()
		if err != nil || st[0].Code != outbox.Accepted {
			t.Fatalf("append: %v %v", st, err)
		}
		var batches []tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.Name == "ingest batch" {
				batches = append(batches, s)
			}
		}
		if len(batches) != 2 {
			t.Fatalf("%d batch spans, want the failed one and its retry", len(batches))
		}
		for i, s := range batches {
			a := map[attribute.Key]attribute.Value{}
			for _, kv := range s.Attributes {
				a[kv.Key] = kv.Value
			}
			if s.Parent.SpanID() != request.SpanContext().SpanID() {
				t.Errorf("batch %d: parent %v, want the request", i, s.Parent)
			}
			if a["relay.batch.retry"].AsInt64() != int64(i) || a["relay.batch.committed"].AsBool() != (i == 1) ||
				a["relay.batch.outcomes"].AsInt64() != 1 || a["relay.batch.operations"].AsInt64() < 4 || a["relay.namespace"].AsString() != e.P.Namespace {
				t.Errorf("batch %d: %v", i, s.Attributes)
			}
		}

		// Two requests combined: the batch is the first's, linked to the
		// second's.
		exp.Reset()
		_, second := tp.Tracer("test").Start(e.Ctx, "second request")
		ctx = outbox.WithRequests(ctx, second.SpanContext())
		if st, err := e.App.Append(ctx, e.P, []schema.Outcome{committed("r-2")}); err != nil || st[0].Code != outbox.Accepted {
			t.Fatalf("append: %v %v", st, err)
		}
		spans := exp.GetSpans()
		if len(spans) != 1 || len(spans[0].Links) != 1 || spans[0].Links[0].SpanContext.SpanID() != second.SpanContext().SpanID() {
			t.Errorf("combined batch: %+v", spans)
		}
	})
}
