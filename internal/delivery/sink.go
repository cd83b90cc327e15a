package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Parcel is one outcome addressed to one endpoint: what a Sink delivers.
type Parcel struct {
	Namespace  string
	EndpointID string
	// Endpoint is the endpoint's configuration as the fire read it.
	Endpoint schema.Endpoint
	// Seq is the outcome's sequence number in its namespace: with the
	// namespace and endpoint it identifies this delivery across attempts.
	Seq     uint64
	Outcome schema.Outcome
}

// Sink delivers one parcel to its endpoint. nil means the endpoint took it;
// an error means it did not, and is best an *Error. A Sink must return once
// ctx is done.
type Sink interface {
	Deliver(ctx context.Context, o Parcel) error
}

// StatusSink is a Sink that also tells the 2xx status the endpoint answered,
// kept with the delivering attempt; 0 when it cannot say.
type StatusSink interface {
	Sink
	DeliverStatus(ctx context.Context, o Parcel) (int, error)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, o Parcel) error

// Deliver calls f.
func (f SinkFunc) Deliver(ctx context.Context, o Parcel) error { return f(ctx, o) }

// Error is why a sink did not deliver. Its text is stored for operators and
// logged, so it never holds a URL, a secret or a body.
type Error struct {
	// Class is a short token for the attempt row ("status", "timeout",
	// "connect", ...).
	Class string
	// Status is the endpoint's HTTP status, 0 when it gave none.
	Status int
	// RetryAfter is how long the endpoint asked to be left alone; 0 when it
	// did not ask.
	RetryAfter time.Duration
	// Gone means the endpoint answered 410: it is disabled until enabled
	// again, its rows kept.
	Gone bool
	// Reason says what happened, in a fixed phrase.
	Reason string
	// Excerpt is the start of the endpoint's answer body, as it sent it,
	// at most outbound.MaxExcerptBytes: stored on the attempt row through
	// schema.Excerpt, never logged, never in Error's text.
	Excerpt []byte
}

func (e *Error) Error() string {
	if e.Reason == "" {
		return "delivery failed: " + e.Class
	}
	return "delivery failed: " + e.Reason
}

// Error classes the handler itself assigns.
const (
	// ClassTimeout: the call outlasted the sink timeout.
	ClassTimeout = "timeout"
	// ClassError: the sink returned an error that is not an *Error.
	ClassError = "error"
)

// failure is what the handler keeps of a failed call.
func failure(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Class: ClassError, Reason: "sink error"}
}
