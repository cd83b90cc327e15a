package schema_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// signingKey is the v1a key whose seed is 32 bytes of b.
func signingKey(b byte) schema.SigningKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return schema.SigningKey(schema.SigningKeyPrefix + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(seed)))
}

func TestSigningKeysValidateRoundTripAndNeverPrint(t *testing.T) {
	ep := schema.Endpoint{URL: "https://x.example/in", Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true, MaxInFlight: 1,
		SigningKeys: []schema.SigningKey{signingKey(1), signingKey(2)}}
	v, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeEndpoint(v)
	if err != nil || !reflect.DeepEqual(got, ep) {
		t.Fatalf("round trip: %v", err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, ep); strings.Contains(out, string(signingKey(1))[5:20]) {
			t.Errorf("%s prints the private key", format)
		}
	}
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(signingKey(1)), schema.SigningKeyPrefix))
	raw[40] ^= 1
	for name, keys := range map[string][]schema.SigningKey{
		"none":            nil,
		"three":           {signingKey(1), signingKey(2), signingKey(3)},
		"repeated":        {signingKey(1), signingKey(1)},
		"no prefix":       {schema.SigningKey(strings.TrimPrefix(string(signingKey(1)), "whsk_"))},
		"seed only":       {schema.SigningKey("whsk_" + base64.StdEncoding.EncodeToString(raw[:32]))},
		"foreign public":  {schema.SigningKey("whsk_" + base64.StdEncoding.EncodeToString(raw))},
		"a whsec_ secret": {schema.SigningKey(secret(1))},
	} {
		bad := ep
		bad.SigningKeys = keys
		err := bad.Validate()
		if !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
			continue
		}
		for _, k := range keys {
			if strings.Contains(err.Error(), string(k)[5:20]) {
				t.Errorf("%s: error %q shows a key", name, err)
			}
		}
	}
	for name, bad := range map[string]schema.Endpoint{
		"keys on standard-webhooks": {URL: ep.URL, Scheme: schema.SchemeStandardWebhooks, Secrets: []schema.Secret{secret(1)}, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
		"keys on mkit-hook-v2":      {URL: ep.URL, Scheme: schema.SchemeMkitHookV2, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
		"secrets on v1a":            {URL: ep.URL, Scheme: schema.SchemeStandardWebhooksV1a, Secrets: []schema.Secret{secret(1)}, SigningKeys: ep.SigningKeys, MaxInFlight: 1},
	} {
		if err := bad.Validate(); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: got %v", name, err)
		}
	}
	// A row written before the scheme existed reads unchanged.
	old := testEndpoint()
	v, _ = schema.EncodeEndpoint(&old)
	if strings.Contains(string(v), "signing_keys") {
		t.Error("a standard-webhooks row carries signing_keys")
	}
	if got, err := schema.DecodeEndpoint(store.Value(v)); err != nil || !reflect.DeepEqual(got, old) {
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
	a, err := schema.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := schema.NewSigningKey()
	if a == b || a.PublicKey() == "" || a.PublicKey() == b.PublicKey() {
		t.Error("generated keys are not distinct usable pairs")
	}
}
