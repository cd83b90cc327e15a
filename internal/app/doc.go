// Package app assembles a whole relay from a Config: the store on Redis
// (or an embedded miniredis), signing, API auth, the SSRF-guarded channel,
// the delivery driver, the backlog sampler and the API with its metrics.
// It reads no flag and no environment variable: cmd/relay does.
package app
