package outbox_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

// signingKey is the v1a key whose seed is 32 bytes of b.
func signingKey(b byte) outbox.SigningKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return outbox.SigningKey(outbox.SigningKeyPrefix + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed)))
}

func TestPutEndpointGeneratesAKeyPairAndRotatesItOnRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spec := outbox.EndpointSpec{Scheme: outbox.SchemeStandardWebhooksV1a, Enabled: true}
		first := e.put("billing", spec)
		if len(first.Endpoint.SigningKeys) != 1 || first.Generated != "" || len(first.Endpoint.Secrets) != 0 {
			t.Fatalf("first put: %d keys, generated secret %v, %d secrets", len(first.Endpoint.SigningKeys), first.Generated != "", len(first.Endpoint.Secrets))
		}
		current := first.Endpoint.SigningKeys[0]
		if !strings.HasPrefix(current.PublicKey(), outbox.PublicKeyPrefix) {
			t.Fatalf("public key %q", current.PublicKey())
		}
		again := e.put("billing", spec)
		if !reflect.DeepEqual(again.Endpoint.SigningKeys, first.Endpoint.SigningKeys) {
			t.Fatal("a put without rotate_key must keep the key")
		}
		spec.RotateKey = true
		rotated := e.put("billing", spec)
		keys := rotated.Endpoint.SigningKeys
		if len(keys) != 2 || keys[1] != current || keys[0] == current {
			t.Fatalf("rotation: want a new key first and the old one beside it, got %d keys", len(keys))
		}
		again = e.put("billing", outbox.EndpointSpec{Scheme: outbox.SchemeStandardWebhooksV1a, Enabled: true})
		if !reflect.DeepEqual(again.Endpoint.SigningKeys, keys) {
			t.Fatal("a put after a rotation must keep both keys")
		}
		// The next rotation ends the window: the first key no longer signs.
		next := e.put("billing", spec).Endpoint.SigningKeys
		if len(next) != 2 || next[1] != keys[0] || next[0] == keys[0] || next[0] == current || next[1] == current {
			t.Fatal("a second rotation must keep only the key it replaces")
		}
		got, err := e.admin().Endpoint(e.Ctx, e.P, "billing")
		if err != nil || !reflect.DeepEqual(got.Endpoint.SigningKeys, next) {
			t.Fatalf("stored endpoint differs: %v", err)
		}
		// Another scheme drops the keys; coming back makes a new pair.
		mkit := e.put("billing", outbox.EndpointSpec{Enabled: true})
		if len(mkit.Endpoint.SigningKeys) != 0 {
			t.Fatal("mkit-hook-v2 kept the signing keys")
		}
		back := e.put("billing", outbox.EndpointSpec{Scheme: outbox.SchemeStandardWebhooksV1a, Enabled: true}).Endpoint.SigningKeys
		if len(back) != 1 || back[0] == next[0] || back[0] == next[1] {
			t.Fatal("returning to v1a must generate a new key pair")
		}
		// Each endpoint has its own pair.
		other := e.put("audit", outbox.EndpointSpec{Scheme: outbox.SchemeStandardWebhooksV1a, Enabled: true}).Endpoint.SigningKeys
		if other[0] == back[0] {
			t.Fatal("two endpoints share a key")
		}
	})
}

func TestPutEndpointRefusesRotateKeyForOtherSchemes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		before := e.all()
		for _, scheme := range []outbox.Scheme{"", outbox.SchemeMkitHookV2, outbox.SchemeStandardWebhooks} {
			_, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://h.example.com/", Scheme: scheme, RotateKey: true, Enabled: true})
			if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "rotate_key") {
				t.Errorf("%q: got %v, want ErrInvalid naming rotate_key", scheme, err)
			}
		}
		_, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://h.example.com/", Scheme: outbox.SchemeStandardWebhooksV1a, Secret: secret(1), Enabled: true})
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("a secret for v1a: got %v", err)
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused put changed the store")
		}
	})
}

func TestSigningKeysValidateRoundTripAndNeverPrint(t *testing.T) {
	ep := outbox.Endpoint{URL: "https://x.example/in", Scheme: outbox.SchemeStandardWebhooksV1a, Enabled: true, MaxInFlight: 1,
		SigningKeys: []outbox.SigningKey{signingKey(1), signingKey(2)}}
	v, err := outbox.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := outbox.DecodeEndpoint(v)
	if err != nil || !reflect.DeepEqual(got, ep) {
		t.Fatalf("round trip: %v", err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, ep); strings.Contains(out, string(signingKey(1))[5:20]) {
			t.Errorf("%s prints the private key", format)
		}
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(signingKey(1)), outbox.SigningKeyPrefix))
	raw[40] ^= 1
	for name, keys := range map[string][]outbox.SigningKey{
		"none":            nil,
		"three":           {signingKey(1), signingKey(2), signingKey(3)},
		"repeated":        {signingKey(1), signingKey(1)},
		"no prefix":       {outbox.SigningKey(strings.TrimPrefix(string(signingKey(1)), "whsk_"))},
		"seed only":       {outbox.SigningKey("whsk_" + base64.StdEncoding.EncodeToString(raw[:32]))},
		"foreign public":  {outbox.SigningKey("whsk_" + base64.StdEncoding.EncodeToString(raw))},
		"a whsec_ secret": {outbox.SigningKey(secret(1))},
	} {
		bad := ep
		bad.SigningKeys = keys
		err := bad.Validate()
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
			continue
		}
		for _, k := range keys {
			if strings.Contains(err.Error(), string(k)[5:20]) {
				t.Errorf("%s: error %q shows a key", name, err)
			}
		}
	}
	for name, bad := range map[string]outbox.Endpoint{
		"keys on standard-webhooks": {URL: ep.URL, Scheme: outbox.SchemeStandardWebhooks, Secrets: []outbox.Secret{secret(1)}, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
		"keys on mkit-hook-v2":      {URL: ep.URL, Scheme: outbox.SchemeMkitHookV2, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
		"secrets on v1a":            {URL: ep.URL, Scheme: outbox.SchemeStandardWebhooksV1a, Secrets: []outbox.Secret{secret(1)}, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
	} {
		if err := bad.Validate(); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	// A row written before the scheme existed reads unchanged.
	old := testEndpoint()
	v, _ = outbox.EncodeEndpoint(&old)
	if strings.Contains(string(v), "signing_keys") {
		t.Error("a standard-webhooks row carries signing_keys")
	}
	if got, err := outbox.DecodeEndpoint(store.Value(v)); err != nil || !reflect.DeepEqual(got, old) {
		t.Errorf("old row: %v", err)
	}
}

func TestSigningKeyPublicKeyIsItsEd25519PublicHalf(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = 1
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if got, want := signingKey(1).PublicKey(), "whpk_"+base64.StdEncoding.EncodeToString(pub); got != want {
		t.Errorf("public key %q, want %q", got, want)
	}
	a, err := outbox.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := outbox.NewSigningKey()
	if a == b || a.PublicKey() == "" || a.PublicKey() == b.PublicKey() {
		t.Error("generated keys are not distinct usable pairs")
	}
}
