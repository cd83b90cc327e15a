// Package hookverify verifies webhooks sent by relay, for receivers: the
// mkit-hook v2 scheme (Ed25519 with relay's published key list, an audience,
// a namespace, a validity window of at most 300 s and a nonce replay cache)
// and Standard Webhooks (HMAC-SHA256 with a whsec_ secret). It depends only
// on the standard library and BLAKE3, so receivers can import it alone.
//
// A receiver fetches relay's key list from /.well-known/mkit-hook-keys.json
// of the relay it trusts (FetchKeyList: https, or plain http from a loopback
// relay; no redirect), then wraps its handler, naming the relay namespace
// whose webhooks it takes:
//
//	keys, err := hookverify.FetchKeyList(ctx, "https://relay.example.com/.well-known/mkit-hook-keys.json")
//	if err != nil { ... }
//	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}}
//	if err := v.Check(); err != nil { ... }
//	http.Handle("/hooks/relay", hookverify.Middleware(v, handler))
//
// NewMiddleware is the same middleware in the shape routers take
// (r.Use(hookverify.NewMiddleware(v)) with chi). A KeyListRefresher keeps
// the keys current across relay's key rotations; EitherVerifier serves
// mkit-hook and Standard Webhooks endpoints at one URL.
//
// The namespace matters because one relay key signs the webhooks of every
// namespace (tenant) and any tenant may register any URL: without the check,
// another tenant's webhooks, sent to this URL, would verify. mkit-hook v1
// signed no namespace and is refused.
//
// Only the origin and path of the request are signed, not its query: do not
// authorise on query parameters. A verified request may still be a retry of
// one already handled (relay delivers at least once, each attempt signed
// afresh), so handlers deduplicate per endpoint, the URL relay posts to (give
// each registration its own URL): mkit-hook by the body's data.namespace and
// data.reservation_id (a reservation id is unique only within its
// namespace); Standard Webhooks by webhook-id. A request of a namespace not
// accepted is refused before it reaches the handler, so it cannot take a
// reservation id first.
//
// Standard Webhooks endpoints need no namespace check: each has its own
// secret, which no other tenant holds.
//
// Importing this package builds in the standard library, BLAKE3 and its
// CPU feature detection (github.com/klauspost/cpuid/v2), nothing else: no
// Redis, Prometheus or router package. It is a module of its own
// (github.com/hookrelay/relay/hookverify, Go 1.22 or later) whose go.mod
// requires BLAKE3 only.
package hookverify
