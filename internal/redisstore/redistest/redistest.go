package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
)

// Environment variables that point the tests at real servers.
const (
	// EnvRedisURL is a redis:// URL of a single Redis, e.g.
	// redis://127.0.0.1:6379/0.
	EnvRedisURL = "RELAY_TEST_REDIS_URL"
	// EnvRedisCluster is comma-separated seed addresses of a Redis Cluster.
	EnvRedisCluster = "RELAY_TEST_REDIS_CLUSTER"
	// EnvRequireReal, set to 1, fails a test whose real server is not
	// configured instead of skipping it.
	EnvRequireReal = "RELAY_TEST_REQUIRE_REAL"
)

// Backend names one way to get a store.
type Backend struct {
	Name string
	// New returns a fresh, isolated store, or skips the test when the
	// backend is not configured.
	New func(t testing.TB) *redisstore.Store
	// Client returns a client of the backend's server, for tests that open
	// stores of their own on it (under a Prefix of theirs), or skips the
	// test when the backend is not configured.
	Client func(t testing.TB) redis.UniversalClient
}

// Backends lists every backend. Those that are not configured skip the tests
// that use them (or fail them under RELAY_TEST_REQUIRE_REAL=1), so a run
// shows which backends it covered.
func Backends(t testing.TB) []Backend {
	t.Helper()
	return []Backend{
		{Name: "miniredis", New: Miniredis, Client: MiniredisClient},
		{Name: "redis", New: Real, Client: func(t testing.TB) redis.UniversalClient { return RealClient(t) }},
		{Name: "cluster", New: Cluster, Client: func(t testing.TB) redis.UniversalClient { return ClusterClient(t) }},
	}
}

// Flushable lists the backends a test may SCRIPT FLUSH or otherwise
// change the server of: none is the shared Redis of RELAY_TEST_REDIS_URL,
// whose place a redis-server of the test's own takes. The Cluster is the
// run's own (see the package doc).
func Flushable() []Backend {
	own := func(t testing.TB) *Server { return StartServer(t) }
	return []Backend{
		{Name: "miniredis", New: Miniredis, Client: MiniredisClient},
		{Name: "own-redis-server",
			New:    func(t testing.TB) *redisstore.Store { return NewStore(t, own(t).Client, redisstore.Options{}) },
			Client: func(t testing.TB) redis.UniversalClient { return own(t).Client }},
		{Name: "cluster", New: Cluster, Client: func(t testing.TB) redis.UniversalClient { return ClusterClient(t) }},
	}
}

// Each runs fn as a subtest of t for every backend of Backends, named for
// the backend. fn calls t.Parallel itself where its subtests may run
// together; a backend that is not configured skips its subtest at New or
// Client.
func Each(t *testing.T, fn func(t *testing.T, b Backend)) {
	each(t, Backends(t), fn)
}

// EachFlushable is Each over the backends of Flushable.
func EachFlushable(t *testing.T, fn func(t *testing.T, b Backend)) {
	each(t, Flushable(), fn)
}

func each(t *testing.T, backends []Backend, fn func(t *testing.T, b Backend)) {
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) { fn(t, b) })
	}
}

// Miniredis returns a store on a fresh in-process miniredis, closed when the
// test ends.
func Miniredis(t testing.TB) *redisstore.Store {
	t.Helper()
	s, _ := MiniredisServer(t, redisstore.Options{})
	return s
}

// MiniredisServer is Miniredis with options, returning the server too, for
// tests that inject faults or inspect keys.
func MiniredisServer(t testing.TB, opts redisstore.Options) (*redisstore.Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	return NewStore(t, miniredisClient(t, m), opts), m
}

// MiniredisClient is a client of a fresh in-process miniredis, closed when
// the test ends.
func MiniredisClient(t testing.TB) redis.UniversalClient {
	t.Helper()
	return miniredisClient(t, miniredis.RunT(t))
}

func miniredisClient(t testing.TB, m *miniredis.Miniredis) *redis.Client {
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// Real returns a store on the Redis at RELAY_TEST_REDIS_URL under a fresh
// random prefix, whose keys are deleted when the test ends.
func Real(t testing.TB) *redisstore.Store {
	t.Helper()
	client := RealClient(t)
	return NewStore(t, client, redisstore.Options{Prefix: Prefix(t, client)})
}

// RealClient is a client of the Redis at RELAY_TEST_REDIS_URL, closed when
// the test ends; it skips the test when the variable is unset.
func RealClient(t testing.TB) *redis.Client {
	t.Helper()
	url := env(t, EnvRedisURL)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("%s: %v", EnvRedisURL, err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ping(t, client)
	return client
}

// Cluster returns a store on the Redis Cluster at RELAY_TEST_REDIS_CLUSTER
// under a fresh random prefix, whose keys are deleted when the test ends.
func Cluster(t testing.TB) *redisstore.Store {
	t.Helper()
	client := ClusterClient(t)
	return NewStore(t, client, redisstore.Options{Prefix: Prefix(t, client)})
}

// ClusterClient is a client of the Redis Cluster at RELAY_TEST_REDIS_CLUSTER,
// closed when the test ends; it skips the test when the variable is unset.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	addrs := strings.Split(env(t, EnvRedisCluster), ",")
	for i := range addrs {
		addrs[i] = strings.TrimSpace(addrs[i])
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = client.Close() })
	ping(t, client)
	return client
}

// Prefix returns a fresh random key prefix and deletes every key under it
// when the test ends (on every master of a Cluster). Register it after the
// client, so cleanup runs before the client closes.
func Prefix(t testing.TB, client redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "relaytest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := redisstore.DeletePrefix(ctx, client, prefix); err != nil {
			t.Errorf("delete test keys under %q: %v", prefix, err)
		}
	})
	return prefix
}

// NewStore is redisstore.New that fails the test on an error.
func NewStore(t testing.TB, client redis.UniversalClient, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := redisstore.New(ctx, client, opts)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	return s
}

func ping(t testing.TB, client redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping test redis: %v", err)
	}
}

// env returns the variable, or skips the test when it is unset (fails it
// under RELAY_TEST_REQUIRE_REAL=1).
func env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		requireOrSkip(t, name+" is not set")
	}
	return v
}

// RequireReal reports whether RELAY_TEST_REQUIRE_REAL=1.
func RequireReal() bool { return os.Getenv(EnvRequireReal) == "1" }

func requireOrSkip(t testing.TB, why string) {
	t.Helper()
	if RequireReal() {
		t.Fatalf("%s and %s=1", why, EnvRequireReal)
	}
	t.Skip(why)
}
