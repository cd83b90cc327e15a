package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// ApplyBody is apply.lua without a shebang, for tests that call it directly.
var ApplyBody = applyBody

// Client is the store's client, for tests that inspect or disturb Redis.
func (s *Store) Client() redis.UniversalClient { return s.client }

// PartitionKeys are p's values HASH, order ZSET and bucket due index.
func (s *Store) PartitionKeys(p store.Partition) []string { return s.partitionKeys(p) }

// ScriptSHAs is the digest of every script the store runs.
func (s *Store) ScriptSHAs() []string {
	var out []string
	for _, sc := range s.scripts.all() {
		out = append(out, sc.sha)
	}
	return out
}

// Classify is how the store reports a Redis error.
func Classify(ctx context.Context, err error) error { return classify(ctx, err) }

// MaxRoundOps is the most operations of a batch sent in a round.
const MaxRoundOps = maxRoundOps

// QueuedCalls counts the script calls waiting for a round, on every master.
func (s *Store) QueuedCalls() int {
	ls := s.applies
	ls.mu.Lock()
	all := []*rounds{&ls.one}
	for _, l := range ls.byNode {
		all = append(all, l)
	}
	ls.mu.Unlock()
	n := 0
	for _, l := range all {
		l.mu.Lock()
		n += len(l.queue)
		l.mu.Unlock()
	}
	return n
}
