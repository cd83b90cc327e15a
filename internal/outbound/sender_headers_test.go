package outbound_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

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

// An attempt carries the W3C trace context of the span its context holds
// (delivery's span of the attempt), and never the endpoint's own
// traceparent or tracestate; with no span, it carries none at all.
func TestAnAttemptCarriesTheTraceContextOfItsSpanOnly(t *testing.T) {
	rcv := newReceiver(t)
	s := &outbound.Sender{Channel: loopbackChannel(t), Mkit: mkitSigner(t)}
	msg := outbound.Message{ID: "msg_7f3a", Body: []byte(`{"data":{"namespace":"acme"}}`)}
	forged := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "tracestate": "forged=1"}
	target := outbound.Target{URL: rcv.url, Scheme: signing.SchemeStandard, Namespace: "acme", Secrets: []string{secret}, Headers: forged}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x0a, 15: 0x9c}, SpanID: trace.SpanID{0x31, 7: 0x07}, TraceFlags: trace.FlagsSampled,
	})
	if err := s.Send(trace.ContextWithSpanContext(context.Background(), sc), target, msg); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(context.Background(), target, msg); err != nil {
		t.Fatal(err)
	}
	if len(rcv.seen) != 2 {
		t.Fatalf("receiver saw %d requests", len(rcv.seen))
	}
	traced, plain := rcv.seen[0].header, rcv.seen[1].header
	if got, want := traced.Values("Traceparent"), "00-0a00000000000000000000000000009c-3100000000000007-01"; len(got) != 1 || got[0] != want {
		t.Errorf("traceparent %q, want [%s]", got, want)
	}
	if got := traced.Get("Tracestate"); got != "" {
		t.Errorf("tracestate %q, want none", got)
	}
	if got := plain.Values("Traceparent"); len(got) != 0 || plain.Get("Tracestate") != "" {
		t.Errorf("an untraced attempt carried traceparent %q, tracestate %q", got, plain.Get("Tracestate"))
	}
}
