package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// countingStore counts round trips, and fails the next namespace read
// when told to, as a Redis that went away would.
type countingStore struct {
	*redisstore.Store
	trips    atomic.Int64
	totals   atomic.Int64
	failNext atomic.Bool
}

func (c *countingStore) fail() error {
	c.trips.Add(1)
	if c.failNext.CompareAndSwap(true, false) {
		return fmt.Errorf("scan: %w", store.ErrUnavailable)
	}
	return nil
}

func (c *countingStore) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if err := c.fail(); err != nil {
		return store.Page{}, err
	}
	return c.Store.Scan(ctx, p, start, end, after, limit)
}

func (c *countingStore) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	c.trips.Add(1)
	return c.Store.GetMany(ctx, p, keys)
}

func (c *countingStore) ReadMany(ctx context.Context, p store.Partition, reads []store.Read) ([]store.ReadResult, error) {
	c.trips.Add(1)
	return c.Store.ReadMany(ctx, p, reads)
}

func (c *countingStore) Summed(ctx context.Context, bucket int) ([]store.Partition, error) {
	c.trips.Add(1)
	return c.Store.Summed(ctx, bucket)
}

func (c *countingStore) Totals(ctx context.Context) ([]store.BucketTotals, error) {
	c.totals.Add(1)
	return c.Store.Totals(ctx)
}

type backlogSetup struct {
	st  *countingStore
	clk *clock.Manual
	s   *BacklogSampler
}

func newBacklogSetup(t *testing.T, st *redisstore.Store, perTick int) *backlogSetup {
	t.Helper()
	b := &backlogSetup{st: &countingStore{Store: st}, clk: clock.NewManual(t0)}
	var err error
	b.s, err = NewBacklogSampler(BacklogConfig{Store: b.st, Registerer: prometheus.NewRegistry(), Clock: b.clk, PerTick: perTick,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ingest accepts outcomes into namespace ns, on an endpoint "ep" enabled or
// not, at the setup's clock.
func (b *backlogSetup) ingest(t *testing.T, ns string, enabled bool, outcomes ...schema.Outcome) {
	t.Helper()
	p := store.Partition{Namespace: ns}
	outboxtest.PutEndpoint(t, b.st, p, ep, schema.Endpoint{Enabled: enabled})
	app := &outbox.Appender{Store: b.st, Clock: b.clk}
	if _, err := app.Append(t.Context(), p, outcomes); err != nil {
		t.Fatal(err)
	}
}

type gauges struct{ rows, bytes, age, at, unread float64 }

func (b *backlogSetup) gauges() gauges {
	s := b.s
	return gauges{testutil.ToFloat64(s.rows), testutil.ToFloat64(s.bytes), testutil.ToFloat64(s.oldestAge), testutil.ToFloat64(s.sampledAt), testutil.ToFloat64(s.unread)}
}

// pass ticks until a pass is published, checking that no tick makes more
// than three round trips per namespace it may read and that the gauges
// hold still until the pass is complete. It returns the ticks taken.
func (b *backlogSetup) pass(t *testing.T, perTick int) int {
	t.Helper()
	before := b.gauges()
	for ticks := 1; ; ticks++ {
		b.st.trips.Store(0)
		finished, _ := b.s.tick(t.Context())
		if n := b.st.trips.Load(); n > int64(3*perTick) {
			t.Fatalf("tick %d made %d round trips, more than 3 × %d", ticks, n, perTick)
		}
		if finished {
			return ticks
		}
		if g := b.gauges(); g != before {
			t.Fatalf("tick %d moved the gauges mid-pass: %+v, before %+v", ticks, g, before)
		}
	}
}

func recordBytes(t *testing.T, outcomes ...schema.Outcome) float64 {
	t.Helper()
	n := 0
	for i := range outcomes {
		v, err := schema.EncodeRecord(&outcomes[i])
		if err != nil {
			t.Fatal(err)
		}
		n += len(v)
	}
	return float64(n)
}

// The gauges sum every namespace's pending rows and bytes, disabled
// endpoints included, and age the oldest pending row; a pass reads a
// bounded number of namespaces a tick and changes the gauges only once
// complete.
func TestBacklogGaugesSumEveryNamespaceOncePerCompletePass(t *testing.T) {
	redistest.Each(t, func(t *testing.T, be redistest.Backend) {
		b := newBacklogSetup(t, be.New(t), 1)
		b.ingest(t, "n0", true, committed("a"), aborted("b"))
		b.clk.Advance(10 * time.Second)
		b.ingest(t, "n1", true, committed("c"))
		b.clk.Advance(10 * time.Second)
		b.ingest(t, "n2", false, committed("d"))
		b.clk.Advance(40 * time.Second)

		ticks := b.pass(t, 1)
		want := gauges{rows: 4, bytes: recordBytes(t, committed("a"), aborted("b"), committed("c"), committed("d")),
			age: 60, at: float64(b.clk.Now().UnixMilli()) / 1000}
		if g := b.gauges(); g != want {
			t.Fatalf("after a pass of %d ticks: %+v, want %+v", ticks, g, want)
		}
		// The totals once, then each namespace holding rows (three, in at
		// most three buckets) and its bucket's listing: whatever the
		// number of buckets.
		if ticks > 7 || b.st.totals.Load() != 1 {
			t.Fatalf("a pass of %d ticks and %d reads of the totals, want at most 7 and 1", ticks, b.st.totals.Load())
		}

		// n0's rows dropped with its endpoint; n1 made unreadable, so
		// left out of the ages and counted, its rows still summed; n3 new.
		// The oldest row dated is n2's, 50 s old.
		admin := &outbox.Admin{Store: b.st, Clock: b.clk}
		if _, err := admin.DeleteEndpoint(t.Context(), store.Partition{Namespace: "n0"}, ep, true); err != nil {
			t.Fatal(err)
		}
		bad, _ := schema.BacklogKey("broken")
		var batch store.Batch
		batch.Put(bad, store.Value{0x7f})
		if res, err := b.st.Apply(t.Context(), store.Partition{Namespace: "n1"}, batch); err != nil || !res.Committed {
			t.Fatal(res, err)
		}
		b.ingest(t, "n3", true, committed("e"))
		b.clk.Advance(10 * time.Second)
		b.pass(t, 1)
		want = gauges{rows: 3, bytes: recordBytes(t, committed("c"), committed("d"), committed("e")), age: 50, at: float64(b.clk.Now().UnixMilli()) / 1000, unread: 1}
		if g := b.gauges(); g != want {
			t.Fatalf("second pass: %+v, want %+v", g, want)
		}
	})
}

// A namespace that cannot be read for now (Redis away) is read again next
// tick, not counted as empty: the pass still sums every row.
func TestABacklogReadThatFailsIsRetriedNotCountedEmpty(t *testing.T) {
	b := newBacklogSetup(t, redistest.Miniredis(t), 10)
	b.ingest(t, "n0", true, committed("a"))
	b.st.failNext.Store(true)
	finished, _ := b.s.tick(t.Context())
	if finished {
		t.Fatal("the pass finished through a failed read")
	}
	b.pass(t, 10)
	if g := b.gauges(); g.rows != 1 || g.unread != 0 {
		t.Fatalf("after a failed read: %+v, want 1 row, none unread", g)
	}
}

// Started, the sampler runs a pass at once, then waits Every from the
// pass's start, or Pause between the ticks of a pass; Stop ends it.
func TestTheBacklogSamplerTicksAtOnceThenWaits(t *testing.T) {
	for _, tc := range []struct {
		perTick int
		want    time.Duration
	}{{1000, DefaultBacklogEvery}, {1, DefaultBacklogPause}} {
		st := &countingStore{Store: redistest.Miniredis(t)}
		// Two namespaces with rows: a pass of one namespace a tick takes
		// more than one.
		for _, ns := range []string{"a", "b"} {
			outboxtest.PutEndpoint(t, st, store.Partition{Namespace: ns}, ep, schema.Endpoint{Enabled: true})
			app := &outbox.Appender{Store: st, Clock: clock.NewManual(t0)}
			if _, err := app.Append(t.Context(), store.Partition{Namespace: ns}, []schema.Outcome{committed("x")}); err != nil {
				t.Fatal(err)
			}
		}
		clk := clock.NewManual(t0)
		waits := make(chan time.Duration)
		s, err := NewBacklogSampler(BacklogConfig{Store: st, Registerer: prometheus.NewRegistry(), Clock: clk, PerTick: tc.perTick,
			Logger: slog.New(slog.DiscardHandler),
			after: func(d time.Duration) <-chan time.Time {
				waits <- d
				return make(chan time.Time)
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		if d := <-waits; d != tc.want {
			t.Errorf("per tick %d: first wait %v, want %v", tc.perTick, d, tc.want)
		}
		published := testutil.ToFloat64(s.sampledAt) != 0
		if published != (tc.perTick == 1000) {
			t.Errorf("per tick %d: published after the first tick: %v", tc.perTick, published)
		}
		s.Stop()
	}
}

// Beside namespaces that hold endpoints and timers but no pending row, a
// pass reads the totals and nothing else, however many they are.
func TestAnIdleFleetCostsAPassOneReadOfTheTotals(t *testing.T) {
	b := newBacklogSetup(t, redistest.Miniredis(t), 10)
	for i := range 50 {
		p := store.Partition{Namespace: fmt.Sprintf("idle%02d", i)}
		outboxtest.PutEndpoint(t, b.st.Store, p, ep, schema.Endpoint{Enabled: true})
		var batch store.Batch
		batch.Put(timers.Key(t0+3_600_000, timers.KindOutcomeDelivery, ep), timers.EncodeIdle(nil))
		if res, err := b.st.Store.Apply(t.Context(), p, batch); err != nil || !res.Committed {
			t.Fatal(res, err)
		}
	}
	b.st.trips.Store(0)
	if finished, _ := b.s.tick(t.Context()); !finished {
		t.Fatal("the pass of an idle fleet took more than a tick")
	}
	if n, tot := b.st.trips.Load(), b.st.totals.Load(); n != 0 || tot != 1 {
		t.Fatalf("an idle pass made %d namespace reads and %d reads of the totals, want 0 and 1", n, tot)
	}
}
