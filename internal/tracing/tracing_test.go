package tracing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/tracing"
)

// unsetOTEL clears every variable that turns tracing on or shapes it, for
// the test.
func unsetOTEL(t *testing.T) {
	for _, v := range []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	} {
		t.Setenv(v, "")
	}
}

// Off, whether for want of an endpoint or by OTEL_SDK_DISABLED, nothing
// is exported: there is no exporter, the provider is the no-op one, and a
// span started on it records nothing and is no span of any trace.
func TestOffMeansNoExporterAndNoSpan(t *testing.T) {
	var exports atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		exports.Add(1)
	}))
	defer collector.Close()
	for _, c := range []struct {
		name string
		env  map[string]string
	}{
		{"no endpoint", nil},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL, "OTEL_SDK_DISABLED": "true"}},
		{"disabled, traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.URL + "/v1/traces", "OTEL_SDK_DISABLED": "TRUE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			unsetOTEL(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if tracing.Enabled() {
				t.Fatal("Enabled says on")
			}
			tr, err := tracing.New(context.Background(), "v0.1.0", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tr.On() {
				t.Fatal("On says on")
			}
			if _, ok := tr.TracerProvider().(noop.TracerProvider); !ok {
				t.Fatalf("provider %T, want the no-op one", tr.TracerProvider())
			}
			ctx, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "work", trace.WithSpanKind(trace.SpanKindServer))
			span.End()
			if span.IsRecording() || span.SpanContext().IsValid() || trace.SpanContextFromContext(ctx).IsValid() {
				t.Errorf("a span off: recording %v, context %v", span.IsRecording(), span.SpanContext())
			}
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := exports.Load(); n != 0 {
				t.Errorf("%d exports off", n)
			}
		})
	}
}

// On, a span ends up at the collector, exported as OTLP/HTTP protobuf on
// Shutdown, with the resource the variables make of service.name (relay by
// default), service.version and OTEL_RESOURCE_ATTRIBUTES.
func TestOnExportsToTheEndpointWithTheResource(t *testing.T) {
	for _, c := range []struct {
		name, serviceName string
		env               map[string]string
	}{
		{"defaults", "relay", nil},
		{"service name", "relay-eu", map[string]string{"OTEL_SERVICE_NAME": "relay-eu"}},
		{"resource attributes", "relay-rs", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=relay-rs,deployment.environment.name=test"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			unsetOTEL(t)
			collector := relaytest.NewOTLPReceiver(t, nil)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			tr, err := tracing.New(context.Background(), "v0.1.0", nil)
			if err != nil {
				t.Fatal(err)
			}
			if !tr.On() {
				t.Fatal("On says off")
			}
			_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "work")
			if !span.IsRecording() {
				t.Fatal("the span records nothing")
			}
			span.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := collector.Spans()
			if len(spans) != 1 || spans[0].Span.GetName() != "work" {
				t.Fatalf("%d spans exported, want the one: %v", len(spans), spans)
			}
			attrs := spans[0].Resource.GetAttributes()
			if got := relaytest.Attr(attrs, "service.name").GetStringValue(); got != c.serviceName {
				t.Errorf("service.name %q, want %q", got, c.serviceName)
			}
			if got := relaytest.Attr(attrs, "service.version").GetStringValue(); got != "v0.1.0" {
				t.Errorf("service.version %q", got)
			}
			if _, ok := c.env["OTEL_RESOURCE_ATTRIBUTES"]; ok {
				if got := relaytest.Attr(attrs, "deployment.environment.name").GetStringValue(); got != "test" {
					t.Errorf("deployment.environment.name %q", got)
				}
			}
		})
	}
}

// The sampler is the SDK's, as OTEL_TRACES_SAMPLER says: always_off
// samples nothing, while parentbased_always_on (the default) follows a
// sampled parent.
func TestTheSamplerFollowsTheVariables(t *testing.T) {
	unsetOTEL(t)
	collector := relaytest.NewOTLPReceiver(t, nil)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.URL+relaytest.TracesPath)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	tr, err := tracing.New(context.Background(), "v0.1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tr.TracerProvider().Tracer("test").Start(context.Background(), "work")
	if span.IsRecording() {
		t.Error("always_off: the span records")
	}
	span.End()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(collector.Spans()); n != 0 {
		t.Errorf("always_off: %d spans exported", n)
	}
}
