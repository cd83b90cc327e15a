package verifycheck_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// v1aKey is the Ed25519 key whose seed is 32 bytes of b.
func v1aKey(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return ed25519.NewKeyFromSeed(seed)
}

func v1aPrivate(b byte) string { return "whsk_" + base64.StdEncoding.EncodeToString(v1aKey(b)) }

func v1aPublic(b byte) string {
	return "whpk_" + base64.StdEncoding.EncodeToString(v1aKey(b).Public().(ed25519.PublicKey))
}

func v1aSign(t *testing.T, keys []string, at time.Time) http.Header {
	t.Helper()
	h, err := signing.SignStandardV1a("msg_r-7f3a_billing", keys, []byte(body), at)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func v1aVerifier(pubs ...string) *hookverify.StandardVerifier {
	return &hookverify.StandardVerifier{PublicKeys: pubs, Now: func() time.Time { return t0 }}
}

func TestStandardV1aVerifiesWithThePublicKeyOnly(t *testing.T) {
	t.Parallel()
	h := v1aSign(t, []string{v1aPrivate(1)}, t0)
	if err := v1aVerifier(v1aPublic(1)).Verify(h, []byte(body)); err != nil {
		t.Fatalf("refused: %v", err)
	}
	// Another endpoint's key pair: its public key does not verify ours, nor
	// does its private key sign for ours.
	if err := v1aVerifier(v1aPublic(2)).Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("another endpoint's public key: got %v, want ErrBadSignature", err)
	}
	forged := v1aSign(t, []string{v1aPrivate(2)}, t0)
	if err := v1aVerifier(v1aPublic(1)).Verify(forged, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("signed with another endpoint's key: got %v, want ErrBadSignature", err)
	}
	// The same tolerance as v1, both ways.
	for at, want := range map[time.Time]error{
		t0.Add(-5*time.Minute - time.Second): hookverify.ErrExpired,
		t0.Add(5*time.Minute + time.Second):  hookverify.ErrNotYetValid,
	} {
		if err := v1aVerifier(v1aPublic(1)).Verify(v1aSign(t, []string{v1aPrivate(1)}, at), []byte(body)); !errors.Is(err, want) {
			t.Errorf("signed at %v: got %v, want %v", at.Sub(t0), err, want)
		}
	}
}

func TestStandardV1aRefusesV1WhenOnlyPublicKeysAreConfigured(t *testing.T) {
	t.Parallel()
	s := secret(1)
	v1, err := signing.SignStandard("msg_r-7f3a_billing", []string{s}, []byte(body), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := v1aVerifier(v1aPublic(1)).Verify(v1, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) || !strings.Contains(err.Error(), "v1a") {
		t.Errorf("v1 signature to a v1a receiver: got %v, want ErrBadSignature naming v1a", err)
	}
	// Nor does a v1a entry whose bytes are an HMAC pass as one.
	mixed := v1.Clone()
	mixed.Set("webhook-signature", "v1a,"+strings.TrimPrefix(v1.Get("webhook-signature"), "v1,"))
	if err := v1aVerifier(v1aPublic(1)).Verify(mixed, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("an HMAC relabelled v1a: got %v", err)
	}
	// A receiver holding both takes either.
	both := &hookverify.StandardVerifier{Secrets: []string{s}, PublicKeys: []string{v1aPublic(1)}, Now: func() time.Time { return t0 }}
	for name, h := range map[string]http.Header{"v1": v1, "v1a": v1aSign(t, []string{v1aPrivate(1)}, t0)} {
		if err := both.Verify(h, []byte(body)); err != nil {
			t.Errorf("%s to a receiver with both: %v", name, err)
		}
	}
	// And a secrets-only receiver ignores v1a entries.
	secretsOnly := &hookverify.StandardVerifier{Secrets: []string{s}, Now: func() time.Time { return t0 }}
	if err := secretsOnly.Verify(v1aSign(t, []string{v1aPrivate(1)}, t0), []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("v1a to a secrets-only receiver: got %v", err)
	}
}

func TestStandardV1aRotationVerifiesEitherKeyThenOnlyTheNew(t *testing.T) {
	t.Parallel()
	old, next := v1aPrivate(1), v1aPrivate(2)
	during := v1aSign(t, []string{next, old}, t0)
	for _, pub := range []string{v1aPublic(1), v1aPublic(2)} {
		if err := v1aVerifier(pub).Verify(during, []byte(body)); err != nil {
			t.Errorf("during rotation, %s refuses: %v", pub[:12], err)
		}
	}
	after := v1aSign(t, []string{v1aPrivate(3), next}, t0)
	if err := v1aVerifier(v1aPublic(1)).Verify(after, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("after the next rotation, the first key still verifies: %v", err)
	}
	if err := v1aVerifier(v1aPublic(2)).Verify(after, []byte(body)); err != nil {
		t.Errorf("after the next rotation, the previous key refuses: %v", err)
	}
}

func TestStandardV1aMalformedPublicKeysAreAClearConfigError(t *testing.T) {
	t.Parallel()
	good := v1aPublic(1)
	raw := strings.TrimPrefix(good, "whpk_")
	for name, key := range map[string]string{
		"no prefix":        raw,
		"secret prefix":    "whsec_" + raw,
		"private key":      v1aPrivate(1),
		"not base64":       "whpk_" + raw[:len(raw)-2] + "!!",
		"31 bytes":         "whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 31)),
		"33 bytes":         "whpk_" + base64.StdEncoding.EncodeToString(make([]byte, 33)),
		"unpadded":         "whpk_" + strings.TrimRight(raw, "="),
		"empty":            "",
		"only the prefix":  "whpk_",
		"hex, not base64":  "whpk_" + strings.Repeat("ab", 32),
		"padding, no data": "whpk_====",
	} {
		v := v1aVerifier(good, key)
		err := v.Check()
		if !errors.Is(err, hookverify.ErrConfig) || !strings.Contains(err.Error(), "public key 2") {
			t.Errorf("%s: Check got %v, want ErrConfig naming public key 2", name, err)
		}
		if err := v.Verify(v1aSign(t, []string{v1aPrivate(1)}, t0), []byte(body)); !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: Verify got %v, want ErrConfig", name, err)
		}
		if len(key) > 12 && strings.Contains(err.Error(), key[5:]) {
			t.Errorf("%s: error %q shows the key", name, err)
		}
	}
	if err := (&hookverify.StandardVerifier{}).Check(); !errors.Is(err, hookverify.ErrConfig) {
		t.Errorf("no keys at all: %v", err)
	}
}
