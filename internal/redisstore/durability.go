package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// DefaultDurabilityTimeout bounds a WAIT when Durability leaves Timeout
// unset. MaxDurabilityTimeout bounds it always: a pipeline's replies are
// read within the client's read timeout (go-redis: 3 s by default, not
// stretched for WAIT inside a pipeline), and a WAIT still blocked then
// would break the connection rather than answer.
const (
	DefaultDurabilityTimeout = time.Second
	MaxDurabilityTimeout     = 2 * time.Second
)

// ErrNotReplicated: a batch that waits (see Durability) ran on the master but fewer replicas
// than Durability.Replicas acknowledged it within the timeout. The batch
// may still be on the master (a retry then finds it), or may be lost in a
// failover. An error that matches it also matches store.ErrUnavailable.
var ErrNotReplicated = errors.New("redisstore: too few replicas acknowledged the batch")

// Durability is when Apply answers a growing batch (one without
// store.Batch.Settles: ingest and the other writes that add rows) and an
// answered one (store.Batch.Answered: every operator's change). The zero
// value answers once the script ran on the master, which a failover before
// replication loses. Other settling batches (a fire's acknowledgements, the
// sweeps' deletions) never wait: losing one redelivers or sweeps again, it
// does not lose an outcome.
type Durability struct {
	// Replicas, when at least 1, makes Apply send WAIT Replicas Timeout
	// after a growing or answered batch, on the connection that ran it.
	Replicas int
	// Timeout bounds the WAIT; DefaultDurabilityTimeout when zero.
	Timeout time.Duration
}

func (d Durability) withDefaults() (Durability, error) {
	if d.Replicas < 0 {
		return d, fmt.Errorf("redisstore: durability replicas %d must not be negative", d.Replicas)
	}
	if d.Replicas == 0 {
		return Durability{}, nil
	}
	if d.Timeout == 0 {
		d.Timeout = DefaultDurabilityTimeout
	}
	if d.Timeout < time.Millisecond || d.Timeout > MaxDurabilityTimeout {
		return d, fmt.Errorf("redisstore: durability timeout %v out of range 1ms..%v", d.Timeout, MaxDurabilityTimeout)
	}
	return d, nil
}

// applyDurable runs a growing or answered batch and WAIT in one pipeline on one
// connection to the master that owns the partition's slot. WAIT counts the
// replicas that acknowledged every write this connection made, so it must
// follow the script on the same connection: on a Cluster a pipeline routes
// a keyless WAIT to any master (go-redis's ShardPicker), so the pipeline is
// sent on the slot's node client (MasterForKey) instead.
//
// A batch whose guard failed writes nothing, yet may be the resend of a
// run that committed on a connection that then broke (go-redis retries);
// the caller then reads that row and accepts it. So the guard-failed reply
// is returned only after a PUBLISH (replicated, so it moves this
// connection's offset past every earlier write of the master) and WAIT
// have shown the replicas hold everything the master held before.
func (s *Store) applyDurable(ctx context.Context, p store.Partition, sc *script, keys []string, args []any, reads int) (store.Result, error) {
	var node redis.Cmdable = s.client
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return store.Result{}, applyError(ctx, p, err)
		}
		node = n
	}
	d := s.durability
	var ev *redis.Cmd
	var wait *redis.IntCmd
	send := func(full bool) {
		// Errors are read per command below.
		_, _ = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			if full {
				ev = pipe.Eval(ctx, sc.src, keys, args...)
			} else {
				ev = pipe.EvalSha(ctx, sc.sha, keys, args...)
			}
			wait = waitCmd(ctx, pipe, d)
			return nil
		})
	}
	send(false)
	if isNoScript(ev.Err()) {
		send(true)
	}
	res, err := ev.Result()
	if err != nil {
		if s.isMoved(err) {
			return store.Result{}, fmt.Errorf("apply %s: %w: the slot moved: %w", p, store.ErrUnavailable, err)
		}
		return store.Result{}, applyError(ctx, p, err)
	}
	r, err := decodeResult(res, reads)
	if err != nil {
		return store.Result{}, fmt.Errorf("apply %s: %w", p, err)
	}
	if !r.Committed {
		_, _ = node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Publish(ctx, s.prefix+"durability", "")
			wait = waitCmd(ctx, pipe, d)
			return nil
		})
	}
	if err := s.replicated(ctx, wait); err != nil {
		return store.Result{}, fmt.Errorf("apply %s: %w", p, err)
	}
	return r, nil
}

// waitCmd queues WAIT.
func waitCmd(ctx context.Context, pipe redis.Pipeliner, d Durability) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", d.Replicas, d.Timeout.Milliseconds())
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// replicated reads WAIT's reply: fewer replicas than required, or no
// reply, is ErrNotReplicated, retryable.
func (s *Store) replicated(ctx context.Context, wait *redis.IntCmd) error {
	n, err := wait.Result()
	if err != nil {
		if err := classify(ctx, err); errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrNotReplicated, err)
		}
		return fmt.Errorf("%w: %w: WAIT: %w", store.ErrUnavailable, ErrNotReplicated, err)
	}
	if int(n) < s.durability.Replicas {
		return fmt.Errorf("%w: %w: %d of %d replicas acknowledged within %v", store.ErrUnavailable, ErrNotReplicated, n, s.durability.Replicas, s.durability.Timeout)
	}
	return nil
}

// isMoved: a Cluster node no longer owns the slot. go-redis follows the
// redirect for its own routing, not for a pipeline sent to one node, so
// the client reloads the slot map and the caller retries.
func (s *Store) isMoved(err error) bool {
	if !redis.HasErrorPrefix(err, "MOVED") && !redis.HasErrorPrefix(err, "ASK") {
		return false
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		cc.ReloadState(context.Background())
	}
	return true
}
