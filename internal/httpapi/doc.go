// Package httpapi is relay's REST API: routing, JWT auth, strict request
// decoding and RFC 9457 problems, in front of the outbox. api/openapi.yaml
// is its contract.
package httpapi
