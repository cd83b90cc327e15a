package outbox_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func TestPutEndpointGeneratesAKeyPairAndRotatesItOnRequest(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spec := outbox.EndpointSpec{Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true}
		first := e.put("billing", spec)
		if len(first.Endpoint.SigningKeys) != 1 || first.Generated != "" || len(first.Endpoint.Secrets) != 0 {
			t.Fatalf("first put: %d keys, generated secret %v, %d secrets", len(first.Endpoint.SigningKeys), first.Generated != "", len(first.Endpoint.Secrets))
		}
		current := first.Endpoint.SigningKeys[0]
		if !strings.HasPrefix(current.PublicKey(), schema.PublicKeyPrefix) {
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
		again = e.put("billing", outbox.EndpointSpec{Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true})
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
		back := e.put("billing", outbox.EndpointSpec{Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true}).Endpoint.SigningKeys
		if len(back) != 1 || back[0] == next[0] || back[0] == next[1] {
			t.Fatal("returning to v1a must generate a new key pair")
		}
		// Each endpoint has its own pair.
		other := e.put("audit", outbox.EndpointSpec{Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true}).Endpoint.SigningKeys
		if other[0] == back[0] {
			t.Fatal("two endpoints share a key")
		}
	})
}

func TestPutEndpointRefusesRotateKeyForOtherSchemes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		before := e.all()
		for _, scheme := range []schema.Scheme{"", schema.SchemeMkitHookV2, schema.SchemeStandardWebhooks} {
			_, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://h.example.com/", Scheme: scheme, RotateKey: true, Enabled: true})
			if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "rotate_key") {
				t.Errorf("%q: got %v, want ErrInvalid naming rotate_key", scheme, err)
			}
		}
		_, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://h.example.com/", Scheme: schema.SchemeStandardWebhooksV1a, Secret: secret(1), Enabled: true})
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("a secret for v1a: got %v", err)
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused put changed the store")
		}
	})
}

func secret(b byte) schema.Secret {
	return schema.Secret(schema.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)))
}
