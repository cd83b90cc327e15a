package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
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

// Totals reads every bucket's totals HASH with one HMGET a bucket,
// pipelined: on a Cluster one round trip per master a chunk of buckets.
func (s *Store) Totals(ctx context.Context) ([]store.BucketTotals, error) {
	out := make([]store.BucketTotals, 0, s.buckets)
	for start := 0; start < s.buckets; start += countChunk {
		end := min(start+countChunk, s.buckets)
		cmds := make([]*redis.SliceCmd, end-start)
		if _, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for b := start; b < end; b++ {
				cmds[b-start] = pipe.HMGet(ctx, s.tags[b]+totalsSuffix, totalsFields...)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("read totals: %w", classify(ctx, err))
		}
		for i, c := range cmds {
			var t store.BucketTotals
			for j, v := range c.Val() {
				n, err := totalsField(v)
				if err != nil {
					return nil, fmt.Errorf("read totals of bucket %d: %w", start+i, err)
				}
				if j < store.SummedCounters {
					t.Sums[j] = n
				} else {
					t.Flagged[j-store.SummedCounters] = n
				}
			}
			out = append(out, t)
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

// List pages through a bucket's registry or flag set by name with one
// ZRANGEBYLEX, from the later of after and prefix to the end of prefix's
// names.
func (s *Store) List(ctx context.Context, bucket int, set store.Set, prefix, after string, limit int) ([]store.Partition, bool, error) {
	if bucket < 0 || bucket >= s.buckets {
		return nil, false, fmt.Errorf("list: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	var key string
	switch set {
	case store.SetRegistered:
		key = s.regs[bucket]
	case store.SetFlagA:
		key = s.tags[bucket] + flagSuffixes[0]
	case store.SetFlagB:
		key = s.tags[bucket] + flagSuffixes[1]
	default:
		return nil, false, fmt.Errorf("list: no set %d", set)
	}
	return s.byName(ctx, "list", key, prefix, after, limit)
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

func (s *Store) byName(ctx context.Context, what, key, prefix, after string, limit int) ([]store.Partition, bool, error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("%s: limit %d must be at least 1", what, limit)
	}
	limit = min(limit, store.MaxRegistryPage)
	lower, upper := "-", "+"
	if prefix != "" {
		// Names are of [a-z0-9_-], all below 0xff.
		lower, upper = "["+prefix, "("+prefix+"\xff"
	}
	if after != "" && (prefix == "" || after >= prefix) {
		lower = "(" + after
	}
	names, err := s.client.ZRangeByLex(ctx, key, &redis.ZRangeBy{Min: lower, Max: upper, Count: int64(limit) + 1}).Result()
	if err != nil {
		return nil, false, fmt.Errorf("%s %s: %w", what, key, classify(ctx, err))
	}
	more := len(names) > limit
	names = names[:min(len(names), limit)]
	parts := make([]store.Partition, len(names))
	for i, n := range names {
		parts[i] = store.Partition{Namespace: n}
	}
	return parts, more, nil
}

//go:embed recount.lua
var recountBody string

var recountScript = newScript(recountBody)

// totalsMarkerKey says the keyspace's totals are kept: recorded at first
// use of an empty keyspace, and by a recount of every bucket of one written
// before relay kept totals.
func (s *Store) totalsMarkerKey() string { return s.prefix + "totals" }

// TotalsKept reports whether the keyspace's totals are kept: false for a
// keyspace written before relay kept them, until RecordTotalsKept.
func (s *Store) TotalsKept(ctx context.Context) (bool, error) {
	n, err := s.client.Exists(ctx, s.totalsMarkerKey()).Result()
	if err != nil {
		return false, fmt.Errorf("read totals marker: %w", classify(ctx, err))
	}
	return n > 0, nil
}

// RecordTotalsKept records that every bucket was recounted.
func (s *Store) RecordTotalsKept(ctx context.Context) error {
	if err := s.client.Set(ctx, s.totalsMarkerKey(), "1", 0).Err(); err != nil {
		return fmt.Errorf("record totals marker: %w", classify(ctx, err))
	}
	return nil
}

// recountTries bounds the listings of one bucket's recount that a new
// namespace can outdate.
const recountTries = 16

// Recount computes a bucket's totals afresh from its partitions' rows, in
// one script that lists the partitions it is given and refuses when the
// bucket's indexes name another (then it lists again). It blocks Redis for
// the bucket's partitions' backlog and flag rows: a few milliseconds for a
// thousand namespaces.
func (s *Store) Recount(ctx context.Context, bucket int) error {
	if bucket < 0 || bucket >= s.buckets {
		return fmt.Errorf("recount: bucket %d out of range 0..%d", bucket, s.buckets-1)
	}
	t := s.tags[bucket]
	for range recountTries {
		names := map[string]bool{}
		for _, key := range []string{s.regs[bucket], s.dues[bucket], t + summedSuffix, t + flagSuffixes[0], t + flagSuffixes[1]} {
			got, err := s.client.ZRange(ctx, key, 0, -1).Result()
			if err != nil {
				return fmt.Errorf("recount bucket %d: %w", bucket, classify(ctx, err))
			}
			for _, n := range got {
				names[n] = true
			}
		}
		keys := []string{t + totalsSuffix, t + summedSuffix, t + flagSuffixes[0], t + flagSuffixes[1], s.regs[bucket], s.dues[bucket]}
		args := []any{string([]byte{store.SumTag, store.FlagTags[0], store.FlagTags[1]})}
		for _, n := range slices.Sorted(maps.Keys(names)) {
			keys = append(keys, t+":ns:"+n+":rows", t+":ns:"+n+":keys")
			args = append(args, n)
		}
		res, err := recountScript.run(ctx, s.client, keys, args...)
		if err != nil {
			return fmt.Errorf("recount bucket %d: %w", bucket, classify(ctx, err))
		}
		if r, ok := res.([]any); ok && len(r) == 1 {
			return nil
		}
	}
	return fmt.Errorf("recount bucket %d: namespaces kept arriving", bucket)
}
