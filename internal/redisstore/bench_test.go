package redisstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// ingest plans batches shaped like outbox ingest for one partition: per
// outcome a 1 KiB record, an empty pending row, the backlog and sequence
// rows read-modify-written, and a 40-byte idempotency ("seen") row, guarded
// by the endpoint row, the seen row, the record, the backlog and the
// sequence. It keeps the backlog and sequence it last wrote, as a caller
// that just read them would, so every batch commits.
type ingest struct {
	p        store.Partition
	endpoint store.Value
	record   store.Value
	digest   store.Value
	seq      uint64
	backlog  store.Value
}

const benchEndpoint = "billing"

func newIngest(p store.Partition) *ingest {
	return &ingest{
		p:        p,
		endpoint: store.Value(`{"url":"https://billing.acme.example/hooks/relay","scheme":"standard-webhooks"}`),
		record:   bytes.Repeat([]byte{'r'}, 1024),
		digest:   bytes.Repeat([]byte{'d'}, 40),
	}
}

func (in *ingest) setup() store.Batch {
	var b store.Batch
	b.Put(store.Key("e"+benchEndpoint), in.endpoint)
	return b
}

func (in *ingest) next() store.Batch {
	rid := "res-" + strconv.FormatUint(in.seq, 36) + "-7f3a9c21"
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], in.seq)
	prevSeq := in.seq
	prevBacklog := in.backlog
	in.seq++
	in.backlog = store.Value(strconv.FormatUint(in.seq, 10) + "," + strconv.FormatUint(in.seq*1024, 10))

	var b store.Batch
	b.RequireEquals(store.Key("e"+benchEndpoint), in.endpoint)
	b.RequireAbsent(store.Key("s" + rid))
	b.RequireAbsent(store.Key("r" + benchEndpoint + "\x00" + rid))
	b.Guard(store.Key("b"+benchEndpoint), prevBacklog, prevSeq > 0)
	if prevSeq > 0 {
		b.RequireEquals("q", store.Value(strconv.FormatUint(prevSeq, 10)))
	} else {
		b.RequireAbsent("q")
	}
	b.Put(store.Key("r"+benchEndpoint+"\x00"+rid), in.record)
	b.Put(store.Key("p"+benchEndpoint+"\x00"+string(seq[:])+rid), nil)
	b.Put(store.Key("b"+benchEndpoint), in.backlog)
	b.Put("q", store.Value(strconv.FormatUint(in.seq, 10)))
	b.Put(store.Key("s"+rid), in.digest)
	return b
}

// benchStore is a store on the Redis at RELAY_TEST_REDIS_URL with a pool
// large enough for 32 goroutines, under a fresh prefix deleted afterwards.
func benchStore(b *testing.B) *redisstore.Store {
	b.Helper()
	client := redistest.RealClient(b)
	opts := *client.Options()
	opts.PoolSize = 64
	big := redis.NewClient(&opts)
	b.Cleanup(func() { _ = big.Close() })
	return redistest.NewStore(b, big, redisstore.Options{Prefix: redistest.Prefix(b, big)})
}

// BenchmarkApplyIngest1KiB applies ingest-shaped guarded batches (5
// preconditions, 5 writes, 1 KiB record) from 32 goroutines, one partition
// each so their guards never conflict.
func BenchmarkApplyIngest1KiB(b *testing.B) {
	b.Run("redis", func(b *testing.B) { benchIngest(b, benchStore(b)) })
	b.Run("miniredis", func(b *testing.B) { benchIngest(b, redistest.Miniredis(b)) })
}

func benchIngest(b *testing.B, s *redisstore.Store) {
	const goroutines = 32
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.SetBytes(1024)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		in := newIngest(store.Partition{Namespace: "bench-" + strconv.FormatInt(next.Add(1), 10)})
		if _, err := s.Apply(ctx, in.p, in.setup()); err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			r, err := s.Apply(ctx, in.p, in.next())
			if err != nil {
				b.Error(err)
				return
			}
			if !r.Committed {
				failed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "batches/s")
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d batches failed their preconditions", n)
	}
}

// BenchmarkMemoryPerPendingOutcome measures the Redis memory one pending
// outcome takes in its partition: a 1 KiB record, a pending row and a seen
// row, with the backlog and sequence rows shared. It writes outcomes
// outcomes per iteration and reports MEMORY USAGE of the partition's HASH
// and ZSET divided by that count. Run it with -benchtime=1x.
func BenchmarkMemoryPerPendingOutcome(b *testing.B) {
	const outcomes = 4000
	for range b.N {
		b.StopTimer()
		s := benchStore(b)
		in := newIngest(store.Partition{Namespace: "memory"})
		ctx := context.Background()
		items := []redisstore.Item{{Partition: in.p, Batch: in.setup()}}
		b.StartTimer()
		for range outcomes {
			if len(items) == 64 {
				applyAllCommitted(b, s, items)
				items = items[:0]
			}
			items = append(items, redisstore.Item{Partition: in.p, Batch: in.next()})
		}
		applyAllCommitted(b, s, items)
		b.StopTimer()

		var total int64
		for _, key := range s.PartitionKeys(in.p)[:2] {
			n, err := s.Client().MemoryUsage(ctx, key, 0).Result()
			if err != nil {
				b.Fatalf("MEMORY USAGE %s: %v", key, err)
			}
			total += n
		}
		perOutcome := float64(total) / outcomes
		b.ReportMetric(perOutcome, "B/outcome")
		b.ReportMetric(float64(len(in.record)), "payload-B")
		if limit := 2*float64(len(in.record)) + 200; perOutcome > limit {
			b.Errorf("%.0f bytes per pending outcome, above the %.0f budget", perOutcome, limit)
		}
	}
}

func applyAllCommitted(b *testing.B, s *redisstore.Store, items []redisstore.Item) {
	b.Helper()
	results, err := s.ApplyAll(context.Background(), items)
	if err != nil {
		b.Fatal(err)
	}
	for i, r := range results {
		if !r.Committed {
			b.Fatalf("item %d: precondition %d failed", i, r.Failed)
		}
	}
}
