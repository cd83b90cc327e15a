package delivery

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// switchable refuses every call while failing is set.
type switchable struct{ failing atomic.Bool }

func (s *switchable) Deliver(context.Context, Parcel) error {
	if s.failing.Load() {
		return &Error{Class: "status", Status: 500}
	}
	return nil
}

// A stream whose fires fail marks its namespace failing, one that
// delivers again clears it, and an operator's disable counts apart
// whatever the stream did: the fleet's figures follow each fire.
func TestFiresKeepTheFleetsFailingCount(t *testing.T) {
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(outboxtest.T0)
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		admin := &outbox.Admin{Store: f.st, Clock: clk}
		p := store.Partition{Namespace: "acme"}
		f.endpoint("acme", "hook", schema.Endpoint{Enabled: true})
		sink := &switchable{}
		sink.failing.Store(true)
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		runner := timers.NewRunner(timers.RunnerConfig{Store: f.st, Handlers: reg, Clock: clk})
		run := func() {
			t.Helper()
			if _, err := runner.RunDue(f.ctx, p, clk.Now().UnixMilli()); err != nil {
				t.Fatal(err)
			}
		}
		want := func(w outbox.Fleet) {
			t.Helper()
			got, err := admin.Fleet(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got.FailingNamespaces != w.FailingNamespaces || got.DisabledNamespaces != w.DisabledNamespaces || got.Backlog.Rows != w.Backlog.Rows {
				t.Fatalf("fleet = %+v, want %+v", got, w)
			}
			if changed, err := admin.Remark(f.ctx, p); err != nil || changed {
				t.Fatalf("marks not as the rows say (changed %v, %v)", changed, err)
			}
		}
		f.seed("acme", "r1")
		want(outbox.Fleet{Backlog: schema.Backlog{Rows: 1}})
		run()
		want(outbox.Fleet{FailingNamespaces: 1, Backlog: schema.Backlog{Rows: 1}})
		clk.Advance(time.Hour)
		run()
		want(outbox.Fleet{FailingNamespaces: 1, Backlog: schema.Backlog{Rows: 1}})
		if _, err := admin.SetEnabled(f.ctx, p, "hook", false); err != nil {
			t.Fatal(err)
		}
		want(outbox.Fleet{DisabledNamespaces: 1, Backlog: schema.Backlog{Rows: 1}})
		clk.Advance(time.Hour)
		run() // parks the stream
		want(outbox.Fleet{DisabledNamespaces: 1, Backlog: schema.Backlog{Rows: 1}})
		if _, err := admin.SetEnabled(f.ctx, p, "hook", true); err != nil {
			t.Fatal(err)
		}
		want(outbox.Fleet{Backlog: schema.Backlog{Rows: 1}})
		run()
		want(outbox.Fleet{FailingNamespaces: 1, Backlog: schema.Backlog{Rows: 1}})
		sink.failing.Store(false)
		clk.Advance(time.Hour)
		run()
		want(outbox.Fleet{})
	})
}

// An operator toggling a failing endpoint while a driver fires it leaves
// its marks as its rows say once all is quiet.
func TestTogglingAFailingEndpointUnderFiresKeepsTheMarks(t *testing.T) {
	eachFleet(t, func(t *testing.T, f *fleet) {
		clk := clock.NewManual(outboxtest.T0)
		f.app = &outbox.Appender{Store: f.st, Clock: clk}
		admin := &outbox.Admin{Store: f.st, Clock: clk}
		p := store.Partition{Namespace: "acme"}
		f.endpoint("acme", "hook", schema.Endpoint{Enabled: true})
		f.endpoint("acme", "other", schema.Endpoint{Enabled: true})
		sink := &switchable{}
		reg, err := timers.NewHandlers(&Handler{Sink: sink, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		var d *Driver
		d, err = New(Config{Store: f.st, Handlers: reg, Clock: clk, Concurrency: 4, after: func(wait time.Duration) <-chan time.Time {
			clk.Advance(min(wait, time.Second))
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c
		}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(f.ctx); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 40 {
				sink.failing.Store(i%3 != 0)
				f.seed("acme", "r"+string(rune('a'+i%26))+string(rune('a'+i/26)))
				d.Wake()
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 40 {
				if _, err := admin.SetEnabled(f.ctx, p, "hook", i%2 == 0); err != nil && !isContended(err) {
					t.Errorf("set enabled: %v", err)
				}
				if _, err := admin.Retry(f.ctx, p, "other", true); err != nil && !isContended(err) {
					t.Errorf("retry: %v", err)
				}
			}
		}()
		wg.Wait()
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		if changed, err := admin.Remark(f.ctx, p); err != nil || changed {
			t.Fatalf("marks not as the rows say (changed %v, %v)", changed, err)
		}
	})
}

func isContended(err error) bool {
	return errors.Is(err, outbox.ErrContended) || errors.Is(err, outbox.ErrBusy)
}
