package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// benchRID is the reservation id of the n-th outcome: fixed width, so every
// outcome of a benchmark has the same size.
func benchRID(n int) string { return fmt.Sprintf("res-%08d-7f3a9c21", n) }

// outcome256 is an aborted outcome whose JSON (the webhook's data object) is
// exactly 256 bytes, its detail padded to fit.
func outcome256(b *testing.B, rid string) schema.Outcome {
	b.Helper()
	o := schema.Outcome{ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0,
		Aborted: &schema.Aborted{Reason: "ref_conflict"}}
	j, err := json.Marshal(o)
	if err != nil {
		b.Fatal(err)
	}
	o.Aborted.Detail = strings.Repeat("x", 256-len(j))
	if j, _ = json.Marshal(o); len(j) != 256 {
		b.Fatalf("outcome JSON is %d bytes, not 256", len(j))
	}
	return o
}

// outcome1KiB is a committed outcome of 20 refs, whose record is about
// 1 KiB.
func outcome1KiB(rid string) schema.Outcome {
	refs := make([]schema.Ref, 20)
	for i := range refs {
		refs[i] = schema.Ref{Name: fmt.Sprintf("refs/heads/feature-%02d", i), New: strings.Repeat("ab", 32)}
	}
	return schema.Outcome{ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0,
		Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256, Refs: refs}}
}

func recordBytes(b *testing.B, o schema.Outcome) int {
	b.Helper()
	rec, err := schema.EncodeRecord(&o)
	if err != nil {
		b.Fatal(err)
	}
	return len(rec)
}

// benchEndpoints are the ids of a namespace's first n endpoints.
func benchEndpoints(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "endpoint-" + strconv.Itoa(i)
	}
	return ids
}

// ingest drives the real outbox.Appender into one partition whose
// endpoints all take every kind, so the rows are exactly those ingest
// writes: per outcome its log row, one pending row per endpoint and its
// seen row, beside the shared sequence, backlog and timer rows.
type ingest struct {
	st        store.NamespaceStore
	p         store.Partition
	endpoints []string
	app       *outbox.Appender
	outcome   func(rid string) schema.Outcome
	n         int
}

func newIngest(st store.NamespaceStore, clk clock.Clock, p store.Partition, endpoints int, outcome func(rid string) schema.Outcome) *ingest {
	return &ingest{st: st, p: p, endpoints: benchEndpoints(endpoints),
		app: &outbox.Appender{Store: st, Clock: clk}, outcome: outcome}
}

// setup stores the endpoints, enabled.
func (in *ingest) setup(b *testing.B) {
	b.Helper()
	for _, id := range in.endpoints {
		outboxtest.PutEndpoint(b, in.st, in.p, id, schema.Endpoint{Enabled: true})
	}
}

// next appends count outcomes in one request and fails unless every one is
// accepted.
func (in *ingest) next(ctx context.Context, b *testing.B, count int) {
	b.Helper()
	os := make([]schema.Outcome, count)
	for i := range os {
		os[i] = in.outcome(benchRID(in.n))
		in.n++
	}
	statuses, err := in.app.Append(ctx, in.p, os)
	if err != nil {
		b.Fatal(err)
	}
	for i, s := range statuses {
		if s.Code != outbox.Accepted {
			b.Fatalf("outcome %d: %s %s", i, s.Code, s.Detail)
		}
	}
}

// recorder passes every call to its store and keeps each batch applied.
type recorder struct {
	store.NamespaceStore
	batches []store.Batch
}

func (r *recorder) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	res, err := r.NamespaceStore.Apply(ctx, p, b)
	if err == nil && res.Committed {
		r.batches = append(r.batches, b)
	}
	return res, err
}

// recordIngest returns the batches the Appender applies for one endpoint
// and n single-outcome requests of outcome1KiB on a fresh partition, the
// first storing the endpoint. Replayed in order on another fresh partition
// they commit again, since their guards hold what the earlier ones wrote.
func recordIngest(b *testing.B, n int) []store.Batch {
	b.Helper()
	rec := &recorder{NamespaceStore: redistest.Miniredis(b)}
	in := newIngest(rec, clock.NewManual(outboxtest.T0), store.Partition{Namespace: "recorded"}, 1, outcome1KiB)
	in.setup(b)
	for range n {
		in.next(context.Background(), b, 1)
	}
	return rec.batches
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

// BenchmarkApplyIngest1KiB applies the guarded batches outbox.Appender
// writes for single-outcome requests to one endpoint (a 1 KiB record),
// recorded beforehand, from 32 goroutines, one partition each so their
// guards never conflict: the store's share of ingest, without the reads
// and planning.
func BenchmarkApplyIngest1KiB(b *testing.B) {
	b.Run("redis", func(b *testing.B) { benchIngest(b, benchStore(b)) })
	b.Run("miniredis", func(b *testing.B) { benchIngest(b, redistest.Miniredis(b)) })
}

func benchIngest(b *testing.B, s *redisstore.Store) {
	const goroutines = 32
	// The first batch stores the endpoint; the rest are one ingest each.
	batches := recordIngest(b, 1000)
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Int64
	var failed atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(recordBytes(b, outcome1KiB(benchRID(0)))))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		g := next.Add(1)
		var p store.Partition
		i := len(batches)
		for cycle := 0; pb.Next(); i++ {
			if i == len(batches) {
				// A fresh partition once the recording is spent: one
				// endpoint batch per 999 ingests.
				p = store.Partition{Namespace: fmt.Sprintf("bench-%d-%d", g, cycle)}
				cycle++
				if _, err := s.Apply(ctx, p, batches[0]); err != nil {
					b.Error(err)
					return
				}
				i = 1
			}
			r, err := s.Apply(ctx, p, batches[i])
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

// memoryOutcomes is how many outcomes a memory benchmark stores: enough
// that the partition's fixed rows and the encodings' fixed costs are small
// beside them, and that both the HASH and the ZSET are past their compact
// (listpack) encodings, as a real backlog is.
const memoryOutcomes = 4000

// partitionMemory is MEMORY USAGE (SAMPLES 0: every element counted) of
// the partition's HASH and ZSET.
func partitionMemory(b *testing.B, s *redisstore.Store, p store.Partition) int64 {
	b.Helper()
	var total int64
	for _, key := range s.PartitionKeys(p)[:2] {
		n, err := s.Client().MemoryUsage(context.Background(), key, 0).Result()
		if err != nil {
			b.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		total += n
	}
	return total
}

// rowCensus is a partition's rows by class: how many, and their key and
// value bytes.
type rowCensus map[schema.Class]struct{ rows, keyBytes, valueBytes int }

func census(b *testing.B, s *redisstore.Store, p store.Partition) rowCensus {
	b.Helper()
	c := rowCensus{}
	count := func(e store.Entry) {
		k := c[schema.Class(e.Key[0])]
		k.rows++
		k.keyBytes += len(e.Key)
		k.valueBytes += len(e.Value)
		c[schema.Class(e.Key[0])] = k
	}
	var after *store.Cursor
	for {
		page, err := s.Scan(context.Background(), p, "", store.Key([]byte{0x80}), after, redisstore.MaxScanLimit)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range page.Entries {
			count(e)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	for _, e := range outboxtest.Unordered(b, s, p, "", store.Key([]byte{0x80})) {
		count(e)
	}
	return c
}

// report reports the memory per outcome beyond the partition's endpoints,
// per outcome and endpoint, and the raw bytes (key and value) of the log,
// pending and seen rows per outcome, so the rest is Redis's own overhead.
func report(b *testing.B, s *redisstore.Store, p store.Partition, baseline int64, endpoints, jsonBytes, recBytes int) rowCensus {
	b.Helper()
	used := partitionMemory(b, s, p) - baseline
	c := census(b, s, p)
	b.ReportMetric(float64(used)/memoryOutcomes, "B/outcome")
	b.ReportMetric(float64(used)/memoryOutcomes/float64(endpoints), "B/outcome-endpoint")
	b.ReportMetric(float64(jsonBytes), "json-B")
	b.ReportMetric(float64(recBytes), "record-B")
	for _, k := range []struct {
		class schema.Class
		unit  string
	}{{schema.ClassLog, "log-raw-B/outcome"}, {schema.ClassPending, "pending-raw-B/outcome"}, {schema.ClassSeen, "seen-raw-B/outcome"}} {
		r := c[k.class]
		b.ReportMetric(float64(r.keyBytes+r.valueBytes)/memoryOutcomes, k.unit)
	}
	return c
}

// BenchmarkMemoryPerPendingOutcome measures the Redis memory one pending
// outcome takes in its partition, for 1 and 8 endpoints: the real
// outbox.Appender stores memoryOutcomes outcomes of 256 bytes of JSON, in
// requests of 100, and the benchmark reports MEMORY USAGE of the
// partition's HASH and ZSET, less what they held with the endpoints alone,
// divided by that count. Run it with -benchtime=1x.
//
// The one rule asserted is the layout's: an outcome is stored once per
// namespace, in one log row whatever the number of endpoints, which each
// stream's pending row only points at.
func BenchmarkMemoryPerPendingOutcome(b *testing.B) {
	for _, endpoints := range []int{1, 8} {
		b.Run(fmt.Sprintf("endpoints=%d", endpoints), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s, p, baseline, in := memorySetup(b, endpoints)
				b.StartTimer()
				for range memoryOutcomes / 100 {
					in.next(context.Background(), b, 100)
				}
				b.StopTimer()
				o := outcome256(b, benchRID(0))
				c := report(b, s, p, baseline, endpoints, 256, recordBytes(b, o))
				checkLayout(b, c, endpoints)
				// Each stream reads its queue from the log: no pending rows.
				if got := c[schema.ClassPending].rows; got != 0 {
					b.Errorf("%d pending rows, want none", got)
				}
				for _, id := range in.endpoints {
					if got := len(outboxtest.Queue(b, s, p, id)); got != memoryOutcomes {
						b.Errorf("%s queues %d rows, want %d", id, got, memoryOutcomes)
					}
				}
			}
		})
	}
}

// BenchmarkMemoryPerRetainedOutcome measures the Redis memory a delivered
// outcome keeps while it is retained: memoryOutcomes outcomes as in
// BenchmarkMemoryPerPendingOutcome, then every stream's rows acknowledged
// as the delivery handler does with a retention (outbox.Acks, Retain
// true), outbox.MaxAcksPerBatch rows a batch. What stays per outcome is its log row, each
// entry marked delivered, and its seen row. Run it with -benchtime=1x.
func BenchmarkMemoryPerRetainedOutcome(b *testing.B) {
	for _, endpoints := range []int{1, 8} {
		b.Run(fmt.Sprintf("endpoints=%d", endpoints), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s, p, baseline, in := memorySetup(b, endpoints)
				for range memoryOutcomes / 100 {
					in.next(context.Background(), b, 100)
				}
				b.StartTimer()
				for _, id := range in.endpoints {
					ackAll(b, s, p, id)
				}
				b.StopTimer()
				o := outcome256(b, benchRID(0))
				c := report(b, s, p, baseline, endpoints, 256, recordBytes(b, o))
				checkLayout(b, c, endpoints)
				if got := c[schema.ClassPending].rows; got != 0 {
					b.Errorf("%d pending rows left after every acknowledgement", got)
				}
				checkDelivered(b, s, p, endpoints)
			}
		})
	}
}

// memorySetup is a fresh store and partition holding the endpoints alone,
// its memory then, and an ingest of outcome256 into it.
func memorySetup(b *testing.B, endpoints int) (*redisstore.Store, store.Partition, int64, *ingest) {
	b.Helper()
	s := benchStore(b)
	p := store.Partition{Namespace: "memory"}
	in := newIngest(s, clock.System{}, p, endpoints, func(rid string) schema.Outcome { return outcome256(b, rid) })
	in.setup(b)
	return s, p, partitionMemory(b, s, p), in
}

// checkLayout fails the benchmark unless each outcome is one log row and
// one seen row.
func checkLayout(b *testing.B, c rowCensus, endpoints int) {
	b.Helper()
	if got := c[schema.ClassLog].rows; got != memoryOutcomes {
		b.Errorf("%d log rows for %d outcomes to %d endpoints, want one each", got, memoryOutcomes, endpoints)
	}
	if got := c[schema.ClassSeen].rows; got != memoryOutcomes {
		b.Errorf("%d seen rows, want %d", got, memoryOutcomes)
	}
}

// ackAll acknowledges every pending row of the stream of id as delivered,
// retaining them, as the delivery handler plans it: the backlog as read,
// the rows' log rows as read, at most outbox.MaxAcksPerBatch rows a batch.
func ackAll(b *testing.B, s *redisstore.Store, p store.Partition, id string) {
	b.Helper()
	for {
		rids, err := outboxtest.AckPage(context.Background(), s, p, id, outbox.MaxAcksPerBatch, true,
			outbox.Done{AtMs: time.Now().UnixMilli(), DurationMs: 12, Status: 204})
		if err != nil {
			b.Fatal(err)
		}
		if len(rids) == 0 {
			if q := outboxtest.Queue(b, s, p, id); len(q) > 0 {
				b.Fatalf("%d rows of %s left unacknowledged", len(q), id)
			}
			return
		}
	}
}

// checkDelivered fails the benchmark unless every log row holds an entry
// per endpoint, each delivered.
func checkDelivered(b *testing.B, s *redisstore.Store, p store.Partition, endpoints int) {
	b.Helper()
	start, end := schema.LogRange()
	var after *store.Cursor
	for {
		page, err := s.Scan(context.Background(), p, start, end, after, redisstore.MaxScanLimit)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range page.Entries {
			l, err := schema.DecodeLog(e.Value)
			if err != nil {
				b.Fatal(err)
			}
			if len(l.Entries) != endpoints {
				b.Fatalf("log row of %s holds %d entries, want %d", l.RID, len(l.Entries), endpoints)
			}
			for _, en := range l.Entries {
				if en.State != schema.EntryDelivered {
					b.Fatalf("log row of %s: %s is %s", l.RID, en.Endpoint, en.State)
				}
			}
		}
		if page.Next == nil {
			return
		}
		after = page.Next
	}
}
