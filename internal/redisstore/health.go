package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ErrEvictingPolicy: a Redis node may evict keys under memory pressure, which
// would silently drop outbox rows. relay needs maxmemory-policy noeviction.
var ErrEvictingPolicy = errors.New("redisstore: maxmemory-policy evicts keys")

// ErrScripts: a node lacks relay's scripts and would not load them.
var ErrScripts = errors.New("redisstore: scripts not loaded")

// Check pings every node, makes sure each holds relay's scripts (loading
// them again where a restart or SCRIPT FLUSH dropped them), and checks that
// none may evict keys. A node that does not answer CONFIG GET (a managed
// Redis may forbid it) passes: its policy cannot be known from here.
func (s *Store) Check(ctx context.Context) error {
	var (
		mu       sync.Mutex
		evicting []string
	)
	check := func(ctx context.Context, c *redis.Client) error {
		if err := c.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redisstore: ping %s: %w", c.Options().Addr, err)
		}
		if err := s.scripts.ensure(ctx, c); err != nil {
			return fmt.Errorf("%w on %s: %w", ErrScripts, c.Options().Addr, err)
		}
		policy, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return nil
		}
		if p := policy["maxmemory-policy"]; p != "" && p != "noeviction" {
			mu.Lock()
			evicting = append(evicting, fmt.Sprintf("%s has %s", c.Options().Addr, p))
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, c)
	default:
		err = s.client.Ping(ctx).Err()
	}
	if err != nil {
		return err
	}
	if len(evicting) > 0 {
		return fmt.Errorf("%w: %s", ErrEvictingPolicy, strings.Join(evicting, ", "))
	}
	return nil
}
