package redistest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Dump reads every key under prefix with its type and full contents, so a
// test can show that a refused request left Redis byte for byte as it was.
// It reads strings, hashes and sorted sets, the types relay writes; any other
// type is an error.
func Dump(ctx context.Context, client redis.UniversalClient, prefix string) (map[string]string, error) {
	out := map[string]string{}
	read := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			typ, err := c.Type(ctx, key).Result()
			if err != nil {
				return err
			}
			var v any
			switch typ {
			case "string":
				v, err = c.Get(ctx, key).Result()
			case "hash":
				var m map[string]string
				m, err = c.HGetAll(ctx, key).Result()
				v = sortedMap(m)
			case "zset":
				v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
			default:
				return fmt.Errorf("dump %q: unexpected type %s", key, typ)
			}
			if err != nil {
				return err
			}
			out[key] = fmt.Sprintf("%s %q", typ, fmt.Sprint(v))
		}
		return iter.Err()
	}
	var err error
	switch c := client.(type) {
	case *redis.ClusterClient:
		// Masters are visited concurrently; one at a time fills out.
		var mu sync.Mutex
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, n)
		})
	case *redis.Client:
		err = read(ctx, c)
	default:
		return nil, fmt.Errorf("redistest: Dump needs a *redis.Client or *redis.ClusterClient")
	}
	return out, err
}

// sortedMap prints a hash in key order, so equal hashes print equal.
func sortedMap(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		out = append(out, k, m[k])
	}
	return out
}
