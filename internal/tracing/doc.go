// Package tracing sets up relay's OpenTelemetry traces from the standard
// OTEL_* variables, which the SDK and its OTLP/HTTP exporter read
// themselves: traces are exported only where an OTLP endpoint is set, and
// are otherwise a no-op that records nothing. Its log handler names the
// trace and span of every line logged with a context that holds one.
package tracing
