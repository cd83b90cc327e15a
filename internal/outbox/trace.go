package outbox

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/store"
)

// TracerName names the outbox's instrumentation.
const TracerName = "github.com/hookrelay/relay/internal/outbox"

// The attributes of an ingest batch's span.
const (
	attrNamespace  = attribute.Key("relay.namespace")
	attrOperations = attribute.Key("relay.batch.operations")
	attrOutcomes   = attribute.Key("relay.batch.outcomes")
	attrRetry      = attribute.Key("relay.batch.retry")
	attrCommitted  = attribute.Key("relay.batch.committed")
	attrRequests   = attribute.Key("relay.batch.requests")
)

// batchSpanName names every ingest batch's span.
const batchSpanName = "ingest batch"

// linksKey carries, in the context of a combined append, the spans of the
// requests after the first, whose batches they share.
type linksKey struct{}

// withRequests is ctx, the first request's, naming the spans of reqs as
// those its batches serve too.
func withRequests(ctx context.Context, reqs []*request) context.Context {
	if len(reqs) < 2 {
		return ctx
	}
	links := make([]trace.Link, 0, len(reqs)-1)
	for _, r := range reqs[1:] {
		if sc := trace.SpanContextFromContext(r.ctx); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	return context.WithValue(ctx, linksKey{}, links)
}

// startBatch starts the span of one ingest batch sent to the store: its
// operations, the outcomes it accepts, and how many batches before it
// failed their guards. A child of the request's span, linked to the
// others' a combined append serves. Nil when the Appender traces nothing
// or ctx's trace is not sampled.
func (a *Appender) startBatch(ctx context.Context, p store.Partition, b *store.Batch, outcomes, retry int) trace.Span {
	if a.Tracer == nil {
		return nil
	}
	links, _ := ctx.Value(linksKey{}).([]trace.Link)
	_, span := a.Tracer.Start(ctx, batchSpanName, trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...))
	if !span.IsRecording() {
		span.End()
		return nil
	}
	span.SetAttributes(attrNamespace.String(p.Namespace), attrOperations.Int(len(b.Preconditions)+len(b.Writes)),
		attrOutcomes.Int(outcomes), attrRetry.Int(retry), attrRequests.Int(1+len(links)))
	return span
}

// endBatch ends a batch's span with whether it committed. A store error's
// text stays out of it: it may name the server.
func endBatch(span trace.Span, res store.Result, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attrCommitted.Bool(err == nil && res.Committed))
	if err != nil {
		span.SetStatus(codes.Error, "store error")
	}
	span.End()
}
