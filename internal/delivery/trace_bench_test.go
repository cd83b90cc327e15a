package delivery

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// marshalClient is an OTLP client that encodes each export as the HTTP
// exporter does and sends it nowhere, so the benchmark counts the SDK's
// and the encoding's work, not a collector's.
type marshalClient struct{ bytes int }

func (*marshalClient) Start(context.Context) error { return nil }
func (*marshalClient) Stop(context.Context) error  { return nil }
func (c *marshalClient) UploadTraces(_ context.Context, spans []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: spans})
	c.bytes += len(b)
	return err
}

// BenchmarkAnAttemptsSpan is what tracing adds to one call: its span
// started, ended, batched and encoded for export, in a fire of 100 calls.
func BenchmarkAnAttemptsSpan(b *testing.B) {
	exp, err := otlptrace.New(context.Background(), &marshalClient{})
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBlocking()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	h := &Handler{Tracer: tp.Tracer(TracerName)}
	s := &stream{ns: "acme", endpoint: "billing", ep: schema.Endpoint{URL: "https://billing.example.com/hooks?token=abc"}}
	r := &pendingRow{rid: "r-7f3a", outcome: schema.Outcome{Trace: schema.TraceParent{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1}}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 100 {
		s.fire = h.startFire(ctx, s, 100)
		for range min(100, b.N-i) {
			_, span := s.fire.startAttempt(ctx, r)
			endAttempt(span, 204, nil, false)
		}
		s.fire.end(&calls{})
	}
	b.StopTimer()
	_ = tp.ForceFlush(context.Background())
}
