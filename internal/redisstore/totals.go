package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// The bucket keys apply.lua keeps the totals in, after the bucket's tag.
const (
	totalsSuffix = ":totals"
	summedSuffix = ":summed"
)

var flagSuffixes = [store.NumFlags]string{":flag:1", ":flag:2"}

// totalsFields are the fields of a bucket's totals HASH, in BucketTotals
// order: the sums, then the flag set sizes.
var totalsFields = []string{"sum1", "sum2", "flag1", "flag2"}

// Totals sums every bucket's totals HASH with one HMGET a bucket,
// pipelined: on a Cluster one round trip per master a chunk of buckets.
func (s *Store) Totals(ctx context.Context) (store.BucketTotals, error) {
	var out store.BucketTotals
	for start := 0; start < s.buckets; start += countChunk {
		end := min(start+countChunk, s.buckets)
		cmds := make([]*redis.SliceCmd, end-start)
		if _, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for b := start; b < end; b++ {
				cmds[b-start] = pipe.HMGet(ctx, s.tags[b]+totalsSuffix, totalsFields...)
			}
			return nil
		}); err != nil {
			return store.BucketTotals{}, fmt.Errorf("read totals: %w", classify(ctx, err))
		}
		for i, c := range cmds {
			var t store.BucketTotals
			for j, v := range c.Val() {
				n, err := totalsField(v)
				if err != nil {
					return store.BucketTotals{}, fmt.Errorf("read totals of bucket %d: %w", start+i, err)
				}
				if j < store.SummedCounters {
					t.Sums[j] = n
				} else {
					t.Flagged[j-store.SummedCounters] = n
				}
			}
			out.Add(t)
		}
	}
	return out, nil
}

func totalsField(v any) (int64, error) {
	switch v := v.(type) {
	case nil:
		return 0, nil
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: total %q", store.ErrCorrupt, v)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("%w: total of type %T", store.ErrCorrupt, v)
	}
}

// Flagged pages through a bucket's flag set with one ZRANGEBYLEX.
func (s *Store) Flagged(ctx context.Context, bucket, flag int, after string, limit int) ([]store.Partition, bool, error) {
	if flag < 0 || flag >= store.NumFlags {
		return nil, false, fmt.Errorf("flagged: flag %d out of range 0..%d", flag, store.NumFlags-1)
	}
	return s.byName(ctx, "flagged", bucket, flagSuffixes[flag], after, limit)
}

// Summed lists a bucket's summed set with one ZRANGE, in byte order.
func (s *Store) Summed(ctx context.Context, bucket int) ([]store.Partition, error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, fmt.Errorf("summed: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	names, err := s.client.ZRange(ctx, s.tags[bucket]+summedSuffix, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("summed in bucket %d: %w", bucket, classify(ctx, err))
	}
	slices.Sort(names)
	parts := make([]store.Partition, len(names))
	for i, n := range names {
		parts[i] = store.Partition{Namespace: n}
	}
	return parts, nil
}

func (s *Store) byName(ctx context.Context, what string, bucket int, suffix, after string, limit int) ([]store.Partition, bool, error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, false, fmt.Errorf("%s: bucket %d out of range 0..%d", what, bucket, s.buckets-1)
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("%s: limit %d must be at least 1", what, limit)
	}
	limit = min(limit, store.MaxRegistryPage)
	lower := "-"
	if after != "" {
		lower = "(" + after
	}
	names, err := s.client.ZRangeByLex(ctx, s.tags[bucket]+suffix, &redis.ZRangeBy{Min: lower, Max: "+", Count: int64(limit) + 1}).Result()
	if err != nil {
		return nil, false, fmt.Errorf("%s in bucket %d: %w", what, bucket, classify(ctx, err))
	}
	more := len(names) > limit
	names = names[:min(len(names), limit)]
	parts := make([]store.Partition, len(names))
	for i, n := range names {
		parts[i] = store.Partition{Namespace: n}
	}
	return parts, more, nil
}
