package delivery_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/signing"
)

// Helpers of the webhook sink's tests; names start with wh so they stay
// apart from the handler's tests in this package.

var whT0 = time.UnixMilli(1_764_460_800_000)

const (
	whAudience = "https://relay.example.com"
	whPath     = "/hooks/relay"
	// whToken sits in every endpoint URL's query: no error text may hold it.
	whToken = "s3cret-token"
)

// whSecret is a valid whsec_ secret of 32 bytes first, first+1, ...
func whSecret(first byte) schema.Secret {
	key := make([]byte, 32)
	for i := range key {
		key[i] = first + byte(i)
	}
	return schema.Secret(schema.SecretPrefix + base64.StdEncoding.EncodeToString(key))
}

// whReceived is one request as the receiver saw it.
type whReceived struct {
	header http.Header
	path   string
	body   []byte
}

// whBundle is a loopback receiver and the sink that posts to it through a
// real channel, with relay's signing clock moved by hand.
type whBundle struct {
	srv    *httptest.Server
	reqs   chan whReceived
	now    time.Time
	signer *signing.MkitSigner
	sink   *delivery.Webhooks
}

// whSetup starts a receiver that records each request, then lets answer
// reply (204 when nil).
func whSetup(t *testing.T, answer func(w http.ResponseWriter)) *whBundle {
	t.Helper()
	b := &whBundle{reqs: make(chan whReceived, 8), now: whT0}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// Recorded before the answer, so it is there when Deliver returns.
		b.reqs <- whReceived{header: r.Header.Clone(), path: r.URL.EscapedPath(), body: body}
		if answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		answer(w)
	}))
	t.Cleanup(b.srv.Close)

	ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.CloseIdleConnections)
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = 1 + byte(i)
	}
	if b.signer, err = signing.NewMkitSigner("relay-1", ed25519.NewKeyFromSeed(seed)); err != nil {
		t.Fatal(err)
	}
	b.sink = &delivery.Webhooks{
		Sender:   &outbound.Sender{Channel: ch, Mkit: b.signer, Now: func() time.Time { return b.now }},
		Audience: whAudience,
	}
	return b
}

// outcome is a committed outcome for the receiver's endpoint under scheme.
func (b *whBundle) outcome(scheme schema.Scheme, secrets ...schema.Secret) delivery.Parcel {
	return delivery.Parcel{
		Namespace:  "acme",
		EndpointID: "billing",
		Endpoint: schema.Endpoint{
			URL: b.srv.URL + whPath + "?token=" + whToken, Scheme: scheme, Secrets: secrets,
			Enabled: true, MaxInFlight: 1,
		},
		Seq: 42,
		Outcome: schema.Outcome{
			ReservationID: "r-7f3a", Repository: "acme/widgets", OccurredUnixMs: whT0.UnixMilli(),
			Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256,
				Refs: []schema.Ref{{Name: "refs/heads/main", New: strings.Repeat("ab", 32)}}},
		},
	}
}

// one is the single request the receiver got since the last call.
func (b *whBundle) one(t *testing.T) whReceived {
	t.Helper()
	select {
	case r := <-b.reqs:
		b.none(t)
		return r
	default:
		t.Fatal("no request reached the receiver")
		return whReceived{}
	}
}

func (b *whBundle) none(t *testing.T) {
	t.Helper()
	select {
	case <-b.reqs:
		t.Fatal("a request reached the receiver")
	default:
	}
}

// mkitVerifier is a receiver at this bundle's origin trusting relay's key
// list as relay serves it.
func (b *whBundle) mkitVerifier(t *testing.T) *hookverify.MkitVerifier {
	t.Helper()
	list, err := signing.NewKeyList(b.signer.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	signing.KeysHandler(list).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	keys, err := hookverify.ParseKeyList(rec.Body.Bytes())
	if err != nil {
		t.Fatalf("receiver cannot parse the served key list: %v", err)
	}
	return &hookverify.MkitVerifier{Keys: keys, Audience: b.srv.URL, Namespaces: []string{"acme"}, Now: func() time.Time { return whT0 }}
}

// wantBody is the body every attempt of o must carry.
func wantBody(t *testing.T, o delivery.Parcel) []byte {
	t.Helper()
	body, err := outbox.EncodeWebhook(&o.Outcome, o.Namespace, whAudience)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// sinkError is err as a *delivery.Error whose text holds neither the URL
// nor its token.
func (b *whBundle) sinkError(t *testing.T, err error) *delivery.Error {
	t.Helper()
	var e *delivery.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want a *delivery.Error", err, err)
	}
	for _, leak := range []string{b.srv.URL, strings.TrimPrefix(b.srv.URL, "http://"), whToken, whPath} {
		if strings.Contains(e.Error(), leak) {
			t.Errorf("error text %q holds %q", e.Error(), leak)
		}
	}
	return e
}

func TestWebhooksStandardDeliveryVerifiesWithEachSecret(t *testing.T) {
	t.Parallel()
	b := whSetup(t, nil)
	// During a rotation both secrets sign: a receiver holding either one
	// verifies.
	current, next := whSecret(1), whSecret(100)
	o := b.outcome(schema.SchemeStandardWebhooks, current, next)
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
	if got.path != whPath {
		t.Errorf("posted to path %q, want %q", got.path, whPath)
	}
	if ct := got.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, s := range []schema.Secret{current, next} {
		v := &hookverify.StandardVerifier{Secrets: []string{string(s)}, Now: func() time.Time { return whT0 }}
		if err := v.Verify(got.header, got.body); err != nil {
			t.Errorf("receiver with one of the secrets refuses the delivery: %v", err)
		}
	}
	other := &hookverify.StandardVerifier{Secrets: []string{string(whSecret(200))}, Now: func() time.Time { return whT0 }}
	if err := other.Verify(got.header, got.body); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("receiver with another secret: %v, want ErrBadSignature", err)
	}
}

func TestWebhooksMkitDeliveryVerifiesWithThePublishedKeys(t *testing.T) {
	t.Parallel()
	b := whSetup(t, nil)
	o := b.outcome(schema.SchemeMkitHookV2)
	if err := b.sink.Deliver(context.Background(), o); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	got := b.one(t)

	if want := wantBody(t, o); string(got.body) != string(want) {
		t.Errorf("body\n got %s\nwant %s", got.body, want)
	}
	if err := b.mkitVerifier(t).Verify(got.header, got.path, got.body); err != nil {
		t.Fatalf("receiver refuses the delivery: %v", err)
	}
	// The signature's audience is the endpoint's origin; relay's own
	// audience is in the body only.
	if a := got.header.Get(hookverify.HeaderMkitAudience); a != b.srv.URL {
		t.Errorf("signed audience %q, want the endpoint's origin %q", a, b.srv.URL)
	}
	if got.header.Get(hookverify.HeaderStandardSignature) != "" {
		t.Error("an mkit-hook-v2 delivery carries a Standard Webhooks signature")
	}
}

// The stream's namespace is signed and in the body: a receiver of acme takes
// acme's webhook and refuses another namespace's sent to the same URL.
func TestWebhooksMkitDeliverySignsTheStreamsNamespace(t *testing.T) {
	t.Parallel()
	b := whSetup(t, nil)
	v := b.mkitVerifier(t)
	for _, ns := range []string{"acme", "attacker-a"} {
		o := b.outcome(schema.SchemeMkitHookV2)
		o.Namespace = ns
		if err := b.sink.Deliver(context.Background(), o); err != nil {
			t.Fatalf("Deliver for %s: %v", ns, err)
		}
		got := b.one(t)
		if h := got.header.Get(hookverify.HeaderMkitNamespace); h != ns {
			t.Errorf("%s: signed namespace %q", ns, h)
		}
		if !strings.Contains(string(got.body), `"namespace":"`+ns+`"`) {
			t.Errorf("%s: body %s does not name it", ns, got.body)
		}
		err := v.Verify(got.header, got.path, got.body)
		switch {
		case ns == "acme" && err != nil:
			t.Errorf("acme's receiver refuses acme's webhook: %v", err)
		case ns != "acme" && !errors.Is(err, hookverify.ErrNamespace):
			t.Errorf("acme's receiver given %s's webhook: %v, want ErrNamespace", ns, err)
		}
	}
}

func TestWebhooksRetrySendsTheSameMessageSignedAfresh(t *testing.T) {
	t.Parallel()
	t.Run("standard-webhooks", func(t *testing.T) {
		t.Parallel()
		b := whSetup(t, nil)
		secret := whSecret(1)
		o := b.outcome(schema.SchemeStandardWebhooks, secret)
		v := &hookverify.StandardVerifier{Secrets: []string{string(secret)}, Now: func() time.Time { return whT0 }}
		var attempts []whReceived
		for range 2 {
			if err := b.sink.Deliver(context.Background(), o); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			attempts = append(attempts, b.one(t))
			// webhook-timestamp counts seconds: the retry comes later.
			b.now = b.now.Add(time.Second)
		}
		first, second := attempts[0], attempts[1]
		if string(first.body) != string(second.body) {
			t.Errorf("bodies differ:\n%s\n%s", first.body, second.body)
		}
		if a, b := first.header.Get(hookverify.HeaderStandardID), second.header.Get(hookverify.HeaderStandardID); a != b || a == "" {
			t.Errorf("webhook-id %q then %q, want one stable id", a, b)
		}
		for _, h := range []string{hookverify.HeaderStandardTimestamp, hookverify.HeaderStandardSignature} {
			if first.header.Get(h) == second.header.Get(h) {
				t.Errorf("%s repeated across attempts: %q", h, first.header.Get(h))
			}
		}
		for i, a := range attempts {
			if err := v.Verify(a.header, a.body); err != nil {
				t.Errorf("attempt %d refused: %v", i+1, err)
			}
		}
	})
	t.Run("mkit-hook-v2", func(t *testing.T) {
		t.Parallel()
		b := whSetup(t, nil)
		o := b.outcome(schema.SchemeMkitHookV2)
		// One verifier for both: its replay cache refuses a repeated nonce.
		v := b.mkitVerifier(t)
		var attempts []whReceived
		for range 2 {
			// Same instant: the nonce alone makes the retry a new request.
			if err := b.sink.Deliver(context.Background(), o); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			attempts = append(attempts, b.one(t))
		}
		first, second := attempts[0], attempts[1]
		if string(first.body) != string(second.body) {
			t.Errorf("bodies differ:\n%s\n%s", first.body, second.body)
		}
		for _, h := range []string{hookverify.HeaderMkitNonce, hookverify.HeaderMkitSignature} {
			if first.header.Get(h) == second.header.Get(h) {
				t.Errorf("%s repeated across attempts: %q", h, first.header.Get(h))
			}
		}
		for i, a := range attempts {
			if err := v.Verify(a.header, a.path, a.body); err != nil {
				t.Errorf("attempt %d refused: %v", i+1, err)
			}
		}
	})
}

func TestWebhooksGoneEndpointIsReportedGone(t *testing.T) {
	t.Parallel()
	b := whSetup(t, func(w http.ResponseWriter) { w.WriteHeader(http.StatusGone) })
	err := b.sink.Deliver(context.Background(), b.outcome(schema.SchemeMkitHookV2))
	b.one(t)
	e := b.sinkError(t, err)
	if !e.Gone || e.Status != http.StatusGone || e.Class != string(outbound.ClassGone) {
		t.Errorf("got %+v, want Gone, status 410, class gone", e)
	}
}

func TestWebhooksRetryAfterIsPassedOn(t *testing.T) {
	t.Parallel()
	b := whSetup(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	err := b.sink.Deliver(context.Background(), b.outcome(schema.SchemeStandardWebhooks, whSecret(1)))
	b.one(t)
	e := b.sinkError(t, err)
	if e.RetryAfter != 7*time.Second || e.Status != http.StatusServiceUnavailable || e.Gone || e.Class != string(outbound.ClassStatus) {
		t.Errorf("got %+v, want RetryAfter 7s, status 503, class status", e)
	}
	if e.Reason == "" {
		t.Error("no reason")
	}
}

func TestWebhooksRefusesWhatItCannotSendWithoutCalling(t *testing.T) {
	t.Parallel()
	badSecret := schema.Secret("whsec_" + strings.Repeat("*", 40))
	cases := []struct {
		name       string
		change     func(b *whBundle, o *delivery.Parcel)
		class      string
		wantReason string // exact, when set
	}{
		{"unparsable URL", func(b *whBundle, o *delivery.Parcel) {
			o.Endpoint.URL = b.srv.URL + "/%zz?token=" + whToken
		}, delivery.ClassURL, ""},
		{"no mkit signer", func(b *whBundle, _ *delivery.Parcel) {
			b.sink.Sender.Mkit = nil
		}, delivery.ClassUnsignable, "cannot sign the webhook"},
		{"malformed secret", func(_ *whBundle, o *delivery.Parcel) {
			o.Endpoint.Scheme, o.Endpoint.Secrets = schema.SchemeStandardWebhooks, []schema.Secret{badSecret}
		}, delivery.ClassUnsignable, "cannot sign the webhook"},
		{"unknown scheme", func(_ *whBundle, o *delivery.Parcel) {
			o.Endpoint.Scheme = "hmac-md5"
		}, delivery.ClassUnsignable, "cannot sign the webhook"},
		{"invalid outcome", func(_ *whBundle, o *delivery.Parcel) {
			o.Outcome.Expired = &schema.Expired{} // a second kind
		}, delivery.ClassEncode, ""},
		{"no audience", func(b *whBundle, _ *delivery.Parcel) {
			b.sink.Audience = ""
		}, delivery.ClassEncode, ""},
		{"no namespace", func(_ *whBundle, o *delivery.Parcel) {
			o.Namespace = ""
		}, delivery.ClassEncode, ""},
		{"malformed namespace", func(_ *whBundle, o *delivery.Parcel) {
			o.Namespace = "Acme\nX-Mkit-Hook-Namespace: victim"
		}, delivery.ClassEncode, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := whSetup(t, nil)
			o := b.outcome(schema.SchemeMkitHookV2)
			c.change(b, &o)
			e := b.sinkError(t, b.sink.Deliver(context.Background(), o))
			b.none(t)
			if e.Class != c.class {
				t.Errorf("class %q, want %q (%v)", e.Class, c.class, e)
			}
			if c.wantReason != "" && e.Reason != c.wantReason {
				t.Errorf("reason %q, want %q", e.Reason, c.wantReason)
			}
			if e.Status != 0 || e.Gone || e.RetryAfter != 0 {
				t.Errorf("got %+v, want no status, not gone, no retry-after", e)
			}
			if strings.Contains(e.Error(), string(badSecret)) || strings.Contains(e.Error(), "acme/widgets") {
				t.Errorf("error text %q holds a secret or the body", e.Error())
			}
		})
	}
}

// A receiver relay does not control may answer anything, including the
// request's own headers. The excerpt is the first bytes of its answer and
// nothing relay sent: with the signature headers' names filling those
// bytes and their values after, no value reaches the excerpt.
func TestWebhooksExcerptIsOnlyTheStartOfTheAnswer(t *testing.T) {
	b := whSetup(t, nil)
	for _, scheme := range []schema.Scheme{schema.SchemeStandardWebhooks, schema.SchemeMkitHookV2} {
		t.Run(string(scheme), func(t *testing.T) {
			var sent http.Header
			var answer []byte
			b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				sent = r.Header.Clone()
				var names, values strings.Builder
				for len(names.String()) < 2*outbound.MaxExcerptBytes {
					for k, v := range r.Header {
						names.WriteString(k + "\n")
						values.WriteString(k + ": " + strings.Join(v, ",") + "\n")
					}
				}
				answer = []byte(names.String() + values.String())
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write(answer)
			})
			err := b.sink.Deliver(t.Context(), b.outcome(scheme, whSecret(1)))
			e := b.sinkError(t, err)
			if e.Status != http.StatusBadRequest || string(e.Excerpt) != string(answer[:outbound.MaxExcerptBytes]) {
				t.Fatalf("status %d, excerpt %q: want the first %d bytes of the answer", e.Status, e.Excerpt, outbound.MaxExcerptBytes)
			}
			if strings.Contains(e.Error(), string(answer[:16])) {
				t.Fatalf("error text %q holds the answer", e.Error())
			}
			shown := schema.Excerpt(e.Excerpt)
			if len(sent) < 3 {
				t.Fatalf("request headers %v", sent)
			}
			for k, v := range sent {
				for _, value := range v {
					if len(value) >= 8 && (strings.Contains(shown, value) || strings.Contains(string(e.Excerpt), value)) {
						t.Errorf("excerpt holds the value of request header %s", k)
					}
				}
			}
		})
	}
}
