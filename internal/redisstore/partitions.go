package redisstore

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/store"
)

// Partitions pages through the bucket's due index: every partition that
// holds a timer, parked ones (due never) included, in no useful order. It
// walks the index with ZSCAN, so a partition in the index for the whole
// walk is returned at least once and may be returned twice; count is a
// hint of the page size. Start with cursor 0; a next of 0 ends the walk.
func (s *Store) Partitions(ctx context.Context, bucket int, cursor uint64, count int) (parts []store.Partition, next uint64, err error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, 0, fmt.Errorf("partitions: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	if count < 1 {
		return nil, 0, fmt.Errorf("partitions: count %d must be at least 1", count)
	}
	members, next, err := s.client.ZScan(ctx, s.dueKey(bucket), cursor, "", int64(count)).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("partitions of bucket %d: %w", bucket, classify(ctx, err))
	}
	// ZSCAN answers member, score, member, score, ...
	for i := 0; i+1 < len(members); i += 2 {
		parts = append(parts, store.Partition{Namespace: members[i]})
	}
	return parts, next, nil
}
