// Package redisstore is relay's store on Redis: each partition is a HASH of
// rows and a ZSET of the same keys for ordered scans, changed only by one Lua
// script per batch. A single Redis and a Redis Cluster share one code path:
// every key of a partition, and its bucket's due index, carries the bucket's
// hash tag, so every script touches one slot.
//
// Redis keys, for namespace ns in bucket b = FNV-1a(ns) mod buckets:
//
//	<prefix>format               the stored format's version, recorded on first use
//	<prefix>buckets              the bucket count, recorded on first use
//	<prefix>{b}:ns:<ns>:rows     HASH  row key -> value
//	<prefix>{b}:ns:<ns>:keys     ZSET  row keys, score 0 (byte-ordered by ZRANGEBYLEX)
//	<prefix>{b}:due              ZSET  namespace -> earliest timer due ms
//	<prefix>{b}:namespaces       ZSET  registered namespace -> 0 (byte-ordered by ZRANGEBYLEX)
package redisstore
