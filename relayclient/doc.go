// Package relayclient is a Go client of relay's REST API, for producers
// (ingest outcomes) and operators (endpoints, the outbox view, replay,
// health). api/openapi.yaml is the contract; the types here mirror its JSON.
// It depends on the standard library only, so producers can import it alone:
// it is a module of its own (github.com/hookrelay/relay/relayclient, Go 1.22
// or later) that requires no other module.
//
//	c, err := relayclient.New("https://relay.example.com", relayclient.Options{Token: token})
//	if err != nil { ... }
//	results, err := c.IngestAll(ctx, "acme", outcomes)
//
// Errors the API answers are *Problem (RFC 9457): use errors.As, or
// ProblemType to branch on the stable type URI. No error holds the token or
// a request body.
//
// Retries. Every /v1 write of relay is one atomic step, so a request answered
// 503 (Redis away, the namespace contended, the connection limit) may be sent
// again as it is. The client does so after the answer's Retry-After, up to
// Options.MaxAttempts times, waiting at most Options.MaxRetryWait each time
// and never past its context. An ingest retried sends the same bytes, so the
// outcomes a first attempt stored answer duplicate, never a second copy.
// Transport errors are returned, not retried: the same call may be repeated.
//
// Redirects are never followed, so the token goes only to the base URL's
// host; every answer is read up to MaxResponseBytes.
package relayclient
