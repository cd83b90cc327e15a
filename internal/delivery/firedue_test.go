package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
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
	reg, err := timers.NewRegistry(&Handler{Sink: sink})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{}, 1)
	cfg.Store, cfg.Registry = st, reg
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
		f.endpoint("acme", "billing", outbox.Endpoint{Enabled: true})
		st := &timerScans{DueStore: f.st, scanned: make(chan store.Partition, 16)}
		sink := newTally(1)
		d := quietDriver(t, f, st, sink, Config{})
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		statuses, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []outbox.Outcome{committed("r-1")})
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
		f.endpoint("acme", "billing", outbox.Endpoint{Enabled: true})
		f.endpoint("zeta", "billing", outbox.Endpoint{Enabled: true})
		sink := newGated()
		sink.hold["z-1"] = true
		d := quietDriver(t, f, f.st, sink, Config{Concurrency: 1, slowTimer: never})
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		if st, err := app.Append(f.ctx, store.Partition{Namespace: "zeta"}, []outbox.Outcome{committed("z-1")}); err != nil || st[0].Due {
			t.Fatalf("the first stream: %+v, %v", st, err)
		}
		<-sink.entered
		st, err := app.Append(f.ctx, store.Partition{Namespace: "acme"}, []outbox.Outcome{committed("a-1")})
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
		f.endpoint("acme", "billing", outbox.Endpoint{Enabled: true})
		st := &timerScans{DueStore: f.st, scanned: make(chan store.Partition, 16)}
		sink := newGated()
		sink.hold["r-1"] = true
		d := quietDriver(t, f, st, sink, Config{slowTimer: never})
		p := store.Partition{Namespace: "acme"}
		app := &outbox.Appender{Store: f.st, Clock: clock.System{}, Due: d.FireDue}
		if _, err := app.Append(f.ctx, p, []outbox.Outcome{committed("r-1")}); err != nil {
			t.Fatal(err)
		}
		<-sink.entered
		later := store.Entry{Key: timers.Key(time.Now().UnixMilli(), timers.KindOutcomeDelivery, "billing"), Value: timers.EncodeIdle(nil)}
		if !d.FireDue(p, []store.Entry{later}) {
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
