// Package redistest gives tests a fresh, isolated redisstore.Store on
// miniredis, on a real Redis, or on a Redis Cluster.
//
// A real server is shared with other tests and other people: each store gets
// its own random key prefix, and cleanup deletes only that prefix. Nothing
// here flushes or reconfigures the Redis of RELAY_TEST_REDIS_URL. The Cluster
// of RELAY_TEST_REDIS_CLUSTER must be a test cluster of the run's own
// (.ci/run starts one): the store's tests flush its script cache, which the
// store recovers from, to prove that it does.
package redistest
