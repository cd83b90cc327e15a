package verifycheck_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// A receiver at https://hooks.example.com, for relay namespace acme, checks
// relay's mkit-hook webhooks before handling them: a replayed request is
// refused, and so is one relay signed for another namespace (another tenant
// of the same relay that registered this URL as its own endpoint).
func Example() {
	keys, err := hookverify.ParseKeyList(relayKeyList()) // from relay's /.well-known/mkit-hook-keys.json
	if err != nil {
		log.Fatal(err)
	}
	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}, Now: exampleClock}
	handler := hookverify.Middleware(v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Printf("handled %s\n", body)
		fmt.Fprintln(w, "ok")
	}))

	header, body := relayDelivery("acme") // what relay posts to https://hooks.example.com/hooks/relay
	post(handler, header, body)
	post(handler, header, body)
	header, body = relayDelivery("other")
	post(handler, header, body)
	// Output:
	// handled {"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}
	// 200 ok
	// 401 hookverify: replayed nonce: nonce was accepted before
	// 401 hookverify: namespace not accepted: other is not a namespace this receiver takes
}

// Verify checks one mkit-hook v2 request without middleware: the headers,
// the path it was received on and the exact body. Every refusal matches one
// of the package's errors.
func Example_mkitVerifierVerify() {
	keys, err := hookverify.ParseKeyList(relayKeyList())
	if err != nil {
		log.Fatal(err)
	}
	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}, Now: exampleClock}
	if err := v.Check(); err != nil { // at start: a misconfigured receiver does not start
		log.Fatal(err)
	}
	header, body := relayDelivery("acme")
	fmt.Println(v.Verify(header, "/hooks/relay", body))

	header, body = relayDelivery("acme")
	err = v.Verify(header, "/hooks/relay", append(body, ' '))
	fmt.Println(errors.Is(err, hookverify.ErrDigest), err)

	header, body = relayDelivery("acme")
	late := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"},
		Now: func() time.Time { return exampleNow.Add(hookverify.MaxWindow) }}
	fmt.Println(late.Verify(header, "/hooks/relay", body))
	// Output:
	// <nil>
	// true hookverify: body digest mismatch: body does not match X-Mkit-Hook-Digest
	// hookverify: signature expired: expired 0 ms ago
}

// A Standard Webhooks endpoint has its own whsec_ secret; during a rotation
// the verifier holds the old and the new one.
func Example_standardVerifierVerify() {
	v := &hookverify.StandardVerifier{Secrets: []string{exampleSecret}, Now: exampleClock}
	if err := v.Check(); err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}`)
	header, err := signing.SignStandard("msg_1", []string{exampleSecret}, body, exampleNow) // as relay signs
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Verify(header, body))

	old, _ := signing.SignStandard("msg_1", []string{exampleSecret}, body, exampleNow.Add(-10*time.Minute))
	fmt.Println(v.Verify(old, body))

	other, _ := signing.SignStandard("msg_1", []string{"whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQQ=="}, body, exampleNow)
	fmt.Println(v.Verify(other, body))
	// Output:
	// <nil>
	// hookverify: signature expired: webhook-timestamp is more than 5m0s old
	// hookverify: bad signature: no v1 signature of webhook-signature matches
}

// A standard-webhooks-v1a endpoint is verified with the public key relay
// shows on it (public_key); the receiver holds nothing that can sign, so a
// v1 signature, which anyone holding a whsec_ secret could make, is refused.
func Example_standardVerifierVerifyV1a() {
	// The test vector's key pair (api/testdata/webhook-signatures.json);
	// relay keeps the private half of a real endpoint's pair to itself.
	const private = "whsk_YGFiY2RlZmdoaWprbG1ub3BxcnN0dXZ3eHl6e3x9fn8XRVO0Vt3fxpCOyrHBAf5qsh4rqgYXeVt9Q6Y0gpk/1Q=="
	v := &hookverify.StandardVerifier{PublicKeys: []string{"whpk_F0VTtFbd38aQjsqxwQH+arIeK6oGF3lbfUOmNIKZP9U="}, Now: exampleClock}
	if err := v.Check(); err != nil {
		log.Fatal(err)
	}
	body := []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}`)
	header, err := signing.SignStandardV1a("msg_1", []string{private}, body, exampleNow) // as relay signs
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(header.Get(hookverify.HeaderStandardSignature)[:4])
	fmt.Println(v.Verify(header, body))

	v1, _ := signing.SignStandard("msg_1", []string{exampleSecret}, body, exampleNow)
	fmt.Println(v.Verify(v1, body))

	bad := &hookverify.StandardVerifier{PublicKeys: []string{"whpk_F0VTtFbd38aQ"}}
	fmt.Println(bad.Check())
	// Output:
	// v1a,
	// <nil>
	// hookverify: bad signature: no v1a signature of webhook-signature matches
	// hookverify: verifier misconfigured: public key 1 is not the base64 of 32 bytes
}

// NewMiddleware has the shape routers take for middleware (chi's Use, for
// one); here it wraps a handler as a router would.
func Example_newMiddleware() {
	v := &hookverify.StandardVerifier{Secrets: []string{exampleSecret}, Now: exampleClock}
	use := hookverify.NewMiddleware(v,
		hookverify.WithMaxBody(64<<10),
		hookverify.WithErrorHook(func(r *http.Request, err error) { fmt.Println("refused:", err) }),
	)
	handler := use(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("handled", r.Header.Get(hookverify.HeaderStandardID))
		w.WriteHeader(http.StatusNoContent)
	}))

	body := []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}`)
	header, err := signing.SignStandard("msg_1", []string{exampleSecret}, body, exampleNow)
	if err != nil {
		log.Fatal(err)
	}
	post(handler, header, body)
	post(handler, header, []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-2","namespace":"acme"}}`))
	// Output:
	// handled msg_1
	// 204
	// refused: hookverify: bad signature: no v1 signature of webhook-signature matches
	// 401 hookverify: bad signature: no v1 signature of webhook-signature matches
}

// FetchKeyList gets relay's key list over https (plain http only from a
// loopback relay, as here), following no redirect.
func Example_fetchKeyList() {
	relay := httptest.NewServer(relayKeys(exampleSigner.PublicKey())) // a relay on 127.0.0.1
	defer relay.Close()

	keys, err := hookverify.FetchKeyList(context.Background(), relay.URL+"/.well-known/mkit-hook-keys.json")
	if err != nil {
		log.Fatal(err)
	}
	for _, k := range keys.Keys {
		fmt.Println(k.KeyID, k.Alg)
	}
	_, err = hookverify.FetchKeyList(context.Background(), "http://relay.example.com/.well-known/mkit-hook-keys.json")
	fmt.Println(errors.Is(err, hookverify.ErrKeyListSource), err)
	// Output:
	// relay-2025-11 ed25519
	// true hookverify: untrusted key list URL: http://relay.example.com/.well-known/mkit-hook-keys.json: https required (plain http only from a loopback relay)
}

// A KeyListRefresher follows relay's key rotation: relay publishes its next
// key before signing with it, and the receiver takes it on its next
// refresh, keeping its nonces. Run refreshes every Interval; Refresh, here,
// once.
func Example_keyListRefresher() {
	next, err := signing.NewMkitSigner("relay-2026-05", seedKey(2))
	if err != nil {
		log.Fatal(err)
	}
	var published http.Handler = relayKeys(exampleSigner.PublicKey())
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { published.ServeHTTP(w, r) }))
	defer relay.Close()

	keysURL := relay.URL + "/.well-known/mkit-hook-keys.json"
	keys, err := hookverify.FetchKeyList(context.Background(), keysURL) // at start
	if err != nil {
		log.Fatal(err)
	}
	v := &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}, Now: exampleClock}
	refresher := &hookverify.KeyListRefresher{Verifier: v, URL: keysURL, Interval: 5 * time.Minute}
	// A receiver runs: go refresher.Run(ctx)

	header, body := signedBy(next, "acme")
	fmt.Println(v.Verify(header, "/hooks/relay", body))

	published = relayKeys(exampleSigner.PublicKey(), next.PublicKey()) // relay's rotation, step 1
	if err := refresher.Refresh(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Verify(header, "/hooks/relay", body))
	fmt.Println(len(v.CurrentKeys().Keys), "keys")
	// Output:
	// hookverify: unknown key id: relay-2026-05
	// <nil>
	// 2 keys
}

// One URL can take both schemes: EitherVerifier checks each request with
// the verifier of the scheme its headers name, and refuses the rest.
func Example_eitherVerifier() {
	keys, err := hookverify.ParseKeyList(relayKeyList())
	if err != nil {
		log.Fatal(err)
	}
	v := &hookverify.EitherVerifier{
		Mkit:     &hookverify.MkitVerifier{Keys: keys, Audience: "https://hooks.example.com", Namespaces: []string{"acme"}, Now: exampleClock},
		Standard: &hookverify.StandardVerifier{Secrets: []string{exampleSecret}, Now: exampleClock},
	}
	if err := v.Check(); err != nil {
		log.Fatal(err)
	}
	handler := hookverify.Middleware(v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("verified", hookverify.RequestScheme(r.Header))
		w.WriteHeader(http.StatusNoContent)
	}))

	header, body := relayDelivery("acme")
	post(handler, header, body)
	body = []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"acme"}}`)
	std, err := signing.SignStandard("msg_1", []string{exampleSecret}, body, exampleNow)
	if err != nil {
		log.Fatal(err)
	}
	post(handler, std, body)
	post(handler, http.Header{}, body)
	// Output:
	// verified mkit-hook-v2
	// 204
	// verified standard-webhooks
	// 204
	// 401 hookverify: no verifier for this request's scheme: unsigned
}

// exampleNow is the examples' fixed clock, so their output does not depend
// on when they run.
var exampleNow = time.UnixMilli(1_764_460_800_000)

func exampleClock() time.Time { return exampleNow }

// exampleSigner stands in for relay's signing key.
var exampleSigner, _ = signing.NewMkitSigner("relay-2025-11", seedKey(1))

// exampleSecret is an endpoint's Standard Webhooks secret.
const exampleSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// relayKeys serves a key list of entries as relay does.
func relayKeys(entries ...signing.PublicKey) http.Handler {
	list, err := signing.NewKeyList(entries...)
	if err != nil {
		log.Fatal(err)
	}
	return signing.KeysHandler(list)
}

func relayKeyList() []byte {
	rec := httptest.NewRecorder()
	relayKeys(exampleSigner.PublicKey()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	return rec.Body.Bytes()
}

func relayDelivery(ns string) (http.Header, []byte) {
	return signedBy(exampleSigner, ns)
}

// signedBy is what relay, signing with s, posts to
// https://hooks.example.com/hooks/relay for namespace ns.
func signedBy(s *signing.MkitSigner, ns string) (http.Header, []byte) {
	body := []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-1","namespace":"` + ns + `"}}`)
	u, _ := url.Parse("https://hooks.example.com/hooks/relay")
	h, err := s.Sign(u, ns, body, exampleNow)
	if err != nil {
		log.Fatal(err)
	}
	return h, body
}

// post sends a request to handler and prints the answer's status and body.
func post(handler http.Handler, header http.Header, body []byte) {
	r := httptest.NewRequest(http.MethodPost, "https://hooks.example.com/hooks/relay", bytes.NewReader(body))
	maps.Copy(r.Header, header)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, r)
	if answer := strings.TrimSpace(rec.Body.String()); answer != "" {
		fmt.Println(rec.Code, answer)
		return
	}
	fmt.Println(rec.Code)
}
