package delivery

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// tracedSink answers each call as told, in turn, and records the span
// context each call's ctx holds: the one the sender's traceparent names.
type tracedSink struct {
	mu      sync.Mutex
	answers []error
	seen    []trace.SpanContext
}

func (s *tracedSink) Deliver(ctx context.Context, o Parcel) error {
	_, err := s.DeliverStatus(ctx, o)
	return err
}

func (s *tracedSink) DeliverStatus(ctx context.Context, _ Parcel) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	if len(s.answers) == 0 {
		return 204, nil
	}
	err := s.answers[0]
	s.answers = s.answers[1:]
	return 0, err
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Every call of an outcome accepted under a trace is a client span in
// that trace, a child of the span it was accepted under, linked to the
// fire that made it, numbered, with the status or the class of its
// failure; the call's context holds that span, for the traceparent the
// receiver gets. Failed twice and then delivered, the outcome has three.
func TestEachAttemptIsASpanInItsOutcomesTrace(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, URL: "https://billing.example.com:8443/hooks?token=query-secret-31b0"})
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		refused := &Error{Class: "status", Status: 503, RetryAfter: 2 * time.Second, Reason: "endpoint answered 503", Excerpt: []byte("excerpt-marker-77")}
		sink := &tracedSink{answers: []error{refused, &Error{Class: "connect", Reason: "connection refused"}}}
		h := &Handler{Sink: sink, Clock: e.Clk, Tracer: tp.Tracer(TracerName)}
		o := committed("r-1")
		o.Trace = schema.TraceParent{TraceID: [16]byte{0x0a, 15: 0x9c}, SpanID: [8]byte{0x31, 7: 0x07}, Flags: 1}
		e.append(o)
		for range 3 {
			e.fireAtDue(h)
		}
		if got := e.pending(); len(got) != 0 {
			t.Fatalf("still pending: %v", got)
		}

		attempts := spansNamed(exp, "POST")
		fires := map[trace.SpanID]tracetest.SpanStub{}
		for _, f := range spansNamed(exp, fireSpanName) {
			fires[f.SpanContext.SpanID()] = f
		}
		if len(attempts) != 3 || len(fires) != 3 {
			t.Fatalf("%d attempt spans and %d fire spans, want 3 of each", len(attempts), len(fires))
		}
		wantStatus := []int64{503, 0, 204}
		wantError := []string{"503", "connect", ""}
		wantResult := []string{"failed", "failed", "delivered"}
		for i, s := range attempts {
			a := spanAttrs(s)
			if s.SpanKind != trace.SpanKindClient || s.SpanContext.TraceID() != o.Trace.TraceID || s.Parent.SpanID() != o.Trace.SpanID || !s.Parent.IsRemote() {
				t.Errorf("attempt %d: kind %v, trace %s, parent %s: not a client span under the outcome's", i+1, s.SpanKind, s.SpanContext.TraceID(), s.Parent.SpanID())
			}
			if got := a["relay.attempt"].AsInt64(); got != int64(i+1) {
				t.Errorf("attempt %d numbered %d", i+1, got)
			}
			if got := a["http.request.resend_count"].AsInt64(); got != int64(i) {
				t.Errorf("attempt %d: resend count %d", i+1, got)
			}
			if got := a["http.response.status_code"].AsInt64(); got != wantStatus[i] {
				t.Errorf("attempt %d: status %d, want %d", i+1, got, wantStatus[i])
			}
			if got := a["error.type"].AsString(); got != wantError[i] {
				t.Errorf("attempt %d: error.type %q, want %q", i+1, got, wantError[i])
			}
			for k, v := range map[attribute.Key]string{
				"relay.reservation_id": "r-1", "relay.endpoint": ep,
				"http.request.method": "POST", "server.address": "billing.example.com",
				"url.full": "https://billing.example.com:8443/hooks?token=REDACTED",
			} {
				if got := a[k].AsString(); got != v {
					t.Errorf("attempt %d: %s = %q, want %q", i+1, k, got, v)
				}
			}
			if got := a["server.port"].AsInt64(); got != 8443 {
				t.Errorf("attempt %d: server.port %d", i+1, got)
			}
			if len(s.Links) != 1 {
				t.Fatalf("attempt %d has %d links, want its fire", i+1, len(s.Links))
			}
			fire, ok := fires[s.Links[0].SpanContext.SpanID()]
			if !ok {
				t.Fatalf("attempt %d links to no fire span", i+1)
			}
			if fa := spanAttrs(fire); fa["relay.fire.result"].AsString() != wantResult[i] || fa["relay.fire.rows"].AsInt64() != 1 ||
				fa["relay.namespace"].AsString() != e.P.Namespace || fa["relay.endpoint"].AsString() != ep || fire.Parent.IsValid() {
				t.Errorf("attempt %d's fire: %v, parent %v", i+1, fire.Attributes, fire.Parent)
			}
			if !sink.seen[i].Equal(s.SpanContext) {
				t.Errorf("call %d ran under %v, not its attempt's span %v", i+1, sink.seen[i], s.SpanContext)
			}
		}
		first := spanAttrs(attempts[0])
		if first["relay.attempt.retry_after_ms"].AsInt64() != 2000 || !first["relay.attempt.retry_after_honoured"].AsBool() {
			t.Errorf("retry-after: %v %v", first["relay.attempt.retry_after_ms"], first["relay.attempt.retry_after_honoured"])
		}
		for _, s := range exp.GetSpans() {
			for _, kv := range s.Attributes {
				if v := kv.Value.String(); strings.Contains(v, "query-secret") || strings.Contains(v, "excerpt-marker") {
					t.Errorf("span %s: %s = %q holds a secret or the answer", s.Name, kv.Key, v)
				}
			}
		}
	})
}

// An outcome accepted untraced has its attempts under the fire's span;
// without a tracer no span is made and a call's context holds none.
func TestAnUntracedOutcomesAttemptsAreTheFiresAndNoTracerMakesNone(t *testing.T) {
	eachBackend(t, func(t *testing.T, e *env) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		sink := &tracedSink{}
		e.seed("r-1")
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk, Tracer: tp.Tracer(TracerName)})
		attempts, fires := spansNamed(exp, "POST"), spansNamed(exp, fireSpanName)
		if len(attempts) != 1 || len(fires) != 1 {
			t.Fatalf("%d attempts, %d fires", len(attempts), len(fires))
		}
		if attempts[0].Parent.SpanID() != fires[0].SpanContext.SpanID() || attempts[0].SpanContext.TraceID() != fires[0].SpanContext.TraceID() {
			t.Errorf("attempt's parent %v, want the fire %v", attempts[0].Parent, fires[0].SpanContext)
		}

		o := committed("r-2")
		o.Trace = schema.TraceParent{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1}
		e.append(o)
		untraced := &tracedSink{}
		e.fireAtDue(&Handler{Sink: untraced, Clock: e.Clk})
		if len(untraced.seen) != 1 || untraced.seen[0].IsValid() {
			t.Errorf("untraced handler's call ran under %v", untraced.seen)
		}
	})
}
