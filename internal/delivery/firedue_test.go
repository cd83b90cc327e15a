package delivery

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// timerScans counts the scans of a partition's timers, and tells of each.
type timerScans struct {
	DueStore
	scanned chan store.Partition
}

func (s *timerScans) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if first, _ := timers.DueRange(0); strings.HasPrefix(string(start), string(first[:1])) {
		s.scanned <- p
	}
	return s.DueStore.Scan(ctx, p, start, end, after, limit)
}

// quietDriver starts a driver on f's store whose poll interval never ends,
// once its first poll is over, so only what a test does makes it work.
func quietDriver(t *testing.T, f *fleet, st DueStore, sink Sink, cfg Config) *Driver {
	t.Helper()
	return quietDriverOf(t, f, st, &Handler{Sink: sink}, cfg)
}

// quietDriverOf is quietDriver firing with h.
func quietDriverOf(t *testing.T, f *fleet, st DueStore, h *Handler, cfg Config) *Driver {
	t.Helper()
	reg, err := timers.NewHandlers(h)
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{}, 1)
	cfg.Store, cfg.Handlers = st, reg
	cfg.after = func(time.Duration) <-chan time.Time {
		select {
		case polled <- struct{}{}:
		default:
		}
		return nil
	}
	d := f.start(cfg)
	<-polled
	return d
}

// An outcome ingested into a stream with no timer is fired on the timer
// row its ingest wrote: claimed at once, with no scan of the namespace.
func TestAStreamAnIngestLeftDueIsFiredWithNoScan(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		st := &timerScans{DueStore: f.st, scanned: make(chan store.Partition, 16)}
		sink := newTally(1)
		d := quietDriver(t, f, st, sink, Config{})
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		statuses, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed("r-1")})
		if err != nil {
			t.Fatal(err)
		}
		if statuses[0].Code != outbox.Accepted || statuses[0].Due {
			t.Fatalf("status %+v: want accepted, its stream taken by the driver", statuses[0])
		}
		sink.wait(t)
		if n := len(st.scanned); n != 0 {
			t.Fatalf("the namespace was scanned %d times for a stream its ingest named", n)
		}
	})
}

// A driver with no free worker does not take a stream an ingest left
// due: the status says so, and the scan it wakes fires the stream once a
// worker is free.
func TestAStreamAnIngestLeftDueWaitsForAWorkerWhenNoneIsFree(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.endpoint("zeta", "billing", schema.Endpoint{Enabled: true})
		sink := newGated()
		sink.hold["z-1"] = true
		d := quietDriver(t, f, f.st, sink, Config{Concurrency: 1, slowTimer: never})
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		if st, err := app.Append(f.ctx, store.Partition{Namespace: "zeta"}, []schema.Outcome{committed("z-1")}); err != nil || st[0].Due {
			t.Fatalf("the first stream: %+v, %v", st, err)
		}
		<-sink.entered
		st, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed("a-1")})
		if err != nil {
			t.Fatal(err)
		}
		if !st[0].Due {
			t.Fatalf("status %+v: a driver with no free worker took the stream", st[0])
		}
		d.WakePartition(store.Partition{Namespace: "acme"})
		close(sink.release)
		if rid := <-sink.entered; rid != "a-1" {
			t.Fatalf("delivered %s, want a-1", rid)
		}
	})
}

// A launch that finds its stream's fire still running (the row launched
// may be a timer written after that fire's completion) has the partition
// scanned once that fire ends, rather than left to the next full poll.
func TestATimerFoundFiringIsLookedForAgainWhenItsFireEnds(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		st := &timerScans{DueStore: f.st, scanned: make(chan store.Partition, 16)}
		sink := newGated()
		sink.hold["r-1"] = true
		d := quietDriver(t, f, st, sink, Config{slowTimer: never})
		p := store.Partition{Namespace: "acme"}
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		if _, err := app.Append(f.ctx, p, []schema.Outcome{committed("r-1")}); err != nil {
			t.Fatal(err)
		}
		<-sink.entered
		later := store.Entry{Key: timers.Key(time.Now().UnixMilli(), timers.KindOutcomeDelivery, "billing"), Value: timers.EncodeIdle(nil)}
		if !d.FireDue(p, []store.Entry{later}, outbox.Handed{}) {
			t.Fatal("a timer already firing here was not taken")
		}
		if n := len(st.scanned); n != 0 {
			t.Fatalf("scanned %d times while the fire ran", n)
		}
		close(sink.release)
		select {
		case got := <-st.scanned:
			if got != p {
				t.Fatalf("scanned %v, want %v", got, p)
			}
		case <-time.After(patience):
			t.Fatal("the partition was not scanned when the fire ended")
		}
	})
}

// countingApplies counts the batches a driver applies.
type countingApplies struct {
	DueStore
	applies atomic.Int64
}

func (s *countingApplies) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	s.applies.Add(1)
	return s.DueStore.Apply(ctx, p, b)
}

// timerRow is the one delivery timer of endpoint id in p.
func timerRow(t *testing.T, f *fleet, p store.Partition, id string) timers.Row {
	t.Helper()
	start, end := timers.DueRange(timers.NeverMs)
	page, err := f.st.Scan(f.ctx, p, start, end, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	var rows []timers.Row
	for _, e := range page.Entries {
		if r, err := timers.DecodeRow(e.Key, e.Value); err == nil && r.Kind == timers.KindOutcomeDelivery && r.Reference == id {
			rows = append(rows, r)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("%d delivery timers of %s", len(rows), id)
	}
	return rows[0]
}

// A new stream's timer written held by the ingest is fired with no scan
// and no claim: the fire's completion is the driver's only write.
func TestAStreamWhoseTimerIngestHeldIsFiredWithNoClaim(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		scans := &timerScans{DueStore: f.st, scanned: make(chan store.Partition, 16)}
		st := &countingApplies{DueStore: scans}
		sink := newTally(1)
		d := quietDriver(t, f, st, sink, Config{})
		if d.HoldFor() != timers.DefaultLease {
			t.Fatalf("an idle driver holds for %v, want the lease", d.HoldFor())
		}
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
		statuses, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed("r-1")})
		if err != nil || statuses[0].Due {
			t.Fatalf("statuses %+v, %v: want the stream taken by the driver", statuses, err)
		}
		sink.wait(t)
		d.Stop(f.ctx)
		if n := len(scans.scanned); n != 0 {
			t.Fatalf("the namespace was scanned %d times", n)
		}
		if n := st.applies.Load(); n != 1 {
			t.Fatalf("the driver applied %d batches, want the completion alone", n)
		}
	})
}

// A held timer the driver cannot fire (its lane filled since it said it
// could hold one) is put back due, not left to wait out its lease; the
// status is Due, and the scan it wakes fires the stream.
func TestATimerIngestHeldThatFindsNoWorkerIsReleased(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		f.endpoint("zeta", "billing", schema.Endpoint{Enabled: true})
		sink := newGated()
		sink.hold["z-1"] = true
		d := quietDriver(t, f, f.st, sink, Config{Concurrency: 1, slowTimer: never})
		lease := func() time.Duration { return timers.DefaultLease }
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: lease}
		if st, err := app.Append(f.ctx, store.Partition{Namespace: "zeta"}, []schema.Outcome{committed("z-1")}); err != nil || st[0].Due {
			t.Fatalf("the first stream: %+v, %v", st, err)
		}
		<-sink.entered
		if d.HoldFor() != 0 {
			t.Fatal("a driver with no free worker would hold a timer")
		}
		acme := store.Partition{Namespace: "acme"}
		st, err := app.Append(f.ctx, acme, []schema.Outcome{committed("a-1")})
		if err != nil || !st[0].Due {
			t.Fatalf("status %+v, %v: a driver with no free worker took the stream", st, err)
		}
		if row := timerRow(t, f, acme, "billing"); row.Lease != nil || row.DueAtMs > time.Now().UnixMilli() {
			t.Fatalf("the timer was left %+v, want idle and due", row)
		}
		d.WakePartition(acme)
		close(sink.release)
		if rid := <-sink.entered; rid != "a-1" {
			t.Fatalf("delivered %s, want a-1", rid)
		}
	})
}

// A held timer of a stream whose fire is still running here (its
// completion ended the stream just before the ingest) is released, and
// found due by the scan that follows that fire.
func TestAHeldTimerOfAStreamFiringHereIsReleased(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		sink := newGated()
		sink.hold["r-1"] = true
		d := quietDriver(t, f, f.st, sink, Config{slowTimer: never})
		p := store.Partition{Namespace: "acme"}
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
		if _, err := app.Append(f.ctx, p, []schema.Outcome{committed("r-1")}); err != nil {
			t.Fatal(err)
		}
		<-sink.entered
		// A second timer of the stream, held as an ingest would write it.
		e, err := timers.NewHeld(time.Now().UnixMilli(), timers.DefaultLease, timers.KindOutcomeDelivery, "billing", nil)
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		b.Put(e.Key, e.Value)
		if _, err := f.st.Apply(f.ctx, p, b); err != nil {
			t.Fatal(err)
		}
		if !d.FireDue(p, []store.Entry{e}, outbox.Handed{}) {
			t.Fatal("a timer of a stream firing here was not taken")
		}
		if _, found, err := f.st.Get(f.ctx, p, e.Key); err != nil || found {
			t.Fatalf("the held row is still there (%v, %v)", found, err)
		}
		close(sink.release)
	})
}

// A held timer's fire is handed the rows its ingest appended and takes
// them as they were committed: it reads its stream's head and backlog,
// the backlog again to plan, and writes its completion; no queue read,
// no read of outcomes or attempts.
func TestAFireHandedItsIngestsRowsReadsNoQueue(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		st := &counting{DueStore: f.st, calls: map[string]int{}}
		sink := newTally(2)
		d := quietDriver(t, f, st, sink, Config{})
		st.mu.Lock()
		clear(st.calls)
		st.mu.Unlock()
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
		if _, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []schema.Outcome{committed("r-1"), committed("r-2")}); err != nil {
			t.Fatal(err)
		}
		sink.wait(t)
		d.Stop(f.ctx)
		st.mu.Lock()
		defer st.mu.Unlock()
		// The stream's rows came with the timer; the backlog read after
		// the calls and the completion are all the fire asks of the store.
		want := map[string]int{"get": 1, "apply": 1}
		if !maps.Equal(st.calls, want) {
			t.Fatalf("store calls %v, want %v", st.calls, want)
		}
	})
}

// Rows an ingest hands a fire are its stream's whole queue only when the
// backlog counts no other: a stream holding an older row (here one whose
// timer went missing) is read from its head, and its rows go in order.
func TestAFireHandedRowsItsBacklogDoesNotMatchReadsItsQueue(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		p := store.Partition{Namespace: "acme"}
		quiet := &outbox.Appender{Store: f.st, Clock: clock.System{}}
		if _, err := quiet.Append(f.ctx, p, []schema.Outcome{committed("r-1")}); err != nil {
			t.Fatal(err)
		}
		row := timerRow(t, f, p, "billing")
		var b store.Batch
		b.Delete(timers.Key(row.DueAtMs, row.Kind, row.Reference))
		if _, err := f.st.Apply(f.ctx, p, b); err != nil {
			t.Fatal(err)
		}
		sink := &capture{}
		d := quietDriver(t, f, f.st, sink, Config{})
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue, Hold: d.HoldFor}
		if _, err := app.Append(f.ctx, p, []schema.Outcome{committed("r-2")}); err != nil {
			t.Fatal(err)
		}
		d.Stop(f.ctx)
		if got := sink.rids(); !slices.Equal(got, []string{"r-1", "r-2"}) {
			t.Fatalf("delivered %v, want r-1 then r-2 in one fire", got)
		}
	})
}

// inOrder records the rids delivered, in order, and closes done at the
// n-th.
type inOrder struct {
	mu   sync.Mutex
	rids []string
	n    int
	done chan struct{}
}

func (s *inOrder) Deliver(_ context.Context, o Parcel) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rids = append(s.rids, o.Outcome.ReservationID); len(s.rids) == s.n {
		close(s.done)
	}
	return nil
}

// The stream rows an ingest hands its fire are as of its commit: an
// outcome another process appends to the stream before the fire starts is
// not in them, and is delivered after, by the next fire, not lost.
func TestAnAppendBetweenTheHandingIngestAndItsFireIsDeliveredAfter(t *testing.T) {
	t.Parallel()
	eachFleet(t, func(t *testing.T, f *fleet) {
		f.endpoint("acme", "billing", schema.Endpoint{Enabled: true})
		p := store.Partition{Namespace: "acme"}
		sink := &inOrder{n: 2, done: make(chan struct{})}
		d := quietDriver(t, f, f.st, sink, Config{})
		other := &outbox.Appender{Store: f.st, Clock: clock.System{}}
		var handed outbox.Handed
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Hold: d.HoldFor,
			Due: func(p store.Partition, due []store.Entry, h outbox.Handed) bool {
				handed = h
				if _, err := other.Append(f.ctx, p, []schema.Outcome{committed("r-2")}); err != nil {
					t.Error(err)
				}
				return d.FireDue(p, due, h)
			}}
		if _, err := app.Append(f.ctx, p, []schema.Outcome{committed("r-1")}); err != nil {
			t.Fatal(err)
		}
		if _, ok := handed.Streams["billing"]; !ok {
			t.Fatalf("the ingest handed no stream rows: %+v", handed)
		}
		select {
		case <-sink.done:
		case <-time.After(30 * time.Second):
			t.Fatal("r-2 was not delivered")
		}
		d.Stop(f.ctx)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if !slices.Equal(sink.rids, []string{"r-1", "r-2"}) {
			t.Fatalf("delivered %v, want r-1 then r-2", sink.rids)
		}
	})
}
