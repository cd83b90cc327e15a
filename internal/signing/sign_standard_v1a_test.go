package signing_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/signing"
)

// sigPrivate is the whsk_ key of sigKey(first).
func sigPrivate(first byte) string {
	return "whsk_" + base64.StdEncoding.EncodeToString(sigKey(first))
}

func TestSignStandardV1aSignsWhatV1SignsWithEd25519(t *testing.T) {
	t.Parallel()
	body := []byte(sigBody)
	h, err := signing.SignStandardV1a("msg_r-7f3a_billing", []string{sigPrivate(1)}, body, sigT0)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := signing.SignStandard("msg_r-7f3a_billing", []string{sigSecret(1)}, body, sigT0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"webhook-id", "webhook-timestamp"} {
		if h.Get(name) != v1.Get(name) {
			t.Errorf("%s: v1a %q, v1 %q", name, h.Get(name), v1.Get(name))
		}
	}
	if len(h) != 3 {
		t.Errorf("got %d headers, want 3", len(h))
	}
	b64, ok := strings.CutPrefix(h.Get("webhook-signature"), "v1a,")
	if !ok {
		t.Fatalf("webhook-signature %q is not v1a", h.Get("webhook-signature"))
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	signed := "msg_r-7f3a_billing." + h.Get("webhook-timestamp") + "." + sigBody
	if !ed25519.Verify(sigKey(1).Public().(ed25519.PublicKey), []byte(signed), sig) {
		t.Error("the signature does not verify over id.timestamp.body")
	}
	if ed25519.Verify(sigKey(2).Public().(ed25519.PublicKey), []byte(signed), sig) {
		t.Error("the signature verifies under another endpoint's key")
	}
	pub, err := signing.StandardPublicKey(sigPrivate(1))
	if want := "whpk_" + base64.StdEncoding.EncodeToString(sigKey(1).Public().(ed25519.PublicKey)); err != nil || pub != want {
		t.Errorf("public key %q (%v), want %q", pub, err, want)
	}
}

func TestSignStandardV1aSignsWithEveryKeyDuringRotation(t *testing.T) {
	t.Parallel()
	h, err := signing.SignStandardV1a("msg_1", []string{sigPrivate(1), sigPrivate(2)}, []byte(sigBody), sigT0)
	if err != nil {
		t.Fatal(err)
	}
	entries := strings.Split(h.Get("webhook-signature"), " ")
	if len(entries) != 2 {
		t.Fatalf("webhook-signature %q: want two entries", h.Get("webhook-signature"))
	}
	signed := []byte("msg_1." + h.Get("webhook-timestamp") + "." + sigBody)
	for i, first := range []byte{1, 2} {
		sig, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(entries[i], "v1a,"))
		if !strings.HasPrefix(entries[i], "v1a,") || !ed25519.Verify(sigKey(first).Public().(ed25519.PublicKey), signed, sig) {
			t.Errorf("entry %d %q is not key %d's signature", i, entries[i], i+1)
		}
	}
}

func TestSignStandardV1aRefusesMalformedKeysWithoutShowingThem(t *testing.T) {
	t.Parallel()
	good := sigPrivate(1)
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(good, "whsk_"))
	mismatched := append([]byte{}, raw...)
	mismatched[40] ^= 1 // the public half no longer the seed's
	for name, key := range map[string]string{
		"no prefix":       strings.TrimPrefix(good, "whsk_"),
		"secret prefix":   "whsec_" + strings.TrimPrefix(good, "whsk_"),
		"seed only":       "whsk_" + base64.StdEncoding.EncodeToString(raw[:32]),
		"not base64":      good[:len(good)-2] + "!!",
		"foreign public":  "whsk_" + base64.StdEncoding.EncodeToString(mismatched),
		"public key only": "whpk_" + base64.StdEncoding.EncodeToString(raw[32:]),
	} {
		_, err := signing.SignStandardV1a("msg_1", []string{key}, []byte(sigBody), sigT0)
		if !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("%s: got %v, want ErrInvalidSigner", name, err)
			continue
		}
		if enc := strings.TrimPrefix(strings.TrimPrefix(key, "whsk_"), "whpk_"); strings.Contains(err.Error(), enc[:16]) {
			t.Errorf("%s: error %q shows the key", name, err)
		}
	}
	if _, err := signing.SignStandardV1a("msg_1", nil, []byte(sigBody), sigT0); !errors.Is(err, signing.ErrInvalidSigner) {
		t.Errorf("no key: got %v", err)
	}
	if _, err := signing.SignStandardV1a("msg.1", []string{good}, []byte(sigBody), sigT0); !errors.Is(err, signing.ErrInvalidSigner) {
		t.Errorf("id with a dot: got %v", err)
	}
}

func TestGenerateStandardKeyMakesDistinctUsableKeys(t *testing.T) {
	t.Parallel()
	a, err := signing.GenerateStandardKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := signing.GenerateStandardKey(nil)
	if err != nil || a == b {
		t.Fatalf("two keys %v equal: %v", err, a == b)
	}
	if _, err := signing.SignStandardV1a("msg_1", []string{a, b}, []byte(sigBody), sigT0); err != nil {
		t.Fatal(err)
	}
}
