package outbox

import (
	"context"

	"go.opentelemetry.io/otel/trace"
)

// KeptSnapshots counts the snapshots c holds for partitions whose flusher
// exited.
func KeptSnapshots(c *Coalescer) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.left)
}

// LimitKeptSnapshots sets how many snapshots c keeps at most.
func LimitKeptSnapshots(c *Coalescer, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.maxKept = n
}

// WithRequests is ctx as a combined append's, serving requests traced
// under others as well.
func WithRequests(ctx context.Context, others ...trace.SpanContext) context.Context {
	reqs := []*request{{ctx: ctx}}
	for _, sc := range others {
		reqs = append(reqs, &request{ctx: trace.ContextWithSpanContext(context.Background(), sc)})
	}
	return withRequests(ctx, reqs)
}
