package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DeletePrefix deletes every key that starts with prefix. The prefix must
// hold no glob characters.
func DeletePrefix(ctx context.Context, client redis.UniversalClient, prefix string) error {
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		flush := func() error {
			if len(keys) == 0 {
				return nil
			}
			// One key per command: keys of different buckets are in
			// different slots.
			_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for _, k := range keys {
					pipe.Unlink(ctx, k)
				}
				return nil
			})
			keys = keys[:0]
			return err
		}
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, del)
	case *redis.Client:
		return del(ctx, c)
	default:
		return fmt.Errorf("redisstore: cannot delete keys on a %T", client)
	}
}
