package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

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
// ApplyAll does not wait for replicas (Options.Durability): a Cluster
// pipeline spreads batches over nodes and connections, where one WAIT
// cannot vouch for them. Ingest goes through Apply.
func (s *Store) ApplyAll(ctx context.Context, items []Item) ([]store.Result, error) {
	type call struct {
		keys []string
		args []any
		sc   *script
		cmd  *redis.Cmd
	}
	calls := make([]call, len(items))
	for i, it := range items {
		keys, args, err := s.applyArgs(it.Partition, it.Batch)
		if err != nil {
			return nil, fmt.Errorf("item %d: %w", i, err)
		}
		calls[i] = call{keys: keys, args: args, sc: s.scripts.applyFor(it.Batch)}
	}
	if len(calls) == 0 {
		return nil, nil
	}
	send := func(which []int, full bool) error {
		_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, i := range which {
				c := &calls[i]
				if full {
					c.cmd = pipe.Eval(ctx, c.sc.src, c.keys, c.args...)
				} else {
					c.cmd = pipe.EvalSha(ctx, c.sc.sha, c.keys, c.args...)
				}
			}
			return nil
		})
		// Per-command errors are read below; Pipelined returns the first.
		_ = err
		return ctx.Err()
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	if err := send(all, false); err != nil {
		return nil, err
	}
	// NOSCRIPT means that batch did not run (the node lost its script cache
	// to SCRIPT FLUSH or a failover), so sending it again cannot apply it
	// twice. It goes again with the script's source, which loads the script
	// on that node as it runs: a second flush in between cannot fail it.
	var missing []int
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		if err := send(missing, true); err != nil {
			return nil, err
		}
	}
	results := make([]store.Result, len(calls))
	var errs []error
	for i, c := range calls {
		res, err := c.cmd.Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: %w", i, applyError(ctx, items[i].Partition, err)))
			continue
		}
		r, err := decodeResult(res, len(items[i].Batch.Reads))
		if err != nil {
			errs = append(errs, fmt.Errorf("item %d: apply %s: %w", i, items[i].Partition, err))
			continue
		}
		results[i] = r
	}
	return results, errors.Join(errs...)
}
