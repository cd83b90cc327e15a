package signing_test

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/zeebo/blake3"
)

const sigBody = `{"type":"outcome.committed","timestamp":"2025-11-30T00:00:00Z","data":{"reservation_id":"r-7f3a","namespace":"acme"}}`

func TestMkitRetriesShareBodyButNotNonceTimeOrSignature(t *testing.T) {
	t.Parallel()
	s := sigSigner(t, "relay-1", sigKey(1))
	ep := sigURL(t, "https://hooks.example.com/in")
	body := []byte(sigBody)

	first, err := s.Sign(ep, sigNS, body, sigT0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Sign(ep, sigNS, body, sigT0.Add(1500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if first.Get(signing.HeaderMkitDigest) != second.Get(signing.HeaderMkitDigest) {
		t.Error("two attempts of one body have different digests")
	}
	for _, name := range []string{signing.HeaderMkitNonce, signing.HeaderMkitCreatedAt, signing.HeaderMkitExpiresAt, signing.HeaderMkitSignature} {
		if first.Get(name) == second.Get(name) {
			t.Errorf("two attempts share %s %q", name, first.Get(name))
		}
	}

	now := sigT0.Add(2 * time.Second)
	v := sigVerifier(t, "https://hooks.example.com", &now, s)
	for i, h := range []http.Header{first, second} {
		if err := v.Verify(h, "/in", body); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	if err := v.Verify(first, "/in", body); !errors.Is(err, hookverify.ErrReplay) {
		t.Errorf("first attempt sent again: got %v, want ErrReplay", err)
	}
}

func TestMkitHeadersAreTheNineOfV2(t *testing.T) {
	t.Parallel()
	s := sigSigner(t, "relay-1", sigKey(1), signing.WithValidity(90*time.Second))
	h, err := s.Sign(sigURL(t, "https://hooks.example.com/in"), sigNS, []byte(sigBody), sigT0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"X-Mkit-Hook-Version":    `^2$`,
		"X-Mkit-Hook-Key-Id":     `^relay-1$`,
		"X-Mkit-Hook-Namespace":  `^acme$`,
		"X-Mkit-Hook-Audience":   `^https://hooks\.example\.com$`,
		"X-Mkit-Hook-Created-At": `^` + strconv.FormatInt(sigT0.UnixMilli(), 10) + `$`,
		"X-Mkit-Hook-Expires-At": `^` + strconv.FormatInt(sigT0.UnixMilli()+90_000, 10) + `$`,
		"X-Mkit-Hook-Nonce":      `^[0-9a-f]{64}$`,
		"X-Mkit-Hook-Digest":     `^body:[0-9a-f]{64}$`,
		"X-Mkit-Hook-Signature":  `^[0-9a-f]{128}$`,
	}
	if len(h) != len(want) {
		t.Errorf("got %d headers, want %d: %v", len(h), len(want), slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				if !yield(k) {
					return
				}
			}
		}))
	}
	for name, pattern := range want {
		vals := h[name] // exact spelling, not canonicalised
		if len(vals) != 1 || !regexp.MustCompile(pattern).MatchString(vals[0]) {
			t.Errorf("%s = %q, want one value matching %s", name, vals, pattern)
		}
	}
}

func TestMkitQueryIsNotSignedButPathIs(t *testing.T) {
	t.Parallel()
	s := sigSigner(t, "relay-1", sigKey(1))
	h, err := s.Sign(sigURL(t, "https://hooks.example.com/in?tenant=a"), sigNS, []byte(sigBody), sigT0)
	if err != nil {
		t.Fatal(err)
	}
	now := sigT0
	v := sigVerifier(t, "https://hooks.example.com", &now, s)
	if err := v.Verify(h, "/other", []byte(sigBody)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("other path: got %v, want ErrBadSignature", err)
	}
	if err := v.Verify(h, "/in", []byte(sigBody)); err != nil {
		t.Errorf("same path, query dropped: %v", err)
	}
}

func TestNewMkitSignerEnforcesKeyIDAndValidity(t *testing.T) {
	t.Parallel()
	key := sigKey(1)
	for _, id := range []string{"a", "relay.2025-11_A", strings.Repeat("k", 64)} {
		if _, err := signing.NewMkitSigner(id, key); err != nil {
			t.Errorf("key id %q refused: %v", id, err)
		}
	}
	for _, id := range []string{"", strings.Repeat("k", 65), "a/b", "a b", "a\nb", "clé", "a:b"} {
		if _, err := signing.NewMkitSigner(id, key); !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("key id %q: got %v, want ErrInvalidSigner", id, err)
		}
	}
	for _, d := range []time.Duration{time.Millisecond, time.Minute, signing.MaxValidity} {
		s, err := signing.NewMkitSigner("k", key, signing.WithValidity(d))
		if err != nil || s.Validity() != d {
			t.Errorf("validity %v: got %v, %v", d, s, err)
		}
	}
	for _, d := range []time.Duration{0, -time.Second, 500 * time.Microsecond, signing.MaxValidity + time.Millisecond} {
		if _, err := signing.NewMkitSigner("k", key, signing.WithValidity(d)); !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("validity %v: got %v, want ErrInvalidSigner", d, err)
		}
	}
	if _, err := signing.NewMkitSigner("k", key[:32]); !errors.Is(err, signing.ErrInvalidSigner) {
		t.Errorf("short key: got %v", err)
	}
	mismatched := slices.Clone(key)
	copy(mismatched[32:], sigKey(2)[32:]) // seed of one key, public half of another
	if _, err := signing.NewMkitSigner("k", mismatched); !errors.Is(err, signing.ErrInvalidSigner) {
		t.Errorf("mismatched public half: got %v", err)
	}
}

func TestMkitSignFailsWithoutNonceOrBefore1970(t *testing.T) {
	t.Parallel()
	ep := sigURL(t, "https://hooks.example.com/in")
	broken := sigSigner(t, "k", sigKey(1), signing.WithRand(iotest.ErrReader(errors.New("entropy gone"))))
	if _, err := broken.Sign(ep, sigNS, nil, sigT0); err == nil {
		t.Error("signed without a nonce")
	}
	s := sigSigner(t, "k", sigKey(1))
	if _, err := s.Sign(ep, sigNS, nil, time.UnixMilli(-1)); err == nil {
		t.Error("signed a negative created-at")
	}
	if _, err := s.Sign(sigURL(t, "ftp://hooks.example.com/in"), sigNS, nil, sigT0); !errors.Is(err, signing.ErrInvalidEndpoint) {
		t.Errorf("ftp endpoint: got %v", err)
	}
}

func TestOriginIsLowercaseWithoutDefaultPort(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"https://Hooks.Example.COM:443/in?x=1":     "https://hooks.example.com",
		"HTTPS://hooks.example.com":                "https://hooks.example.com",
		"http://hooks.example.com:80/":             "http://hooks.example.com",
		"http://hooks.example.com:443/":            "http://hooks.example.com:443",
		"https://hooks.example.com:8443/in":        "https://hooks.example.com:8443",
		"https://user:pw@hooks.example.com/in":     "https://hooks.example.com",
		"https://[2001:DB8::1]:8443/in":            "https://[2001:db8::1]:8443",
		"http://127.0.0.1:8080":                    "http://127.0.0.1:8080",
		"https://xn--bcher-kva.example/in":         "https://xn--bcher-kva.example",
		"https://hooks.example.com:/in":            "https://hooks.example.com",
		"https://hooks.example.com/a%2Fb?c=d#frag": "https://hooks.example.com",
	}
	for raw, want := range cases {
		got, err := signing.Origin(sigURL(t, raw))
		if err != nil || got != want {
			t.Errorf("Origin(%s) = %q, %v; want %q", raw, got, err, want)
		}
		// The receiver's helper agrees, so a configured audience compares.
		if got, err := hookverify.Origin(raw); err != nil || got != want {
			t.Errorf("hookverify.Origin(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	for _, raw := range []string{"ftp://hooks.example.com", "/relative", "https:///in", "https://bücher.example/in"} {
		if _, err := signing.Origin(sigURL(t, raw)); !errors.Is(err, signing.ErrInvalidEndpoint) {
			t.Errorf("Origin(%s): got %v, want ErrInvalidEndpoint", raw, err)
		}
	}
}

func TestSignerAndVerifierOriginsAgreeOrBothRefuse(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{ // "" means refused
		"https://h.example:443/x":          "https://h.example",
		"https://h.example:8443/x":         "https://h.example:8443",
		"https://h.example:65535/x":        "https://h.example:65535",
		"https://h.example:0443/x":         "",
		"https://h.example:08443/x":        "",
		"https://h.example:00/x":           "",
		"https://H.Example/x":              "https://h.example",
		"https://example.com./x":           "",
		"https://example.com.:443/x":       "",
		"https://localhost./x":             "",
		"http://127.0.0.1:8080/x":          "http://127.0.0.1:8080",
		"https://[2001:db8::1]/x":          "https://[2001:db8::1]",
		"https://[2001:DB8::1]:8443/x":     "https://[2001:db8::1]:8443",
		"https://[2001:0db8::1]/x":         "",
		"https://[2001:db8:0:0:0:0:0:1]/x": "",
		"https://[2001:db8::0:1]/x":        "",
		"https://[::ffff:93.184.216.34]/x": "https://[::ffff:93.184.216.34]",
		"https://[::ffff:5db8:d822]/x":     "",
		"https://[fe80::1%25eth0]/x":       "",
		"https://xn--bcher-kva.example/x":  "https://xn--bcher-kva.example",
		"https://h.example:443/x?q=1#frag": "https://h.example",
	} {
		u := sigURL(t, raw)
		signed, serr := signing.Origin(u)
		configured, verr := hookverify.Origin(raw)
		switch {
		case want == "":
			if !errors.Is(serr, signing.ErrInvalidEndpoint) || !errors.Is(verr, hookverify.ErrConfig) {
				t.Errorf("%s: signer (%q, %v), verifier (%q, %v); want both refused", raw, signed, serr, configured, verr)
			}
		case serr != nil || verr != nil || signed != want || configured != want:
			t.Errorf("%s: signer (%q, %v), verifier (%q, %v); want both %q", raw, signed, serr, configured, verr, want)
		}
	}
}

func TestSignedPathIsTheEscapedRequestPath(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"https://h.example":              "/",
		"https://h.example/":             "/",
		"https://h.example/a%2Fb/c?x=1":  "/a%2Fb/c",
		"https://h.example/a%20b":        "/a%20b",
		"https://h.example/hooks/relay/": "/hooks/relay/",
	}
	for raw, want := range cases {
		if got := signing.SignedPath(sigURL(t, raw)); got != want {
			t.Errorf("SignedPath(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestMkitSignatureIsEd25519OverBlake3OfCanonical(t *testing.T) {
	t.Parallel()
	// Independent of the vectors: rebuild the canonical string from the
	// headers and check the signature with the public key alone.
	key := sigKey(7)
	s := sigSigner(t, "k7", key, signing.WithRand(&sigSeq{next: 0x40}))
	h, err := s.Sign(sigURL(t, "https://Hooks.Example.com:443/in/%7Euser?q=1"), sigNS, nil, sigT0)
	if err != nil {
		t.Fatal(err)
	}
	canonical := strings.Join([]string{
		"mkit-hook:v2", "k7", "acme", "https://hooks.example.com", "/in/%7Euser",
		h.Get(signing.HeaderMkitDigest), h.Get(signing.HeaderMkitCreatedAt), h.Get(signing.HeaderMkitExpiresAt),
		"404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f",
	}, "\n")
	if h.Get(signing.HeaderMkitNonce) != "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f" {
		t.Fatalf("nonce %s is not the injected bytes", h.Get(signing.HeaderMkitNonce))
	}
	// BLAKE3 of the empty input, from the BLAKE3 specification.
	if got, want := h.Get(signing.HeaderMkitDigest), "body:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"; got != want {
		t.Fatalf("digest %s, want %s", got, want)
	}
	sig, err := hex.DecodeString(h.Get(signing.HeaderMkitSignature))
	if err != nil {
		t.Fatal(err)
	}
	msg := blake3.Sum256([]byte(canonical))
	if !ed25519.Verify(key.Public().(ed25519.PublicKey), msg[:], sig) {
		t.Error("signature does not verify over BLAKE3 of the canonical string")
	}
	// The namespace is signed: the same string naming another namespace
	// does not verify.
	other := blake3.Sum256([]byte(strings.Replace(canonical, "\nacme\n", "\nacmf\n", 1)))
	if ed25519.Verify(key.Public().(ed25519.PublicKey), other[:], sig) {
		t.Error("signature verifies for another namespace")
	}
}

func TestMkitSignsOnlyWellFormedNamespaces(t *testing.T) {
	t.Parallel()
	s := sigSigner(t, "k", sigKey(1))
	ep := sigURL(t, "https://hooks.example.com/in")
	for _, ns := range []string{"a", "acme", "0", "a_b-c", strings.Repeat("n", 63)} {
		h, err := s.Sign(ep, ns, nil, sigT0)
		if err != nil || h.Get(signing.HeaderMkitNamespace) != ns {
			t.Errorf("namespace %q: header %q, %v", ns, h.Get(signing.HeaderMkitNamespace), err)
		}
	}
	for _, ns := range []string{"", "Acme", "ACME", "-acme", "_acme", "ac me", "acme\n", "a\nb", "acmé", "a.b", "a:b", strings.Repeat("n", 64)} {
		if _, err := s.Sign(ep, ns, nil, sigT0); !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("namespace %q: got %v, want ErrInvalidSigner", ns, err)
		}
	}
}
