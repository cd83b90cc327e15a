package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

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

// registeredMarker is set once BackfillRegistry has walked the keyspace.
func (s *Store) registeredMarker() string { return s.prefix + "registered" }

// backfillChunk is how many partitions one pipeline of the backfill
// registers.
const backfillChunk = 500

// BackfillRegistry registers every partition of the keyspace that holds a
// registering row (store.RegistryTag), for keyspaces written before Apply
// kept the registry. It walks every partition's order key with SCAN on
// every master and sets each one's entry from its rows in one script
// (register.lua), so it is safe beside live batches and idempotent; it then
// records that it ran (<prefix>registered) and does nothing on later calls.
// It returns how many partitions it found registered.
//
// A process of an earlier version writing to the keyspace while or after
// this one walked it does not keep the registry: delete the marker once
// every process runs this version, and the next start walks again.
func (s *Store) BackfillRegistry(ctx context.Context) (int, error) {
	n, err := s.client.Exists(ctx, s.registeredMarker()).Result()
	if err != nil {
		return 0, fmt.Errorf("redisstore: read the registry marker: %w", classify(ctx, err))
	}
	if n == 1 {
		return 0, nil
	}
	registered := 0
	walk := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, globEscape(s.prefix)+"{*}:ns:*:keys", 1000).Iterator()
		var parts []store.Partition
		flush := func() error {
			got, err := s.register(ctx, parts)
			registered += got
			parts = parts[:0]
			return err
		}
		for iter.Next(ctx) {
			p, ok := s.partitionOfOrderKey(iter.Val())
			if !ok {
				continue
			}
			if parts = append(parts, p); len(parts) == backfillChunk {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return classify(ctx, err)
		}
		return flush()
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		// ForEachMaster calls on every master at once, so the masters are
		// collected under a lock and then walked one at a time: registered
		// is not shared.
		var (
			mu      sync.Mutex
			masters []*redis.Client
		)
		if err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, m)
			return nil
		}); err != nil {
			return 0, fmt.Errorf("redisstore: backfill the registry: %w", classify(ctx, err))
		}
		for _, m := range masters {
			if err := walk(ctx, m); err != nil {
				return registered, fmt.Errorf("redisstore: backfill the registry: %w", err)
			}
		}
	case *redis.Client:
		if err := walk(ctx, c); err != nil {
			return registered, fmt.Errorf("redisstore: backfill the registry: %w", err)
		}
	default:
		return 0, fmt.Errorf("redisstore: cannot walk the keys of a %T", s.client)
	}
	if err := s.client.Set(ctx, s.registeredMarker(), "1", 0).Err(); err != nil {
		return registered, fmt.Errorf("redisstore: record the registry marker: %w", classify(ctx, err))
	}
	return registered, nil
}

// register runs register.lua on each partition in one pipeline, and
// returns how many are registered.
func (s *Store) register(ctx context.Context, parts []store.Partition) (int, error) {
	if len(parts) == 0 {
		return 0, nil
	}
	sc := s.scripts.register
	send := func(full bool) ([]*redis.Cmd, error) {
		cmds := make([]*redis.Cmd, len(parts))
		_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, p := range parts {
				keys := s.partitionKeys(p)
				keys = []string{keys[1], keys[3]}
				if full {
					cmds[i] = pipe.Eval(ctx, sc.src, keys, p.Namespace, registryTag)
				} else {
					cmds[i] = pipe.EvalSha(ctx, sc.sha, keys, p.Namespace, registryTag)
				}
			}
			return nil
		})
		return cmds, err
	}
	cmds, err := send(false)
	if err != nil && isNoScript(err) {
		// The script runs whole or not at all, and twice is harmless.
		cmds, err = send(true)
	}
	if err != nil {
		return 0, classify(ctx, err)
	}
	n := 0
	for _, c := range cmds {
		if v, _ := c.Int(); v == 1 {
			n++
		}
	}
	return n, nil
}

var registryTag = string([]byte{store.RegistryTag})

// partitionOfOrderKey is the partition whose order ZSET is key, when key is
// one of this keyspace's: "<prefix>{<b>}:ns:<ns>:keys" with b the bucket of
// a valid ns.
func (s *Store) partitionOfOrderKey(key string) (store.Partition, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"{")
	if !ok {
		return store.Partition{}, false
	}
	b, rest, ok := strings.Cut(rest, "}:ns:")
	if !ok {
		return store.Partition{}, false
	}
	ns, ok := strings.CutSuffix(rest, ":keys")
	if !ok {
		return store.Partition{}, false
	}
	bucket, err := strconv.Atoi(b)
	p := store.Partition{Namespace: ns}
	if err != nil || p.Validate() != nil || s.BucketOf(p) != bucket || strconv.Itoa(bucket) != b {
		return store.Partition{}, false
	}
	return p, true
}

// globEscape escapes the characters SCAN MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
