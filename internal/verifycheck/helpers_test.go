package verifycheck_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/zeebo/blake3"
)

var t0 = time.UnixMilli(1_764_460_800_000)

const (
	audience  = "https://hooks.example.com"
	endpoint  = "https://hooks.example.com/in"
	namespace = "acme"
	body      = `{"type":"outcome.expired","timestamp":"2025-11-30T00:00:00Z","data":{"reservation_id":"r-1","namespace":"acme"}}`
)

func seedKey(first byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = first + byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

// bundle is a receiver of namespace acme trusting relay's key "relay-1",
// with a clock moved by hand, and the relay signer that sends to it.
type bundle struct {
	key    ed25519.PrivateKey
	signer *signing.MkitSigner
	now    time.Time
	v      *hookverify.MkitVerifier
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{key: seedKey(1), now: t0}
	var err error
	if b.signer, err = signing.NewMkitSigner("relay-1", b.key); err != nil {
		t.Fatal(err)
	}
	b.v = &hookverify.MkitVerifier{
		Keys:       keyList(t, b.signer.PublicKey()),
		Audience:   audience,
		Namespaces: []string{namespace},
		Now:        func() time.Time { return b.now },
	}
	return b
}

// keyList is entries as a receiver gets them: encoded by relay, parsed
// here.
func keyList(t *testing.T, entries ...signing.PublicKey) hookverify.KeyList {
	t.Helper()
	list, err := signing.NewKeyList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	signing.KeysHandler(list).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	parsed, err := hookverify.ParseKeyList(rec.Body.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// sign is relay's signature of body to endpoint of namespace acme at the
// bundle's now.
func (b *bundle) sign(t *testing.T, body string) http.Header {
	t.Helper()
	return b.signFor(t, namespace, body)
}

// signFor is relay's signature of body to endpoint, an endpoint of ns.
func (b *bundle) signFor(t *testing.T, ns, body string) http.Header {
	t.Helper()
	u, _ := url.Parse(endpoint)
	h, err := b.signer.Sign(u, ns, []byte(body), b.now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// bodyOf is a webhook body of namespace ns and reservation id rid.
func bodyOf(ns, rid string) string {
	return `{"type":"outcome.expired","timestamp":"2025-11-30T00:00:00Z","data":{"reservation_id":"` + rid + `","namespace":"` + ns + `"}}`
}

// fields are the header values of a request forged with a valid signature
// over whatever they hold; tests use it to reach checks the signer never
// violates.
type fields struct {
	version, keyID, namespace, audience, path, created, expires, nonce, digest string
}

func (b *bundle) fields(body string) fields {
	sum := blake3.Sum256([]byte(body))
	created := b.now.UnixMilli()
	return fields{
		version: "2", keyID: "relay-1", namespace: namespace, audience: audience, path: "/in",
		created: strconv.FormatInt(created, 10), expires: strconv.FormatInt(created+300_000, 10),
		nonce: strings.Repeat("5a", 32), digest: "body:" + hex.EncodeToString(sum[:]),
	}
}

// forge signs f with key, building the canonical string independently of
// relay's signer.
func forge(key ed25519.PrivateKey, f fields) http.Header {
	canonical := strings.Join([]string{"mkit-hook:v2", f.keyID, f.namespace, f.audience, f.path, f.digest, f.created, f.expires, f.nonce}, "\n")
	sum := blake3.Sum256([]byte(canonical))
	h := http.Header{}
	h.Set("X-Mkit-Hook-Version", f.version)
	h.Set("X-Mkit-Hook-Key-Id", f.keyID)
	h.Set("X-Mkit-Hook-Namespace", f.namespace)
	h.Set("X-Mkit-Hook-Audience", f.audience)
	h.Set("X-Mkit-Hook-Created-At", f.created)
	h.Set("X-Mkit-Hook-Expires-At", f.expires)
	h.Set("X-Mkit-Hook-Nonce", f.nonce)
	h.Set("X-Mkit-Hook-Digest", f.digest)
	h.Set("X-Mkit-Hook-Signature", hex.EncodeToString(ed25519.Sign(key, sum[:])))
	return h
}

// forgeV1 is f signed as relay signed mkit-hook v1: eight fields, no
// namespace, and the eight headers of v1.
func forgeV1(key ed25519.PrivateKey, f fields) http.Header {
	canonical := strings.Join([]string{"mkit-hook:v1", f.keyID, f.audience, f.path, f.digest, f.created, f.expires, f.nonce}, "\n")
	sum := blake3.Sum256([]byte(canonical))
	h := forge(key, f)
	h.Del("X-Mkit-Hook-Namespace")
	h.Set("X-Mkit-Hook-Version", "1")
	h.Set("X-Mkit-Hook-Signature", hex.EncodeToString(ed25519.Sign(key, sum[:])))
	return h
}

func ms(n int64) string { return strconv.FormatInt(n, 10) }

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
