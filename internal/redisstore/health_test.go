package redisstore_test

import (
	"context"
	"errors"
	"testing"

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
	for _, b := range redistest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			if err := b.New(t).Check(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
