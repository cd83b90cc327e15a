package outbound_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/signing"
)

// An endpoint's header that names one relay sets never replaces relay's:
// the receiver sees relay's signature, content type, user agent and host.
// The row's validation refuses such names first; this is the second line.
func TestAnEndpointHeaderNeverReplacesRelaysOwn(t *testing.T) {
	rcv := newReceiver(t)
	now := time.UnixMilli(1_764_460_800_000)
	s := &outbound.Sender{Channel: loopbackChannel(t), Mkit: mkitSigner(t), Now: func() time.Time { return now }}
	msg := outbound.Message{ID: "msg_7f3a", Body: []byte(`{"data":{"namespace":"acme"}}`)}
	forged := map[string]string{
		"webhook-id": "msg_forged", "webhook-timestamp": "1", "webhook-signature": "v1,Zm9yZ2Vk",
		"x-mkit-hook-namespace": "other", "x-mkit-hook-signature": "00", "x-mkit-hook-nonce": "00",
		"content-type": "text/plain", "user-agent": "forged", "host": "forged.example",
		"x-tenant": "acme",
	}
	for _, scheme := range []signing.Scheme{signing.SchemeStandard, signing.SchemeMkit} {
		target := outbound.Target{URL: rcv.url, Scheme: scheme, Namespace: "acme", Secrets: []string{secret}, Headers: forged}
		if err := s.Send(context.Background(), target, msg); err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
	}
	if len(rcv.seen) != 2 {
		t.Fatalf("receiver saw %d requests, want 2", len(rcv.seen))
	}
	std, mkit := rcv.seen[0].header, rcv.seen[1].header
	for _, h := range []struct {
		got, forged string
	}{
		{std.Get("webhook-id"), "msg_forged"},
		{std.Get("webhook-timestamp"), "1"},
		{std.Get("webhook-signature"), "v1,Zm9yZ2Vk"},
		{mkit.Get(signing.HeaderMkitNamespace), "other"},
		{mkit.Get(signing.HeaderMkitSignature), "00"},
		{mkit.Get(signing.HeaderMkitNonce), "00"},
	} {
		if h.got == h.forged || h.got == "" {
			t.Errorf("receiver saw %q, want relay's value rather than the endpoint's %q", h.got, h.forged)
		}
	}
	for i, r := range rcv.seen {
		if r.header.Get("Content-Type") != "application/json" || r.header.Get("User-Agent") == "forged" || r.host == "forged.example" {
			t.Errorf("request %d: content type %q, user agent %q, host %q", i, r.header.Get("Content-Type"), r.header.Get("User-Agent"), r.host)
		}
		if got := r.header.Values("X-Tenant"); len(got) != 1 || got[0] != "acme" {
			t.Errorf("request %d: x-tenant %q, want [acme]", i, got)
		}
		for _, h := range []string{"Webhook-Id", "Webhook-Signature", signing.HeaderMkitSignature} {
			if n := len(r.header.Values(h)); n > 1 {
				t.Errorf("request %d: %d values of %s", i, n, h)
			}
		}
	}
	if std.Get("webhook-id") != msg.ID {
		t.Errorf("webhook-id %q, want %q", std.Get("webhook-id"), msg.ID)
	}
}
