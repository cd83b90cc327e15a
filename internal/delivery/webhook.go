package delivery

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/signing"
)

// Error classes Webhooks assigns before or instead of a call. A failed call
// keeps the class the channel gave it (outbound.Class: "status", "gone",
// "connect", ...).
const (
	// ClassURL: the endpoint's URL does not parse (the channel's own URL
	// rules answer with the same class).
	ClassURL = string(outbound.ClassURL)
	// ClassUnsignable: the attempt could not be signed (no signing key, a
	// malformed secret, an unknown scheme). Retrying cannot help until the
	// configuration changes.
	ClassUnsignable = "unsignable"
	// ClassEncode: no webhook body could be built for the outcome.
	ClassEncode = "encode"
)

// Webhooks is the Sink that posts each outcome as a signed webhook. Every
// call signs afresh (new nonce, created-at and signature) over the same
// body and message id, so a retry is a new request for the same message.
type Webhooks struct {
	Sender *outbound.Sender
	// Audience is relay's own public origin, written into every body as
	// data.audience; the signature's audience is the endpoint's origin.
	Audience string

	urls urlCache
}

// maxCachedURLs bounds urlCache: past it the cache starts afresh.
const maxCachedURLs = 4096

// urlCache holds endpoint URLs as parsed, by their text, so that the calls
// of an endpoint parse its URL once rather than each. A parsed URL is
// shared by concurrent calls: the sender and the channel only read it (the
// request takes a copy).
type urlCache struct {
	m sync.Map // string to *url.URL
	n atomic.Int64
}

func (c *urlCache) parse(raw string) (*url.URL, error) {
	if u, ok := c.m.Load(raw); ok {
		return u.(*url.URL), nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	// Endpoints edited again and again, or more of them than the bound,
	// only cost a parse each again.
	if c.n.Add(1) > maxCachedURLs {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(raw, u)
	return u, nil
}

var _ Sink = (*Webhooks)(nil)

// Deliver signs and posts o to its endpoint. nil means the endpoint
// answered 2xx; every other outcome is an *Error whose text holds no URL,
// secret or body.
func (w *Webhooks) Deliver(ctx context.Context, o Parcel) error {
	_, err := w.DeliverStatus(ctx, o)
	return err
}

// DeliverStatus is Deliver, with the 2xx status the endpoint answered.
func (w *Webhooks) DeliverStatus(ctx context.Context, o Parcel) (int, error) {
	u, err := w.urls.parse(o.Endpoint.URL)
	if err != nil {
		// url.Error's text holds the URL, whose query may carry a token.
		return 0, &Error{Class: ClassURL, Reason: "endpoint URL does not parse"}
	}
	var scheme signing.Scheme
	switch o.Endpoint.Scheme {
	case schema.SchemeMkitHookV2, "":
		// An unset scheme is the default, as Endpoint.WithDefaults has it.
		scheme = signing.SchemeMkit
	case schema.SchemeStandardWebhooks:
		scheme = signing.SchemeStandard
	case schema.SchemeStandardWebhooksV1a:
		scheme = signing.SchemeStandardV1a
	default:
		return 0, unsignable()
	}
	secrets := make([]string, len(o.Endpoint.Secrets))
	for i, s := range o.Endpoint.Secrets {
		secrets[i] = string(s)
	}
	var keys []string
	for _, k := range o.Endpoint.SigningKeys {
		keys = append(keys, string(k))
	}
	body, err := outbox.EncodeWebhook(&o.Outcome, o.Namespace, w.Audience)
	if err != nil {
		e := &Error{Class: ClassEncode, Reason: "cannot encode the webhook"}
		if errors.Is(err, outbox.ErrInvalid) {
			// ErrInvalid's text names the broken rule, never a value.
			e.Reason += ": " + err.Error()
		}
		return 0, e
	}
	msg := outbound.Message{
		ID:   outbox.MessageID(o.Namespace, o.EndpointID, o.Seq, o.Outcome.ReservationID),
		Body: body,
	}
	var headers map[string]string
	if len(o.Endpoint.Headers) > 0 {
		headers = make(map[string]string, len(o.Endpoint.Headers))
		for k, v := range o.Endpoint.Headers {
			headers[k] = string(v)
		}
	}
	status, err := w.Sender.SendStatus(ctx, outbound.Target{URL: u, Scheme: scheme, Namespace: o.Namespace, Secrets: secrets, PrivateKeys: keys, Headers: headers}, msg)
	if err == nil {
		return status, nil
	}
	var he *outbound.Error
	switch {
	case errors.As(err, &he):
		return 0, &Error{Class: string(he.Class), Status: he.Status, RetryAfter: he.RetryAfter, Gone: he.Gone, Reason: he.Error(), Excerpt: he.Excerpt}
	case errors.Is(err, outbound.ErrUnsignable):
		return 0, unsignable()
	}
	// Send documents no other error; its text is not known to be safe.
	return 0, &Error{Class: ClassError, Reason: "webhook not sent"}
}

// unsignable keeps none of the signer's text: it may describe a secret.
func unsignable() *Error {
	return &Error{Class: ClassUnsignable, Reason: "cannot sign the webhook"}
}
