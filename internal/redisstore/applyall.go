package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookrelay/relay/internal/store"
)

// Item is one batch of ApplyAll.
type Item struct {
	Partition store.Partition
	Batch     store.Batch
}

// ApplyAll applies many batches in one pipeline (on a Cluster, one per node,
// sent in parallel). Each batch is atomic on its own; together they are not.
// Results are in the order of items.
//
// Every item is validated before anything is sent: an invalid item fails the
// call with a nil result and no batch is applied. Once sent, batches fail
// alone (an OOM refusal, a lost connection): the error joins those failures,
// each naming its item index, and the results still report every other
// batch; a failed item's result is the zero Result. Each failure is
// classified as Apply's is, so a Redis that is away or full makes the
// joined error match store.ErrUnavailable. If ctx ends first, the
// call fails and any batch may have committed. As after any failed Apply,
// the caller re-reads and re-plans.
//
// ApplyAll does not wait for replicas (Options.Durability), whatever
// store.Batch.Answered says: a Cluster pipeline spreads batches over nodes
// and connections, where one WAIT cannot vouch for them. Ingest and the
// operators' changes go through Apply.
func (s *Store) ApplyAll(ctx context.Context, items []Item) ([]store.Result, error) {
	calls := make([]*scriptCall, len(items))
	for i, it := range items {
		keys, args, err := s.applyArgs(it.Partition, it.Batch)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		calls[i] = &scriptCall{sc: s.scripts.applyFor(it.Batch), keys: keys, args: args}
	}
	if len(calls) == 0 {
		return nil, nil
	}
	if err := runPipelined(ctx, s.client, calls); err != nil {
		return nil, err
	}
	results := make([]store.Result, len(calls))
	var errs []error
	for i, c := range calls {
		if c.err != nil {
			errs = append(errs, fmt.Errorf("item %d: %w", i, applyError(ctx, items[i].Partition, c.err)))
			continue
		}
		r, err := decodeResult(c.res, len(items[i].Batch.Reads))
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: apply %s: %w", i, items[i].Partition, err))
			continue
		}
		results[i] = r
	}
	return results, errors.Join(errs...)
}
