package signing_test

import (
	"crypto/ed25519"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// Helpers of the signing tests.

var sigT0 = time.UnixMilli(1_764_460_800_000)

// sigNS is the namespace the signing tests sign for; sigBody names it.
const sigNS = "acme"

// sigKey is the Ed25519 key whose seed is the 32 bytes first, first+1, ...
func sigKey(first byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = first + byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func sigURL(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func sigSigner(t testing.TB, keyID string, key ed25519.PrivateKey, opts ...signing.MkitOption) *signing.MkitSigner {
	t.Helper()
	s, err := signing.NewMkitSigner(keyID, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sigVerifier is a receiver of namespace sigNS at audience trusting the
// given signers' keys, its clock read from *now.
func sigVerifier(t testing.TB, audience string, now *time.Time, signers ...*signing.MkitSigner) *hookverify.MkitVerifier {
	t.Helper()
	var entries []signing.PublicKey
	for _, s := range signers {
		entries = append(entries, s.PublicKey())
	}
	return &hookverify.MkitVerifier{
		Keys:       sigReceiverKeys(t, entries...),
		Audience:   audience,
		Namespaces: []string{sigNS},
		Now:        func() time.Time { return *now },
	}
}

// sigReceiverKeys is the key list as a receiver sees it: served by
// KeysHandler, parsed by hookverify.ParseKeyList.
func sigReceiverKeys(t testing.TB, entries ...signing.PublicKey) hookverify.KeyList {
	t.Helper()
	list, err := signing.NewKeyList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	signing.KeysHandler(list).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("key list served with status %d", rec.Code)
	}
	parsed, err := hookverify.ParseKeyList(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("receiver cannot parse the served key list: %v", err)
	}
	return parsed
}

// sigSeq reads as the bytes from, from+1, ... (wrapping); a deterministic
// nonce source.
type sigSeq struct{ next byte }

func (r *sigSeq) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.next
		r.next++
	}
	return len(p), nil
}
