package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/signing"
)

// Target is where and how one endpoint receives webhooks.
type Target struct {
	URL    *url.URL
	Scheme signing.Scheme
	// Namespace is the namespace the endpoint belongs to; signing.SchemeMkit
	// signs it, so a receiver can refuse other tenants' webhooks.
	Namespace string
	// Secrets are the endpoint's whsec_ secrets for signing.SchemeStandard;
	// during a rotation every active one signs.
	Secrets []string
	// PrivateKeys are the endpoint's whsk_ keys for
	// signing.SchemeStandardV1a; during a rotation every active one signs.
	PrivateKeys []string
	// Headers are the endpoint's own headers, sent with every attempt. One
	// that names a header relay sets (a signature header, Content-Type,
	// User-Agent, Host, traceparent, tracestate) is dropped: relay's own
	// always reach the receiver.
	Headers map[string]string
}

// Message is one webhook: the same ID and body bytes on every attempt.
type Message struct {
	// ID is stable per outcome and endpoint (Standard Webhooks' webhook-id).
	ID   string
	Body []byte
}

// Sender signs each attempt afresh and posts it: a retry carries a new
// nonce, created-at and signature, never a replay of an earlier request.
type Sender struct {
	Channel *Channel
	// Mkit signs signing.SchemeMkit targets; nil refuses them.
	Mkit *signing.MkitSigner
	// Now is the clock of created-at and webhook-timestamp (time.Now when nil).
	Now func() time.Time
}

// reservedHeaders are set by the sender or the channel whatever the
// endpoint asks, besides the signature headers. The trace context is
// relay's: it names the attempt's span, or is not sent.
var reservedHeaders = map[string]bool{"Content-Type": true, "User-Agent": true, "Host": true, "Content-Length": true,
	"Traceparent": true, "Tracestate": true}

// ErrUnsignable marks an attempt that could not be signed (unknown scheme,
// no signer, a malformed secret or message id). Retrying cannot help until
// the configuration changes.
var ErrUnsignable = errors.New("outbound: cannot sign webhook")

// Send signs and posts one attempt. nil means the endpoint answered 2xx;
// otherwise the error is a *Error from the channel or wraps ErrUnsignable.
func (s *Sender) Send(ctx context.Context, t Target, m Message) error {
	_, err := s.SendStatus(ctx, t, m)
	return err
}

// SendStatus is Send, with the 2xx status the endpoint answered.
func (s *Sender) SendStatus(ctx context.Context, t Target, m Message) (int, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	var (
		h   http.Header
		err error
	)
	switch t.Scheme {
	case signing.SchemeStandard:
		h, err = signing.SignStandard(m.ID, t.Secrets, m.Body, now())
	case signing.SchemeStandardV1a:
		h, err = signing.SignStandardV1a(m.ID, t.PrivateKeys, m.Body, now())
	case signing.SchemeMkit, "":
		if s.Mkit == nil {
			return 0, fmt.Errorf("%w: no mkit-hook signing key", ErrUnsignable)
		}
		h, err = s.Mkit.Sign(t.URL, t.Namespace, m.Body, now())
	default:
		return 0, fmt.Errorf("%w: unknown scheme %q", ErrUnsignable, t.Scheme)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnsignable, err)
	}
	for name, v := range t.Headers {
		k := http.CanonicalHeaderKey(name)
		if _, signed := h[k]; signed || reservedHeaders[k] {
			continue
		}
		h[k] = []string{v}
	}
	h.Set("Content-Type", "application/json")
	// The span ctx names is the attempt's own (delivery starts one for
	// each call when tracing is on), so a receiver that traces continues
	// the trace. It is not signed: it says where the request belongs, not
	// who sent it.
	if trace.SpanContextFromContext(ctx).IsValid() {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	}
	return s.Channel.PostStatus(ctx, t.URL, h, m.Body)
}
