package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Skew is how far a Redis master's clock is from a process's.
type Skew struct {
	// Addr is the master's address.
	Addr string
	// Offset is the master's clock minus the process's: positive when the
	// master is ahead.
	Offset time.Duration
}

// ClockSkews compares now with the clock (TIME) of the master, or of every
// master of a Cluster, one Skew each. Each TIME is set against the midpoint
// of now read just before and after it, so an offset is right within half
// that round trip.
func (s *Store) ClockSkews(ctx context.Context, now func() time.Time) ([]Skew, error) {
	var (
		mu  sync.Mutex
		out []Skew
	)
	measure := func(ctx context.Context, c redis.Cmdable, addr string) error {
		before := now()
		at, err := c.Time(ctx).Result()
		after := now()
		if err != nil {
			return fmt.Errorf("redisstore: TIME on %s: %w", addr, classify(ctx, err))
		}
		mid := before.Add(after.Sub(before) / 2)
		mu.Lock()
		out = append(out, Skew{Addr: addr, Offset: at.Sub(mid)})
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return measure(ctx, c, c.Options().Addr)
		})
	case *redis.Client:
		err = measure(ctx, c, c.Options().Addr)
	default:
		err = measure(ctx, s.client, "")
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}
