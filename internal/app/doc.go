// Package app assembles a whole relay from a Config: the store on Redis
// (or an embedded miniredis), signing, API auth, the SSRF-guarded channel,
// the delivery driver, the backlog sampler, tracing and the API with its
// metrics. It reads no flag and no environment variable: cmd/relay does,
// but for the OpenTelemetry ones (OTEL_*), which the SDK behind
// internal/tracing reads itself.
package app
