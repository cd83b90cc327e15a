package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name where neither OTEL_SERVICE_NAME nor
// OTEL_RESOURCE_ATTRIBUTES names one.
const DefaultServiceName = "relay"

// The variables that turn tracing on or off; the SDK reads every other one.
const (
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envDisabled       = "OTEL_SDK_DISABLED"
)

// Tracing is a process's tracer provider: the SDK's, exporting over
// OTLP/HTTP, or a no-op one when tracing is off.
type Tracing struct {
	provider trace.TracerProvider
	// sdk is nil when tracing is off: no exporter exists then.
	sdk *sdktrace.TracerProvider
}

// Enabled reports whether the OTEL_* variables turn tracing on: an OTLP
// endpoint is set (for every signal or for traces), and OTEL_SDK_DISABLED
// is not true.
func Enabled() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(envDisabled)), "true") {
		return false
	}
	return os.Getenv(envEndpoint) != "" || os.Getenv(envTracesEndpoint) != ""
}

// New sets tracing up as the OTEL_* variables say, naming the process
// service.version version. Off, it creates no exporter and its provider
// records nothing. On, the exporter (OTLP/HTTP, protobuf), the sampler,
// the batch processor and the resource read their variables themselves;
// the SDK's own errors (a failed export) go to log, as warnings. The
// provider is not made global: the caller hands it to what traces.
func New(ctx context.Context, version string, log *slog.Logger) (*Tracing, error) {
	if !Enabled() {
		return &Tracing{provider: noop.NewTracerProvider()}, nil
	}
	if log == nil {
		log = slog.Default()
	}
	res, err := resource.New(ctx,
		// First, so that OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
		// detected after, override them.
		resource.WithAttributes(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		// A malformed OTEL_RESOURCE_ATTRIBUTES: relay starts, as it would
		// without tracing, with the attributes that did parse.
		log.Warn("tracing: part of the resource could not be read", "error", err)
		if res == nil {
			res = resource.NewSchemaless(semconv.ServiceName(DefaultServiceName), semconv.ServiceVersion(version))
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	// The SDK's errors are otherwise printed by the standard log package,
	// apart from relay's log.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing failed", "error", err)
	}))
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracing{provider: sdk, sdk: sdk}, nil
}

// On reports whether spans are exported.
func (t *Tracing) On() bool { return t.sdk != nil }

// TracerProvider is the provider to trace with: a no-op one when off.
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.provider }

// Shutdown exports the spans still held and stops the exporter, within
// ctx. Spans ended after it are dropped. A second call does nothing.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}
