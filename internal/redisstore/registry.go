package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// Registered returns up to limit registered partitions of the bucket whose
// names sort strictly after after, in byte order, and whether the bucket
// holds more: one ZRANGEBYLEX of the bucket's registry. A limit above
// store.MaxRegistryPage is clamped to it.
func (s *Store) Registered(ctx context.Context, bucket int, after string, limit int) ([]store.Partition, bool, error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, false, fmt.Errorf("registered: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("registered: limit %d must be at least 1", limit)
	}
	limit = min(limit, store.MaxRegistryPage)
	lower := "-"
	if after != "" {
		lower = "(" + after
	}
	names, err := s.client.ZRangeByLex(ctx, s.regs[bucket], &redis.ZRangeBy{Min: lower, Max: "+", Count: int64(limit) + 1}).Result()
	if err != nil {
		return nil, false, fmt.Errorf("registered in bucket %d: %w", bucket, classify(ctx, err))
	}
	more := len(names) > limit
	names = names[:min(len(names), limit)]
	parts := make([]store.Partition, len(names))
	for i, n := range names {
		parts[i] = store.Partition{Namespace: n}
	}
	return parts, more, nil
}

// countChunk is how many buckets one pipeline of CountRegistered reads.
const countChunk = 1024

// CountRegistered sums the ZCARD of every bucket's registry, pipelined: on
// a Cluster one round trip per master a chunk of buckets, each ZCARD on
// its bucket's slot.
func (s *Store) CountRegistered(ctx context.Context) (int, error) {
	total := 0
	for start := 0; start < s.buckets; start += countChunk {
		regs := s.regs[start:min(start+countChunk, s.buckets)]
		cmds := make([]*redis.IntCmd, len(regs))
		if _, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, key := range regs {
				cmds[i] = pipe.ZCard(ctx, key)
			}
			return nil
		}); err != nil {
			return 0, fmt.Errorf("count registered: %w", classify(ctx, err))
		}
		for _, c := range cmds {
			total += int(c.Val())
		}
	}
	return total, nil
}
