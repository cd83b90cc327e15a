// Package faults is relay's fault-injection suite. Its tests start the real
// relay binary and a redis-server of their own with AOF, break things while
// outcomes flow (kill -9, a Redis restart, SCRIPT FLUSH, a full Redis,
// misbehaving receivers, a poison row, a clock that jumps), and check that
// every outcome the API accepted reached each of its endpoints, signed. Its
// cluster case and benchmark run relay on a three-master Redis Cluster of
// their own, resharded under load.
//
// The package holds tests only. They run where a real Redis is configured
// (RELAY_TEST_REDIS_URL) or required (RELAY_TEST_REQUIRE_REAL=1).
package faults
