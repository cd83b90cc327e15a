// Package hookverify verifies webhooks sent by relay, for receivers: the
// mkit-hook v1 scheme (Ed25519 with relay's published key list, an audience,
// a validity window of at most 300 s and a nonce replay cache) and Standard
// Webhooks (HMAC-SHA256 with a whsec_ secret). It depends only on the
// standard library and BLAKE3, so receivers can import it alone.
//
// A receiver fetches relay's key list from /.well-known/mkit-hook-keys.json
// (over HTTPS, from the relay it trusts), then wraps its handler:
//
//	keys, err := hookverify.ParseKeyList(keyListJSON)
//	if err != nil { ... }
//	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com"}
//	http.Handle("/hooks/relay", hookverify.Middleware(v, handler))
//
// Only the origin and path of the request are signed, not its query: do not
// authorise on query parameters. A verified request may still be a retry of
// one already handled (relay delivers at least once, each attempt signed
// afresh), so handlers deduplicate per endpoint, the URL relay posts to (give
// each registration its own URL): mkit-hook v1 by the body's
// data.reservation_id, unique only within one relay namespace; Standard
// Webhooks by webhook-id.
package hookverify
