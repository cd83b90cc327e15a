package redisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

func TestCheckRefusesAnEvictingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	st := redistest.NewStore(t, srv.Client, redisstore.Options{})
	err := st.Check(context.Background())
	if !errors.Is(err, redisstore.ErrEvictingPolicy) {
		t.Fatalf("Check on an allkeys-lru Redis = %v, want ErrEvictingPolicy", err)
	}
	if err := srv.Client.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(context.Background()); err != nil {
		t.Fatalf("Check on a noeviction Redis = %v", err)
	}
}

func TestCheckPassesEveryConfiguredBackend(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		if err := b.New(t).Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

func TestCheckLoadsScriptsAFlushDropped(t *testing.T) {
	st, m := redistest.MiniredisServer(t, redisstore.Options{})
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := st.Check(ctx); err != nil {
		t.Fatalf("check after SCRIPT FLUSH: %v", err)
	}
	held, err := client.ScriptExists(ctx, st.ScriptSHAs()...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range held {
		if !ok {
			t.Fatalf("script %d still missing after Check", i)
		}
	}
}
