package redisstore_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store/storetest"
)

// TestContract runs the store contract suite on every backend: miniredis
// always, a real Redis and a Redis Cluster when configured.
func TestContract(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		b.New(t) // skips the backend once when it is not configured
		storetest.Run(t, func(t *testing.T) storetest.Store { return b.New(t) })
	})
}
