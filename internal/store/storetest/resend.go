package storetest

import (
	"context"

	"github.com/hookrelay/relay/internal/store"
)

// LostReplies is a store whose every Apply runs twice and answers the
// second run, as a Redis client does that resends a script after losing its
// reply. Tests use it to show that a batch is guarded against its own retry
// and that its caller reads that retry right.
type LostReplies struct{ store.NamespaceStore }

// Apply applies b, then applies it again and answers that second run.
func (s LostReplies) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	if _, err := s.NamespaceStore.Apply(ctx, p, b); err != nil {
		return store.Result{}, err
	}
	return s.NamespaceStore.Apply(ctx, p, b)
}
