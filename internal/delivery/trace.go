package delivery

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the delivery's instrumentation.
const TracerName = "github.com/hookrelay/relay/internal/delivery"

// The attributes of fires and attempts that are relay's own.
const (
	attrNamespace     = attribute.Key("relay.namespace")
	attrEndpoint      = attribute.Key("relay.endpoint")
	attrReservationID = attribute.Key("relay.reservation_id")
	attrAttempt       = attribute.Key("relay.attempt")
	attrRetryAfterMs  = attribute.Key("relay.attempt.retry_after_ms")
	attrRetryHonoured = attribute.Key("relay.attempt.retry_after_honoured")
	attrRows          = attribute.Key("relay.fire.rows")
	attrCalls         = attribute.Key("relay.fire.calls")
	attrDelivered     = attribute.Key("relay.fire.delivered")
	attrFailed        = attribute.Key("relay.fire.failed")
	attrResult        = attribute.Key("relay.fire.result")
	attrLane          = attribute.Key("relay.fire.lane")
)

// fireSpanName names every fire's span: a name per endpoint would make
// every tenant's spans a name of their own.
const fireSpanName = "delivery fire"

// fireTrace is a fire's span and what each of its attempts' spans shares.
// A nil *fireTrace is a fire untraced: its methods do nothing.
type fireTrace struct {
	tracer trace.Tracer
	span   trace.Span
	// attrs are every attempt's: the endpoint, its address and its URL
	// with no secret.
	attrs []attribute.KeyValue
}

// startFire starts the span of a fire that calls the stream's endpoint: a
// root of its own, whatever ctx holds (an ingest's request may have fired
// it), since the attempts belong to their outcomes' traces and only link
// to it. Nil when tracing is off.
func (h *Handler) startFire(ctx context.Context, s *stream, rows int) *fireTrace {
	if h.Tracer == nil {
		return nil
	}
	base := []attribute.KeyValue{attrNamespace.String(s.ns), attrEndpoint.String(s.endpoint)}
	lane := "main"
	if slow, _ := ctx.Value(slowLaneKey{}).(bool); slow {
		lane = "slow"
	}
	_, span := h.Tracer.Start(ctx, fireSpanName, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(append(base, attrRows.Int(rows), attrLane.String(lane))...))
	ft := &fireTrace{tracer: h.Tracer, span: span}
	// The namespace is the ingest span's, which each attempt is under:
	// every attribute of a span costs its every call.
	ft.attrs = make([]attribute.KeyValue, 0, 5)
	ft.attrs = append(ft.attrs, attrEndpoint.String(s.endpoint), semconv.HTTPRequestMethodPost)
	if u, err := url.Parse(s.ep.URL); err == nil {
		host, port := u.Hostname(), u.Port()
		ft.attrs = append(ft.attrs, semconv.ServerAddress(host), semconv.URLFull(redactedURL(u)))
		n, err := strconv.Atoi(port)
		switch {
		case err == nil:
		case u.Scheme == "https":
			n = 443
		default:
			n = 80
		}
		ft.attrs = append(ft.attrs, semconv.ServerPort(n))
	}
	return ft
}

// end ends the fire's span with what its calls did.
func (ft *fireTrace) end(run *calls) {
	if ft == nil {
		return
	}
	result := "delivered"
	switch {
	case run.callFailed:
		result = "failed"
	case run.cut:
		result = "cut"
	case run.paced:
		result = "paced"
	}
	ft.span.SetAttributes(attrCalls.Int(run.launched), attrDelivered.Int(len(run.acked)), attrFailed.Int(len(run.failed)), attrResult.String(result))
	if run.callFailed {
		ft.span.SetStatus(codes.Error, "a call failed")
	}
	ft.span.End()
}

// startAttempt starts the client span of one call of r: a child of the
// span its outcome was accepted under, so that every attempt, this one or
// one days later on another process, is in the producer's trace, linked
// to the fire that made it. An outcome accepted untraced has its attempts
// under the fire. The span is what the sender's traceparent names.
func (ft *fireTrace) startAttempt(ctx context.Context, r *pendingRow) (context.Context, trace.Span) {
	if ft == nil {
		return ctx, nil
	}
	fire := ft.span.SpanContext()
	opts := make([]trace.SpanStartOption, 0, 3)
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient))
	if tp := r.outcome.Trace; tp.Valid() {
		parent := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: tp.TraceID, SpanID: tp.SpanID, TraceFlags: trace.TraceFlags(tp.Flags), Remote: true,
		})
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		if fire.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: fire}))
		}
	} else {
		ctx = trace.ContextWithSpanContext(ctx, fire)
	}
	n := int(min(r.attempts.Total, 1<<31-2)) + 1
	// One option with every attribute: the SDK copies it once into the
	// span, where each option more would grow the copy again.
	attrs := make([]attribute.KeyValue, 0, len(ft.attrs)+3)
	attrs = append(append(attrs, ft.attrs...), attrReservationID.String(r.rid), attrAttempt.Int(n))
	if n > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(n-1))
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	// Named as OpenTelemetry's HTTP conventions name a client span with no
	// URL template: by its method.
	return ft.tracer.Start(ctx, "POST", opts...)
}

// endAttempt ends an attempt's span with how its call went: the status
// the endpoint answered, or the class of the failure (timedOut: its own
// bound cut it). No answer body, header or URL goes into it.
func endAttempt(span trace.Span, status int, err error, timedOut bool) {
	if span == nil {
		return
	}
	if err == nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		span.End()
		return
	}
	e := failure(err)
	if timedOut {
		e = &Error{Class: ClassTimeout}
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	errType := e.Class
	if e.Status > 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(e.Status))
		if e.Class == "status" {
			// The conventions name a failing status by its number.
			errType = strconv.Itoa(e.Status)
		}
	}
	attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	if e.RetryAfter > 0 {
		attrs = append(attrs, attrRetryAfterMs.Int64(e.RetryAfter.Milliseconds()), attrRetryHonoured.Bool(e.RetryAfter <= MaxBackoff))
	}
	span.SetAttributes(attrs...)
	span.SetStatus(codes.Error, e.Class)
	span.End()
}

// redactedURL is url.full as the conventions would have it: without
// credentials, and with every query value replaced, since a query often
// carries a token. The path is kept.
func redactedURL(u *url.URL) string {
	c := *u
	c.User, c.Fragment, c.RawFragment = nil, "", ""
	if c.RawQuery != "" {
		parts := strings.Split(c.RawQuery, "&")
		for i, p := range parts {
			if k, _, ok := strings.Cut(p, "="); ok {
				parts[i] = k + "=REDACTED"
			}
		}
		c.RawQuery = strings.Join(parts, "&")
	}
	return c.String()
}
