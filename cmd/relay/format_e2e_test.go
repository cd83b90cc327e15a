package main

import (
	"bufio"
	"context"
	"maps"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/store"
)

// A relay started on a keyspace that holds rows but records no format
// version exits at start with an error that says so, and writes nothing.
func TestARelayRefusesAKeyspaceWithRowsAndNoFormatVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) (redis.UniversalClient, string)
	}{
		{"miniredis", func(t *testing.T) (redis.UniversalClient, string) {
			m := miniredis.RunT(t)
			client := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = client.Close() })
			return client, "redis://" + m.Addr()
		}},
		{"redis", func(t *testing.T) (redis.UniversalClient, string) {
			return redistest.RealClient(t), os.Getenv(redistest.EnvRedisURL)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, url := tc.redis(t)
			prefix := redistest.Prefix(t, client)
			ctx := t.Context()
			st := redistest.NewStore(t, client, redisstore.Options{Prefix: prefix})
			var b store.Batch
			b.Put("row", store.Value("v"))
			if _, err := st.Apply(ctx, store.Partition{Namespace: "acme"}, b); err != nil {
				t.Fatal(err)
			}
			if err := client.Del(ctx, prefix+"format").Err(); err != nil {
				t.Fatal(err)
			}
			before, err := redistest.Dump(ctx, client, prefix)
			if err != nil {
				t.Fatal(err)
			}

			run, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			cmd := exec.CommandContext(run, relaytest.Binary(t))
			cmd.Env = append(append(os.Environ(), relaytest.NewCredentials(t, "format").Env(url)...),
				"RELAY_REDIS_PREFIX="+prefix, "RELAY_LISTEN="+relaytest.FreeAddr(t))
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Read to the end: a relay that started listening was not refused.
			var log strings.Builder
			lines := bufio.NewScanner(stderr)
			for lines.Scan() {
				log.WriteString(lines.Text() + "\n")
				if strings.Contains(lines.Text(), "relay listening") {
					cancel()
				}
			}
			err = cmd.Wait()
			if _, exited := err.(*exec.ExitError); !exited || run.Err() != nil {
				t.Fatalf("relay ended with %v, want an exit with an error at start\n%s", err, log.String())
			}
			if !strings.Contains(log.String(), "holds rows but records no format version") || !strings.Contains(log.String(), "format 1") {
				t.Fatalf("the relay's error does not say the keyspace has no format version:\n%s", log.String())
			}
			after, err := redistest.Dump(ctx, client, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(before, after) {
				t.Fatalf("the refused relay changed the keyspace:\n%v\n%v", before, after)
			}
		})
	}
}
