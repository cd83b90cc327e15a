package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/tracing"
)

func logLine(t *testing.T, buf *bytes.Buffer) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(buf.Bytes(), &v); err != nil {
		t.Fatalf("%v: %s", err, buf)
	}
	buf.Reset()
	return v
}

// A line logged with a span's context names its trace and span; one
// logged without names neither, and the handler's own attributes stay.
func TestALogLineNamesItsSpan(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil))).With("component", "api")
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()

	log.InfoContext(ctx, "in a span", "n", 1)
	v := logLine(t, &buf)
	sc := span.SpanContext()
	if v["trace_id"] != sc.TraceID().String() || v["span_id"] != sc.SpanID().String() {
		t.Errorf("line %v, want trace_id %s and span_id %s", v, sc.TraceID(), sc.SpanID())
	}
	if v["component"] != "api" || v["n"] != 1.0 || v["msg"] != "in a span" {
		t.Errorf("line %v lost its own attributes", v)
	}

	log.InfoContext(context.Background(), "outside")
	v = logLine(t, &buf)
	if _, ok := v["trace_id"]; ok {
		t.Errorf("line outside a span names a trace: %v", v)
	}
	if _, ok := v["span_id"]; ok {
		t.Errorf("line outside a span names a span: %v", v)
	}
}

// A producer's trace that was not sampled here still names the line: the
// context holds a valid span context that records nothing.
func TestALogLineNamesAnUnsampledTrace(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil)))
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		Remote:  true,
	})
	log.WarnContext(trace.ContextWithRemoteSpanContext(context.Background(), sc), "unsampled")
	v := logLine(t, &buf)
	if v["trace_id"] != "0102030405060708090a0b0c0d0e0f10" || v["span_id"] != "0102030405060708" {
		t.Errorf("line %v", v)
	}
}

// The handler adds to a copy: a record handed to it is the caller's, and
// another handler given the same record sees no trace attributes.
func TestTheLogHandlerLeavesTheRecordAlone(t *testing.T) {
	var buf bytes.Buffer
	h := tracing.LogHandler(slog.NewJSONHandler(&buf, nil))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	ctx, span := tp.Tracer("test").Start(context.Background(), "work")
	defer span.End()
	r := slog.NewRecord(time.Time{}, slog.LevelInfo, "m", 0)
	r.AddAttrs(slog.Int("a", 1), slog.Int("b", 2), slog.Int("c", 3), slog.Int("d", 4), slog.Int("e", 5), slog.Int("f", 6))
	if err := h.Handle(ctx, r); err != nil {
		t.Fatal(err)
	}
	n := 0
	r.Attrs(func(a slog.Attr) bool {
		n++
		return a.Key != "trace_id" && a.Key != "span_id"
	})
	if n != 6 {
		t.Errorf("the caller's record holds %d attributes after Handle, want its 6", n)
	}
}
