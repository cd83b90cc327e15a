package delivery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func TestWebhooksV1aDeliveryVerifiesWithTheEndpointsPublicKeysOnly(t *testing.T) {
	t.Parallel()
	b := whSetup(t, nil)
	current, err := schema.NewSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	previous, _ := schema.NewSigningKey()
	other, _ := schema.NewSigningKey()
	o := b.outcome(schema.SchemeStandardWebhooksV1a)
	o.Endpoint.SigningKeys = []schema.SigningKey{current, previous}
	if err := b.sink.Deliver(context.Background(), o); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got := b.one(t)
	if want := wantBody(t, o); string(got.body) != string(want) {
		t.Errorf("body\n got %s\nwant %s", got.body, want)
	}
	if id, want := got.header.Get(hookverify.HeaderStandardID), outbox.MessageID("acme", "billing", 42, "r-7f3a"); id != want {
		t.Errorf("webhook-id %q, want %q", id, want)
	}
	sig := got.header.Get(hookverify.HeaderStandardSignature)
	if entries := strings.Split(sig, " "); len(entries) != 2 || !strings.HasPrefix(entries[0], "v1a,") || !strings.HasPrefix(entries[1], "v1a,") {
		t.Fatalf("webhook-signature %q: want two v1a entries during rotation", sig)
	}
	for _, k := range []schema.SigningKey{current, previous} {
		v := &hookverify.StandardVerifier{PublicKeys: []string{k.PublicKey()}, Now: func() time.Time { return whT0 }}
		if err := v.Verify(got.header, got.body); err != nil {
			t.Errorf("receiver with one of the public keys refuses the delivery: %v", err)
		}
		if strings.Contains(strings.Join(got.header.Values(hookverify.HeaderStandardSignature), ""), string(k)[5:25]) {
			t.Error("a private key went out in a header")
		}
	}
	v := &hookverify.StandardVerifier{PublicKeys: []string{other.PublicKey()}, Now: func() time.Time { return whT0 }}
	if err := v.Verify(got.header, got.body); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("receiver with another endpoint's public key: %v, want ErrBadSignature", err)
	}
}

func TestWebhooksV1aWithoutKeysIsUnsignableAndSaysNothingOfThem(t *testing.T) {
	t.Parallel()
	b := whSetup(t, nil)
	o := b.outcome(schema.SchemeStandardWebhooksV1a)
	o.Endpoint.SigningKeys = []schema.SigningKey{"whsk_bm90IGEga2V5"}
	err := b.sink.Deliver(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "cannot sign") || strings.Contains(err.Error(), "bm90IGEga2V5") {
		t.Fatalf("Deliver with a malformed key: %v", err)
	}
	b.none(t)
}
