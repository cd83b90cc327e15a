package outbound_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/signing"
)

// receiver is a loopback endpoint that records every request it gets.
type receiver struct {
	srv  *httptest.Server
	url  *url.URL
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	header http.Header
	host   string
	body   []byte
}

func newReceiver(t testing.TB) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.seen = append(r.seen, seenRequest{header: req.Header.Clone(), host: req.Host, body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	u, err := url.Parse(r.srv.URL + "/hooks/relay")
	if err != nil {
		t.Fatal(err)
	}
	r.url = u
	return r
}

func loopbackChannel(t testing.TB) *outbound.Channel {
	c, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func mkitSigner(t testing.TB) *signing.MkitSigner {
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	s, err := signing.NewMkitSigner("relay-test-1", key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// Two attempts of one message carry the same body and id, and each is signed
// afresh: a new nonce, created-at and signature. Both verify on the receiver.
func TestEveryAttemptIsSignedAfreshAndVerifies(t *testing.T) {
	rcv := newReceiver(t)
	signer := mkitSigner(t)
	now := time.UnixMilli(1_764_460_800_000)
	s := &outbound.Sender{Channel: loopbackChannel(t), Mkit: signer, Now: func() time.Time { return now }}
	msg := outbound.Message{ID: "msg_7f3a", Body: []byte(`{"type":"outcome.expired","timestamp":"2025-11-30T00:00:00Z","data":{"namespace":"acme"}}`)}
	ctx := context.Background()
	for _, scheme := range []signing.Scheme{signing.SchemeMkit, signing.SchemeStandard} {
		target := outbound.Target{URL: rcv.url, Scheme: scheme, Namespace: "acme", Secrets: []string{secret}}
		for range 2 {
			if err := s.Send(ctx, target, msg); err != nil {
				t.Fatalf("%s: %v", scheme, err)
			}
			now = now.Add(1500 * time.Millisecond)
		}
	}
	if len(rcv.seen) != 4 {
		t.Fatalf("receiver saw %d requests, want 4", len(rcv.seen))
	}
	for _, r := range rcv.seen {
		if string(r.body) != string(msg.Body) || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("request body %q, content type %q", r.body, r.header.Get("Content-Type"))
		}
	}

	keys, err := json.Marshal(struct {
		Version int                 `json:"version"`
		Keys    []signing.PublicKey `json:"keys"`
	}{1, []signing.PublicKey{signer.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := hookverify.ParseKeyList(keys)
	if err != nil {
		t.Fatal(err)
	}
	verifyAt := time.UnixMilli(1_764_460_800_000 + 5_000)
	mkit := &hookverify.MkitVerifier{Keys: list, Audience: rcv.srv.URL, Namespaces: []string{"acme"}, Now: func() time.Time { return verifyAt }}
	a, b := rcv.seen[0].header, rcv.seen[1].header
	for _, h := range []string{signing.HeaderMkitNonce, signing.HeaderMkitCreatedAt, signing.HeaderMkitSignature} {
		if a.Get(h) == "" || a.Get(h) == b.Get(h) {
			t.Errorf("%s is %q then %q, want two different values", h, a.Get(h), b.Get(h))
		}
	}
	if a.Get(signing.HeaderMkitDigest) != b.Get(signing.HeaderMkitDigest) {
		t.Error("the digest of one body differs between attempts")
	}
	for i, r := range rcv.seen[:2] {
		if err := mkit.Verify(r.header, rcv.url.Path, r.body); err != nil {
			t.Errorf("mkit attempt %d does not verify: %v", i, err)
		}
	}

	std := &hookverify.StandardVerifier{Secrets: []string{secret}, Now: func() time.Time { return verifyAt }}
	c, d := rcv.seen[2].header, rcv.seen[3].header
	if c.Get("webhook-id") != msg.ID || d.Get("webhook-id") != msg.ID {
		t.Errorf("webhook-id %q and %q, want %q on both", c.Get("webhook-id"), d.Get("webhook-id"), msg.ID)
	}
	if c.Get("webhook-timestamp") == d.Get("webhook-timestamp") || c.Get("webhook-signature") == d.Get("webhook-signature") {
		t.Error("a retry repeated the timestamp or signature of the first attempt")
	}
	for i, r := range rcv.seen[2:] {
		if err := std.Verify(r.header, r.body); err != nil {
			t.Errorf("standard attempt %d does not verify: %v", i, err)
		}
	}
}

func TestAnAttemptThatCannotBeSignedIsNotSent(t *testing.T) {
	rcv := newReceiver(t)
	s := &outbound.Sender{Channel: loopbackChannel(t)}
	for _, target := range []outbound.Target{
		{URL: rcv.url, Scheme: signing.SchemeMkit, Namespace: "acme"},                  // no signing key
		{URL: rcv.url, Scheme: signing.SchemeStandard, Secrets: []string{"not-whsec"}}, // malformed secret
		{URL: rcv.url, Scheme: "rot13"},
	} {
		err := s.Send(context.Background(), target, outbound.Message{ID: "msg_1", Body: []byte("{}")})
		if !errors.Is(err, outbound.ErrUnsignable) {
			t.Errorf("%s: %v, want ErrUnsignable", target.Scheme, err)
		}
	}
	if len(rcv.seen) != 0 {
		t.Fatalf("the receiver got %d unsigned requests", len(rcv.seen))
	}
}
