package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// Due returns up to limit partitions of the bucket whose earliest timer is
// due at or before upToMs, earliest first.
func (s *Store) Due(ctx context.Context, bucket int, upToMs int64, limit int) ([]store.DuePartition, error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, fmt.Errorf("due: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	if limit < 1 {
		return nil, fmt.Errorf("due: limit %d must be at least 1", limit)
	}
	zs, err := s.client.ZRangeByScoreWithScores(ctx, s.dueKey(bucket), dueRange(upToMs, limit)).Result()
	if err != nil {
		return nil, fmt.Errorf("due in bucket %d: %w", bucket, classify(ctx, err))
	}
	return appendDue(nil, zs), nil
}

// DueAll reads every bucket's due index in one pipeline (one round trip per
// node on a Cluster), up to limitPerBucket partitions each, and returns them
// earliest first. It is the idle poll of a driver that owns every bucket.
func (s *Store) DueAll(ctx context.Context, upToMs int64, limitPerBucket int) ([]store.DuePartition, error) {
	if limitPerBucket < 1 {
		return nil, fmt.Errorf("due: limit %d must be at least 1", limitPerBucket)
	}
	by := dueRange(upToMs, limitPerBucket)
	cmds := make([]*redis.ZSliceCmd, s.buckets)
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for b := range cmds {
			cmds[b] = pipe.ZRangeByScoreWithScores(ctx, s.dueKey(b), by)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("due in every bucket: %w", classify(ctx, err))
	}
	var out []store.DuePartition
	for _, c := range cmds {
		out = appendDue(out, c.Val())
	}
	slices.SortStableFunc(out, func(a, b store.DuePartition) int { return cmp.Compare(a.DueAtMs, b.DueAtMs) })
	return out, nil
}

func dueRange(upToMs int64, limit int) *redis.ZRangeBy {
	return &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(upToMs, 10), Count: int64(limit)}
}

func appendDue(out []store.DuePartition, zs []redis.Z) []store.DuePartition {
	for _, z := range zs {
		ns, _ := z.Member.(string)
		out = append(out, store.DuePartition{Partition: store.Partition{Namespace: ns}, DueAtMs: scoreMs(z.Score)})
	}
	return out
}

// scoreMs turns a due-index score back into milliseconds. A score is a
// double: a parked timer at math.MaxInt64 comes back as 2^63, which does not
// fit an int64.
func scoreMs(score float64) int64 {
	switch {
	case score >= math.MaxInt64:
		return math.MaxInt64
	case score <= 0:
		return 0
	}
	return int64(score)
}
