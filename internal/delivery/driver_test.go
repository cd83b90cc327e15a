package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/hookrelay/relay/internal/testlog"
	"github.com/hookrelay/relay/internal/timers"
)

// patience bounds how long a test waits for the driver before it fails; it
// never paces the test.
const patience = 30 * time.Second

// never is a timer that never ends: as Config.slowTimer, no fire leaves the
// main lane for taking long.
func never(time.Duration) <-chan time.Time { return nil }

// fleet is a store with streams on it, for driver tests on real time.
type fleet struct {
	t   *testing.T
	ctx context.Context
	st  *redisstore.Store
	app *outbox.Appender
}

func eachFleet(t *testing.T, f func(t *testing.T, fl *fleet)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		st := b.New(t)
		f(t, &fleet{t: t, ctx: context.Background(), st: st, app: &outbox.Appender{Store: st, Clock: clock.System{}}})
	})
}

func (f *fleet) endpoint(ns, id string, cfg schema.Endpoint) {
	f.t.Helper()
	outboxtest.PutEndpoint(f.t, f.st, store.Partition{Namespace: ns}, id, cfg)
}

func (f *fleet) seed(ns string, rids ...string) {
	f.t.Helper()
	var os []schema.Outcome
	for _, rid := range rids {
		os = append(os, committed(rid))
	}
	st, err := f.app.Append(f.ctx, store.Partition{Namespace: ns}, os)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, s := range st {
		if s.Code != outbox.Accepted {
			f.t.Fatalf("append: %s %s", s.Code, s.Detail)
		}
	}
}

func (f *fleet) backlog(ns, id string) uint64 {
	f.t.Helper()
	key, _ := schema.BacklogKey(id)
	v, found, err := f.st.Get(f.ctx, store.Partition{Namespace: ns}, key)
	if err != nil {
		f.t.Fatal(err)
	}
	if !found {
		return 0
	}
	b, err := schema.DecodeBacklog(v)
	if err != nil {
		f.t.Fatal(err)
	}
	return b.Rows
}

func (f *fleet) driver(sink Sink, cfg Config) *Driver {
	f.t.Helper()
	reg, err := timers.NewHandlers(&Handler{Sink: sink, Metrics: cfg.Metrics})
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.Store, cfg.Handlers = f.st, reg
	return f.start(cfg)
}

// start starts a driver of cfg, stopped when the test ends without waiting
// for its fires.
func (f *fleet) start(cfg Config) *Driver {
	f.t.Helper()
	d, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := d.Start(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		_ = d.Stop(ctx)
	})
	return d
}

func rids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// tally counts deliveries per stream and row and says when it has seen n.
type tally struct {
	mu    sync.Mutex
	n     int
	seen  map[string]int
	total int
	all   chan struct{}
	// block, when set, holds the calls of matching endpoints until ctx ends.
	block func(o Parcel) bool
}

func newTally(n int) *tally { return &tally{n: n, seen: map[string]int{}, all: make(chan struct{})} }

func (c *tally) Deliver(ctx context.Context, o Parcel) error {
	if c.block != nil && c.block(o) {
		<-ctx.Done()
		return ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[o.Namespace+"/"+o.EndpointID+"/"+o.Outcome.ReservationID]++
	c.total++
	if c.total == c.n {
		close(c.all)
	}
	return nil
}

func (c *tally) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.all:
	case <-time.After(patience):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("delivered %d of %d", c.total, c.n)
	}
}

func TestTheDriverDeliversEveryStreamOfEveryNamespaceOnce(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		namespaces, endpoints, per := []string{"acme", "globex", "initech", "umbrella"}, []string{"billing", "audit"}, 40
		for _, ns := range namespaces {
			for _, id := range endpoints {
				f.endpoint(ns, id, schema.Endpoint{Enabled: true})
			}
			f.seed(ns, rids(ns, per)...)
		}
		sink := newTally(len(namespaces) * len(endpoints) * per)
		d := f.driver(sink, Config{Concurrency: 4})
		sink.wait(t)
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		for key, n := range sink.seen {
			if n != 1 {
				t.Fatalf("%s delivered %d times", key, n)
			}
		}
		for _, ns := range namespaces {
			for _, id := range endpoints {
				if b := f.backlog(ns, id); b != 0 {
					t.Fatalf("%s/%s backlog %d", ns, id, b)
				}
			}
			rows, err := timers.All(f.ctx, f.st, store.Partition{Namespace: ns})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if r.Kind == timers.KindOutcomeDelivery {
					t.Fatalf("%s: delivery timer %s left", ns, r.Reference)
				}
			}
		}
	})
}

func TestWakeDeliversWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		sink := newTally(1)
		polled := make(chan struct{}, 1)
		d := f.driver(sink, Config{after: func(time.Duration) <-chan time.Time {
			select {
			case polled <- struct{}{}:
			default:
			}
			return nil // the poll interval never ends
		}})
		<-polled
		f.seed("acme", "r-1")
		d.Wake()
		sink.wait(t)
	})
}

func TestWakePartitionDeliversWithoutReadingEveryDueIndex(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		cs := &counting{DueStore: f.st, calls: map[string]int{}}
		polled := make(chan struct{}, 1)
		sink := newTally(1)
		reg, _ := timers.NewHandlers(&Handler{Sink: sink})
		d := f.start(Config{Store: cs, Handlers: reg, after: func(time.Duration) <-chan time.Time {
			select {
			case polled <- struct{}{}:
			default:
			}
			return nil // the poll interval never ends
		}})
		<-polled
		f.seed("acme", "r-1")
		d.WakePartition(store.Partition{Namespace: "acme"})
		sink.wait(t)
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.calls["dueall"] != 1 {
			t.Fatalf("due indexes read %d times, want only the start's 1", cs.calls["dueall"])
		}
	})
}

// counting counts the store calls a driver makes.
type counting struct {
	DueStore
	mu    sync.Mutex
	calls map[string]int
}

func (c *counting) add(op string) {
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
}

func (c *counting) DueAll(ctx context.Context, upToMs int64, limit int) ([]store.DuePartition, error) {
	c.add("dueall")
	return c.DueStore.DueAll(ctx, upToMs, limit)
}

func (c *counting) Get(ctx context.Context, p store.Partition, k store.Key) (store.Value, bool, error) {
	c.add("get")
	return c.DueStore.Get(ctx, p, k)
}

func (c *counting) GetMany(ctx context.Context, p store.Partition, ks []store.Key) ([]store.Row, error) {
	c.add("getmany")
	return c.DueStore.GetMany(ctx, p, ks)
}

// ReadMany counts the reads one round trip makes on a store that has
// them (store.MultiReader), as one.
func (c *counting) ReadMany(ctx context.Context, p store.Partition, reads []store.Read) ([]store.ReadResult, error) {
	c.add("readmany")
	return store.ReadMany(ctx, c.DueStore, p, reads)
}

func (c *counting) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	c.add("scan")
	return c.DueStore.Scan(ctx, p, start, end, after, limit)
}

func (c *counting) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	c.add("apply")
	return c.DueStore.Apply(ctx, p, b)
}

func TestAnIdleDriverReadsOnlyTheDueIndexesOncePerPoll(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		// A stream backing off is not due: the driver must not touch it.
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.seed("acme", "r-1")
		var b store.Batch
		rows, _ := timers.All(f.ctx, f.st, store.Partition{Namespace: "acme"})
		for _, r := range rows {
			if r.Kind == timers.KindOutcomeDelivery {
				r.MoveTo(&b, time.Now().Add(time.Hour).UnixMilli())
			}
		}
		if res, err := f.st.Apply(f.ctx, store.Partition{Namespace: "acme"}, b); err != nil || !res.Committed {
			t.Fatalf("move timer: %+v %v", res, err)
		}
		cs := &counting{DueStore: f.st, calls: map[string]int{}}
		polled, tick := make(chan time.Duration), make(chan time.Time)
		reg, _ := timers.NewHandlers(&Handler{Sink: newTally(1)})
		d := f.start(Config{Store: cs, Handlers: reg, after: func(d time.Duration) <-chan time.Time {
			polled <- d
			return tick
		}})
		const polls = 5
		for i := range polls {
			if got := <-polled; got != DefaultPollInterval {
				t.Fatalf("waits %v between polls, want %v", got, DefaultPollInterval)
			}
			if i < polls-1 {
				tick <- time.Now()
			}
		}
		go func() {
			for range polled {
			}
		}()
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cs.calls["dueall"] != polls || len(cs.calls) != 1 {
			t.Fatalf("store calls %v over %d idle polls, want only %d DueAll", cs.calls, polls, polls)
		}
	})
}

func TestADeadEndpointDoesNotDelayTheOtherStreamsOfItsNamespace(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "dead", schema.Endpoint{Enabled: true})
		f.endpoint("acme", "live", schema.Endpoint{Enabled: true})
		f.seed("acme", rids("r", 40)...)
		sink := newTally(40)
		sink.block = func(o Parcel) bool { return o.EndpointID == "dead" }
		d := f.driver(sink, Config{Concurrency: 2})
		// Every live row goes while the dead endpoint's call hangs.
		sink.wait(t)
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		if err := d.Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("stop: %v, want canceled", err)
		}
		if b := f.backlog("acme", "dead"); b != 40 {
			t.Fatalf("dead endpoint's backlog %d, want 40 kept", b)
		}
	})
}

func TestStopLetsTheFiresInFlightFinish(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.seed("acme", "r-1")
		sink := newGated()
		sink.hold["*"] = true
		d := f.driver(sink, Config{})
		<-sink.entered
		stopped := make(chan error)
		go func() { stopped <- d.Stop(f.ctx) }()
		close(sink.release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if b := f.backlog("acme", "billing"); b != 0 {
			t.Fatalf("backlog %d after Stop returned: the fire in flight did not finish", b)
		}
	})
}

func TestAFireCanceledByStopWritesNothing(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.seed("acme", "r-1", "r-2")
		p := store.Partition{Namespace: "acme"}
		key, _ := schema.BacklogKey("billing")
		before, _, _ := f.st.Get(f.ctx, p, key)
		sink := newGated()
		sink.hold["*"] = true
		d := f.driver(sink, Config{})
		<-sink.entered
		ctx, cancel := context.WithCancel(f.ctx)
		cancel()
		if err := d.Stop(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("stop: %v", err)
		}
		after, _, _ := f.st.Get(f.ctx, p, key)
		if string(before) != string(after) {
			t.Fatal("a canceled fire changed the backlog")
		}
		row, found, err := timers.Find(f.ctx, f.st, p, timers.KindOutcomeDelivery, "billing")
		if err != nil || !found || row.Lease == nil {
			t.Fatalf("timer %+v (found %v, %v): want it still leased", row, found, err)
		}
	})
}

func TestTheDriverFiresAtMostItsConcurrencyAtOnce(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		ids := []string{"e1", "e2", "e3", "e4", "e5", "e6"}
		for _, id := range ids {
			f.endpoint("acme", id, schema.Endpoint{Enabled: true})
		}
		f.seed("acme", "r-1")
		sink := newGated()
		sink.hold["*"] = true
		polled := make(chan struct{}, 16)
		// No fire moves to the slow lane: this is the main lane's bound.
		d := f.driver(sink, Config{Concurrency: 3, slowTimer: never, after: func(time.Duration) <-chan time.Time {
			polled <- struct{}{}
			return nil
		}})
		for range 3 {
			<-sink.entered
		}
		// A poll while every worker is busy launches nothing more.
		for len(polled) > 0 {
			<-polled
		}
		d.Wake()
		<-polled
		d.mu.Lock()
		busy := len(d.inFlight)
		d.mu.Unlock()
		if busy != 3 {
			t.Fatalf("%d fires in flight with 3 workers", busy)
		}
		close(sink.release)
		for range len(ids) - 3 {
			<-sink.entered
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if sink.max != 3 {
			t.Fatalf("%d streams fired at once, want 3", sink.max)
		}
	})
}

func TestTwoDriversOnOneStoreDeliverEachRowOnce(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		var want int
		for i := range 6 {
			ns := fmt.Sprintf("ns-%d", i)
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, rids(ns, 20)...)
			want += 20
		}
		sink := newTally(want)
		f.driver(sink, Config{Concurrency: 2})
		f.driver(sink, Config{Concurrency: 2})
		sink.wait(t)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for key, n := range sink.seen {
			if n != 1 {
				t.Fatalf("%s delivered %d times", key, n)
			}
		}
	})
}

func TestAStreamLeasedByADeadProcessIsTakenOverAndCounted(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.seed("acme", "r-1")
		p := store.Partition{Namespace: "acme"}
		row, found, err := timers.Find(f.ctx, f.st, p, timers.KindOutcomeDelivery, "billing")
		if err != nil || !found {
			t.Fatalf("timer: %v %v", found, err)
		}
		// A process claimed the stream a second ago and died: its lease
		// ran out long since.
		past := time.Now().Add(-time.Second).UnixMilli()
		if _, ok, err := timers.Claim(f.ctx, f.st, p, row, past, time.Millisecond); err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		sink := newTally(1)
		d := f.driver(sink, Config{Metrics: m})
		sink.wait(t)
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]float64{
			"takeovers": 1, "delivered": 1, "done": 1,
		} {
			var got float64
			switch name {
			case "takeovers":
				got = testutil.ToFloat64(m.takeovers)
			case "delivered":
				got = testutil.ToFloat64(m.deliveries.WithLabelValues(ResultDelivered))
			case "done":
				got = testutil.ToFloat64(m.fires.WithLabelValues("done"))
			}
			if got != want {
				t.Fatalf("%s = %v, want %v", name, got, want)
			}
		}
		if n, err := testutil.GatherAndCount(reg); err != nil || n < 6 {
			t.Fatalf("%d metrics gathered (%v)", n, err)
		}
	})
}

// A stream with a long backlog reschedules itself after every fire, and
// each fire's end scans its partition again. That must not postpone the
// poll interval: a timer of another namespace that comes due (a backoff
// ending, an ingest on another process, an expired lease) is found by the
// next full poll, while the busy stream still keeps the driver busy.
func TestTheDriverStillPollsEveryDueIndexWhileOneStreamKeepsItBusy(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		const busyRows = 300
		f.endpoint("busy", "billing", schema.Endpoint{Enabled: true})
		all := rids("b", busyRows)
		for i := 0; i < busyRows; i += 100 {
			f.seed("busy", all[i:i+100]...)
		}
		f.endpoint("quiet", "billing", schema.Endpoint{Enabled: true})
		f.seed("quiet", "q-1")
		quiet := store.Partition{Namespace: "quiet"}
		moveQuiet := func(dueMs int64) {
			t.Helper()
			row, found, err := timers.Find(f.ctx, f.st, quiet, timers.KindOutcomeDelivery, "billing")
			if err != nil || !found {
				t.Fatalf("quiet timer: %v %v", found, err)
			}
			var b store.Batch
			row.MoveTo(&b, dueMs)
			if res, err := f.st.Apply(f.ctx, quiet, b); err != nil || !res.Committed {
				t.Fatalf("move timer: %+v %v", res, err)
			}
		}
		moveQuiet(time.Now().Add(time.Hour).UnixMilli())

		delivered, third := make(chan struct{}), make(chan struct{})
		var once sync.Once
		var busyCalls atomic.Int64
		sink := SinkFunc(func(ctx context.Context, o Parcel) error {
			if o.Namespace == "quiet" {
				once.Do(func() { close(delivered) })
			} else if busyCalls.Add(1) == 3 {
				// Launched by the second pass after a busy fire ended.
				close(third)
			}
			return nil
		})
		reg, err := timers.NewHandlers(&Handler{Sink: sink, MaxRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Each interval the driver asks for is a timer of its own, as with
		// time.After; only the first one is made to end.
		first := make(chan chan time.Time, 1)
		var asked sync.Once
		f.start(Config{Store: f.st, Handlers: reg, Concurrency: 4, after: func(time.Duration) <-chan time.Time {
			c := make(chan time.Time, 1)
			asked.Do(func() { first <- c })
			return c
		}})
		interval := <-first
		<-third
		moveQuiet(time.Now().UnixMilli())
		interval <- time.Now()
		select {
		case <-delivered:
		case <-time.After(patience):
			t.Fatalf("the quiet namespace's row was not delivered after the poll interval ended; "+
				"the busy stream has %d of %d rows left", f.backlog("busy", "billing"), busyRows)
		}
	})
}

func TestADriverRefusesALeaseShorterThanAFire(t *testing.T) {
	t.Parallel()
	reg, _ := timers.NewHandlers(&Handler{Sink: newTally(1)})
	_, err := New(Config{Store: &counting{}, Handlers: reg, Lease: time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("New with a 1 ms lease: %v, want refused", err)
	}
}

// sameBucket returns n namespaces whose partitions share one due-index
// bucket of f's store.
func sameBucket(f *fleet, n int) []string {
	want := f.st.BucketOf(store.Partition{Namespace: "ns-0"})
	var out []string
	for i := 0; len(out) < n; i++ {
		ns := fmt.Sprintf("ns-%d", i)
		if f.st.BucketOf(store.Partition{Namespace: ns}) == want {
			out = append(out, ns)
		}
	}
	return out
}

// A full poll reads at most Concurrency partitions of each bucket. A bucket
// holding more due streams than that is more work than the workers took, so
// the next fire to end reads every due index again, rather than leaving the
// rest for the poll interval with every worker idle.
func TestDueStreamsBeyondOneBucketsDueReadAreFiredWhenWorkersFreeUpWithoutWaitingForThePollInterval(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		namespaces := sameBucket(f, 5)
		for _, ns := range namespaces {
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, ns+"-r")
		}
		sink := newTally(len(namespaces))
		f.driver(sink, Config{Concurrency: 2, after: func(time.Duration) <-chan time.Time {
			return nil // the poll interval never ends
		}})
		select {
		case <-sink.all:
		case <-time.After(patience):
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Fatalf("delivered %d of %d due streams of one bucket: the rest wait for the poll interval while both workers are free",
				sink.total, sink.n)
		}
	})
}

// failingWrites answers reads and refuses every write, as a Redis replica
// does (READONLY), or a primary short of replicas (NOREPLICAS), or a Redis
// 6 at maxmemory (OOM: no #!lua flags, so even a claim is refused).
type failingWrites struct {
	DueStore
}

func (s *failingWrites) Apply(context.Context, store.Partition, store.Batch) (store.Result, error) {
	return store.Result{}, errors.New("READONLY You can't write against a read only replica.")
}

// A claim refused by the store leaves its row due. The fire's end must not
// ask the loop to scan again at once: with the store still refusing, that
// is a tight loop of scans and refused claims, each with a warning, instead
// of one attempt per poll interval.
func TestAStoreThatRefusesWritesIsNotRetriedInATightLoopBetweenPolls(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		for _, id := range []string{"billing", "audit", "crm"} {
			f.endpoint("acme", id, schema.Endpoint{Enabled: true})
		}
		f.seed("acme", "r-1")
		fs := &failingWrites{DueStore: f.st}
		reg, err := timers.NewHandlers(&Handler{Sink: newTally(1)})
		if err != nil {
			t.Fatal(err)
		}
		finished := make(chan bool, 2)
		f.start(Config{Store: fs, Handlers: reg, Concurrency: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			after: func(time.Duration) <-chan time.Time {
				return nil // the poll interval never ends
			},
			finished: func(kicked bool) { finished <- kicked }})
		for range 2 {
			if <-finished {
				t.Fatal("a fire whose claim the store refused asked for another poll at once")
			}
		}
	})
}

// relay_streams_due counts only the timers of the partitions a poll scanned
// before it ran out of workers, and a scan takes at most the free workers'
// worth: with every worker busy it reads 0 however many streams are due,
// exactly when an operator needs to see the backlog.
func TestTheStreamsDueGaugeCountsTheDueStreamsWhileEveryWorkerIsBusy(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		namespaces := []string{"ns-a", "ns-b", "ns-c", "ns-d", "ns-e"}
		for _, ns := range namespaces {
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, ns+"-r")
		}
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		sink := newGated()
		sink.hold["*"] = true
		polled := make(chan struct{}, 16)
		d := f.driver(sink, Config{Concurrency: 1, Metrics: m, slowTimer: never, after: func(time.Duration) <-chan time.Time {
			polled <- struct{}{}
			return nil
		}})
		<-sink.entered // the only worker is busy with one stream
		<-polled       // the first full poll is over
		d.Wake()
		<-polled // a full poll while the worker is busy
		if got, want := testutil.ToFloat64(m.due), float64(len(namespaces)-1); got < want {
			t.Fatalf("relay_streams_due = %v with %v streams due and not in flight", got, want)
		}
	})
}

// coarse is the wall clock read at a coarse resolution, so that a fire ends
// within the tick its timer became due in, as a fast fire (a page of
// synthetic rows, a receiver on the same host) ends within its millisecond.
type coarse struct{ res time.Duration }

func (c coarse) Now() time.Time { return time.Now().Truncate(c.res) }

// A fire that delivered reschedules its timer due now. Were it due a
// millisecond after it was last due (max(now, due+1)), a
// fire ending in the millisecond its timer was due would leave the timer
// due just after the rescan of its partition looks: the scan would find
// nothing, no fire would be left to kick the loop, and the stream would
// wait for the next full poll with every worker free.
func TestABusyStreamWhoseFireEndsInTheMillisecondItWasDueIsFiredAgainWithoutWaitingForThePollInterval(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := coarse{res: 100 * time.Millisecond}
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		const rows = 6
		f.seed("acme", rids("r", rows)...)
		sink := newTally(rows)
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk, MaxRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		const interval = time.Hour
		f.start(Config{Store: f.st, Handlers: reg, Clock: clk, PollInterval: interval,
			after: func(d time.Duration) <-chan time.Time {
				if d >= interval {
					return nil // the poll interval never ends
				}
				return time.After(d)
			}})
		select {
		case <-sink.all:
		case <-time.After(patience):
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Fatalf("delivered %d of %d rows of a busy stream: its rescheduled timer waits for the poll interval", sink.total, sink.n)
		}
	})
}

// dueAt moves the delivery timer of ns/billing to dueMs.
func (f *fleet) dueAt(ns string, dueMs int64) {
	f.t.Helper()
	p := store.Partition{Namespace: ns}
	row, found, err := timers.Find(f.ctx, f.st, p, timers.KindOutcomeDelivery, "billing")
	if err != nil || !found {
		f.t.Fatalf("timer of %s: %v %v", ns, found, err)
	}
	var b store.Batch
	row.MoveTo(&b, dueMs)
	if res, err := f.st.Apply(f.ctx, p, b); err != nil || !res.Committed {
		f.t.Fatalf("move timer of %s: %+v %v", ns, res, err)
	}
}

// contended is a store shared with another relay, which claims the timer of
// one partition between this driver's due read and its scan of it, after
// this driver's first fire has ended.
type contended struct {
	DueStore
	f        *fleet
	taken    store.Partition
	fireDone chan struct{}
	once     sync.Once
}

func (s *contended) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if p == s.taken {
		s.once.Do(func() {
			<-s.fireDone
			row, found, err := timers.Find(ctx, s.DueStore, p, timers.KindOutcomeDelivery, "billing")
			if err != nil || !found {
				s.f.t.Errorf("timer of %s: %v %v", p, found, err)
				return
			}
			if _, ok, err := timers.Claim(ctx, s.DueStore, p, row, time.Now().UnixMilli(), timers.DefaultLease); err != nil || !ok {
				s.f.t.Errorf("the other relay's claim: %v %v", ok, err)
			}
		})
	}
	return s.DueStore.Scan(ctx, p, start, end, after, limit)
}

// A bucket whose due read came back full is read again when a fire ends,
// also when every fire the poll launched has ended before the poll itself
// (here another relay took a partition of the read, so the poll launched
// fewer fires than it has workers, and the one it launched ended while the
// poll scanned on): the rest of the bucket does not wait for the poll
// interval with every worker free.
func TestABucketReadThatCameBackFullIsReadAgainEvenWhenEveryFireItLaunchedHasEnded(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		ns := sameBucket(f, 3) // first, taken by another relay, last
		now := time.Now().UnixMilli()
		for i, n := range ns {
			f.endpoint(n, "billing", schema.Endpoint{Enabled: true})
			f.seed(n, n+"-r")
			f.dueAt(n, now-int64(3-i)*1000)
		}
		cs := &contended{DueStore: f.st, f: f, taken: store.Partition{Namespace: ns[1]}, fireDone: make(chan struct{})}
		var ended sync.Once
		sink := newTally(2)
		reg, err := timers.NewHandlers(&Handler{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		f.start(Config{Store: cs, Handlers: reg, Concurrency: 2,
			after:    func(time.Duration) <-chan time.Time { return nil }, // the poll interval never ends
			finished: func(bool) { ended.Do(func() { close(cs.fireDone) }) },
		})
		select {
		case <-sink.all:
		case <-time.After(patience):
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Fatalf("delivered %d of %d: %s's stream waits for the poll interval with both workers free (seen %v)",
				sink.total, sink.n, ns[2], sink.seen)
		}
	})
}

// heldStore holds the fire of one partition until the driver's first full
// poll is over.
type heldStore struct {
	DueStore
	held   store.Partition
	polled chan struct{}
}

func (s *heldStore) GetMany(ctx context.Context, p store.Partition, keys []store.Key) ([]store.Row, error) {
	if p == s.held {
		<-s.polled
	}
	return s.DueStore.GetMany(ctx, p, keys)
}

// A fire that fails after its claim (here its endpoint row does not decode)
// has moved its timer a lease away, so its end hands the worker to the due
// work a poll left for want of workers; only a failed claim (the store
// refusing writes, the row still due) waits for the poll interval.
func TestAFireThatFailsAfterItsClaimStillHandsTheWorkerToTheDueWorkAPollLeft(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		now := time.Now().UnixMilli()
		for i, ns := range []string{"broken", "fine"} {
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, ns+"-r")
			f.dueAt(ns, now-int64(2-i)*1000)
		}
		key, _ := schema.EndpointKey("billing")
		var b store.Batch
		b.Put(key, store.Value("not an endpoint"))
		if res, err := f.st.Apply(f.ctx, store.Partition{Namespace: "broken"}, b); err != nil || !res.Committed {
			t.Fatalf("corrupt endpoint: %+v %v", res, err)
		}
		hs := &heldStore{DueStore: f.st, held: store.Partition{Namespace: "broken"}, polled: make(chan struct{})}
		var polled sync.Once
		sink := newTally(1)
		reg, err := timers.NewHandlers(&Handler{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		f.start(Config{Store: hs, Handlers: reg, Concurrency: 1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			after: func(time.Duration) <-chan time.Time {
				polled.Do(func() { close(hs.polled) })
				return nil // the poll interval never ends
			}})
		select {
		case <-sink.all:
		case <-time.After(patience):
			t.Fatal("the fine stream waits for the poll interval: the broken stream's failed fire freed the only worker without a poll")
		}
	})
}

// While more streams are due than there are workers, the ones a poll left
// are taken from its queue as workers free up: the due indexes are read
// again only once that queue is used up, not at the end of every fire.
func TestASaturatedDriverWorksThroughWhatAPollLeftBeforeReadingTheDueIndexesAgain(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		const streams = 24
		for i := range streams {
			ns := fmt.Sprintf("ns-%02d", i)
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, ns+"-r")
		}
		cs := &counting{DueStore: f.st, calls: map[string]int{}}
		sink := newTally(streams)
		reg, err := timers.NewHandlers(&Handler{Sink: sink})
		if err != nil {
			t.Fatal(err)
		}
		f.start(Config{Store: cs, Handlers: reg, Concurrency: 2, after: func(time.Duration) <-chan time.Time {
			return nil // the poll interval never ends
		}})
		sink.wait(t)
		cs.mu.Lock()
		defer cs.mu.Unlock()
		// The first read, and one more per bucket read that came back full.
		if n := cs.calls["dueall"]; n > 4 {
			t.Fatalf("%d reads of every due index to fire %d streams with 2 workers", n, streams)
		}
	})
}

// heldScan holds the first scan of a second partition until released.
type heldScan struct {
	DueStore
	release chan struct{}
	mu      sync.Mutex
	first   *store.Partition
	held    bool
}

func (s *heldScan) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	s.mu.Lock()
	hold := false
	switch {
	case s.first == nil:
		s.first = &p
	case *s.first != p && !s.held:
		s.held, hold = true, true
	}
	s.mu.Unlock()
	if hold {
		<-s.release
	}
	return s.DueStore.Scan(ctx, p, start, end, after, limit)
}

// A poll runs on while fires end and queue their partitions, each due at
// the time its fire ended. Scanned with the time the poll began, such a
// partition would look not yet due and drop out of the queue, and its
// stream would wait for the poll interval. Here the clock moves a
// millisecond per call, and the first stream's first fire ends while the
// poll still scans the second.
func TestAPollFindsTheStreamsThatFiresQueueWhileItRuns(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(outboxtest.T0)
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		for _, ns := range []string{"a", "b"} {
			f.endpoint(ns, "billing", schema.Endpoint{Enabled: true})
			f.seed(ns, rids(ns, 3)...)
		}
		held := &heldScan{DueStore: f.st, release: make(chan struct{})}
		sink := newTally(6)
		moving := SinkFunc(func(ctx context.Context, o Parcel) error {
			clk.Advance(time.Millisecond)
			return sink.Deliver(ctx, o)
		})
		reg, err := timers.NewHandlers(&Handler{Sink: moving, Clock: clk, MaxRows: 1})
		if err != nil {
			t.Fatal(err)
		}
		var released sync.Once
		f.start(Config{Store: held, Handlers: reg, Clock: clk,
			after: func(time.Duration) <-chan time.Time { return nil }, // the poll interval never ends
			finished: func(bool) {
				released.Do(func() { close(held.release) })
			}})
		sink.wait(t)
	})
}

// The driver's timers log through the driver's own logger: a timer of a
// kind no handler fires is reported where the operator's logs go.
func TestTheDriversTimersLogThroughTheDriversLogger(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		var b store.Batch
		b.Put(timers.Key(time.Now().UnixMilli()-1, 99, "future-kind"), timers.EncodeIdle(nil))
		if res, err := f.st.Apply(f.ctx, store.Partition{Namespace: "acme"}, b); err != nil || !res.Committed {
			t.Fatalf("put timer: %+v %v", res, err)
		}
		var logs testlog.Buffer
		finished := make(chan bool, 8)
		f.driver(&capture{}, Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), slowTimer: never,
			finished: func(kicked bool) { offer(finished, kicked) }})
		recv(t, finished, "the fire of the unknown timer")
		if !strings.Contains(logs.String(), `"msg":"timer of unknown kind; deferring","partition":"acme"`) {
			t.Fatalf("the driver's logger has no warning of the unknown timer:\n%s", logs.String())
		}
	})
}

// A recovery's fire queues rows again and makes their stream's timer due in
// the same batch. The driver scans that partition once the fire ends, so the
// rows go at once rather than at the next full poll; the last page of a job
// ends it (Done) and reschedules nothing that would cause the scan.
func TestARecoveryDeliversWhatItQueuesWithoutWaitingForThePollInterval(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		const rows = 3
		f.seed("acme", rids("r", rows)...)
		sink := newTally(2 * rows)
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Retention: time.Hour}, &outbox.RecoveryRunner{})
		if err != nil {
			t.Fatal(err)
		}
		const interval = time.Hour
		d := f.start(Config{Store: f.st, Handlers: reg, PollInterval: interval,
			after: func(d time.Duration) <-chan time.Time {
				if d >= interval {
					return nil // the poll interval never ends
				}
				return time.After(d)
			}})
		for deadline := time.After(patience); f.backlog("acme", "billing") != 0; {
			select {
			case <-deadline:
				t.Fatal("the rows were not delivered before the recovery")
			case <-time.After(10 * time.Millisecond):
			}
		}
		p := store.Partition{Namespace: "acme"}
		admin := &outbox.Admin{Store: f.st, Clock: clock.System{}, Retention: time.Hour}
		// From a minute inside the retention window: at its very edge, the
		// millisecond Recover reads the clock later would put it outside.
		now := time.Now().UnixMilli()
		if _, err := admin.Recover(f.ctx, p, "billing", now-(time.Hour-time.Minute).Milliseconds(), now+time.Minute.Milliseconds()); err != nil {
			t.Fatal(err)
		}
		d.WakePartition(p) // as the API does after starting a job
		select {
		case <-sink.all:
		case <-time.After(patience):
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Fatalf("delivered %d of %d rows: what the recovery queued waits for the poll interval", sink.total, sink.n)
		}
	})
}
