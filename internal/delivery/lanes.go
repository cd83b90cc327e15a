package delivery

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// waitSlow queues p to wait for the slow lane, or leaves it where it is in
// the queue; mu is held.
func (d *Driver) waitSlow(p store.Partition) {
	if !d.slowWait.has(p) {
		d.waits++
		d.waitSince[p] = d.waits
		d.slowWait.push(p)
	}
}

// handOff gives each free slow slot to the oldest waiter: a fire of moving
// moves into it at once, freeing its main worker; a partition of slowWait
// has it reserved and is queued to be scanned first. mu is held. It
// reports whether it gave any: the loop may then have work to do.
func (d *Driver) handOff() bool {
	gave := false
	for d.slow+d.reservedN < d.cfg.SlowConcurrency {
		p, waiting := d.slowWait.peek()
		switch {
		case len(d.moving) > 0 && (!waiting || d.moving[0].since < d.waitSince[p]):
			next := d.moving[0]
			d.moving = slices.Delete(d.moving, 0, 1)
			d.toSlow(next)
		case waiting:
			d.slowWait.pop()
			delete(d.waitSince, p)
			d.reserved[p]++
			d.reservedN++
			d.handed.push(p)
		default:
			return gave
		}
		gave = true
	}
	return gave
}

func (d *Driver) kickLoop() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// fire is one timer firing on a worker; its fields are guarded by the
// driver's mu.
type fire struct {
	// slow: it holds a slow-lane slot, else a main worker.
	slow bool
	// moving: past SlowAfter, it waits in Driver.moving for a slow slot,
	// since the since-th wait began.
	moving bool
	since  uint64
	done   bool
}

// launched is how launch fared.
type launched int

const (
	// fired: launched on a worker.
	fired launched = iota
	// alreadyFiring: the stream is already firing here; its partition is scanned
	// when that fire ends.
	alreadyFiring
	// mainFull: no main worker is free.
	mainFull
	// slowFull: the stream's last fire failed and the slow lane is full.
	slowFull
	// stopping: the driver is stopping.
	stopping
)

// failedLast reports whether e is the delivery timer of a stream whose last
// fire failed: its state counts a failed fire. Such a stream fires in
// the slow lane. Any other timer, or one that does not decode, is fired in
// the main lane (a corrupt one is deferred at once there).
func failedLast(e store.Entry) bool {
	row, err := timers.DecodeRow(e.Key, e.Value)
	if err != nil || row.Kind != timers.KindOutcomeDelivery {
		return false
	}
	s, err := schema.DecodeDeliveryState(row.State)
	return err == nil && s.FailedFires > 0
}

// slowLaneKey marks the context of a fire launched in the slow lane, for
// its span.
type slowLaneKey struct{}

// heldFire is a timer an ingest wrote held for this process, and what
// that ingest handed its fire (outbox.Appender.Due).
type heldFire struct {
	claim  timers.Claimed
	handed outbox.Handed
}

// launch fires one due timer row on a free worker of its lane. A timer this
// driver is already firing (its lease ran out mid-fire, or the row is one
// written after that fire's completion) is left to that fire, and its
// partition scanned once the fire ends.
//
// held, when set, is the claim e already stands for (timers.Held): the
// fire runs without claiming it.
func (d *Driver) launch(p store.Partition, nowMs int64, e store.Entry, held *heldFire) launched {
	_, kind, ref, ok := timers.ParseKey(e.Key)
	id := fmt.Sprintf("%s\x00%d\x00%s", p.Namespace, kind, ref)
	slow := failedLast(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, firing := d.inFlight[id]; ok && firing {
		d.inFlight[id] = true
		return alreadyFiring
	}
	select {
	case <-d.stopping:
		return stopping
	default:
	}
	switch {
	case slow && d.reserved[p] > 0:
		// The slot handed to p for this scan.
		if d.reserved[p]--; d.reserved[p] == 0 {
			delete(d.reserved, p)
		}
		d.reservedN--
		d.slow++
	case slow && d.slow+d.reservedN >= d.cfg.SlowConcurrency:
		return slowFull
	case slow:
		d.slow++
	case d.main >= d.cfg.Concurrency:
		d.saturated = true
		return mainFull
	default:
		d.main++
	}
	f := &fire{slow: slow}
	d.cfg.Metrics.inFlight(d.main, d.slow)
	d.inFlight[id] = false
	d.workers.Add(1)
	d.cfg.Goroutines.Go(func() {
		defer d.workers.Done()
		var unwatch func()
		if !slow {
			unwatch = d.watch(f)
		}
		var rep timers.Report
		var err error
		ctx := d.fireCtx
		if slow {
			ctx = context.WithValue(ctx, slowLaneKey{}, true)
		}
		if held != nil {
			rep, err = d.runner.RunHeld(withHanded(ctx, held.handed), nowMs, held.claim)
		} else {
			rep, err = d.runner.RunTimer(ctx, p, nowMs, e)
		}
		if unwatch != nil {
			unwatch()
		}
		d.cfg.Metrics.report(rep)
		if err != nil && d.fireCtx.Err() == nil {
			d.cfg.Logger.Warn("timer fire failed", "namespace", p.Namespace, "error", err)
		}
		d.mu.Lock()
		missed := d.inFlight[id]
		delete(d.inFlight, id)
		d.release(f)
		if rep.Rescheduled+rep.Replanned+rep.Woke > 0 || missed {
			// A stream with more rows than one fire takes is due again
			// now, or the fire made another timer due (a recovery its
			// stream); scanning its partition is enough to find it.
			d.hot.push(p)
		}
		// A claim that failed (a store refusing writes) leaves its row due:
		// kicking would spin on it, so it waits for the poll interval. A
		// fire that failed after its claim has moved its timer a lease
		// away, and hands its worker on as any other.
		kick := (err == nil || rep.Claimed > 0) && (d.saturated || d.hot.len() > 0 || d.handed.len() > 0)
		d.mu.Unlock()
		if kick {
			d.kickLoop()
		}
		if d.cfg.finished != nil {
			d.cfg.finished(kick)
		}
	})
	return fired
}

// watch moves a main-lane fire to the slow lane once it has run for
// SlowAfter, unless it ended first: the fire calls the returned func when
// it ends. A timer's func, not a goroutine waiting on it: a fire that ends
// in time, as nearly all do, costs no goroutine and no wake-up.
func (d *Driver) watch(f *fire) (unwatch func()) {
	if d.cfg.slowTimer == nil {
		t := time.AfterFunc(d.cfg.SlowAfter, func() { d.slowDown(f) })
		return func() { t.Stop() }
	}
	ended := make(chan struct{})
	go func() {
		select {
		case <-ended:
		case <-d.cfg.slowTimer(d.cfg.SlowAfter):
			d.slowDown(f)
		}
	}()
	return func() { close(ended) }
}

// slowDown moves f, a main-lane fire that outlasted SlowAfter, to the
// slow lane, or queues it for a slot there.
func (d *Driver) slowDown(f *fire) {
	d.mu.Lock()
	if f.done {
		d.mu.Unlock()
		return
	}
	d.cfg.Metrics.slowed()
	// It waits its turn with the others: a free slot goes to the oldest
	// waiter, and until it gets one it keeps its main worker.
	d.waits++
	f.moving, f.since = true, d.waits
	d.moving = append(d.moving, f)
	kick := d.handOff() && (d.saturated || d.hot.len() > 0 || d.handed.len() > 0)
	moved := !f.moving
	d.mu.Unlock()
	if kick {
		d.kickLoop()
	}
	if d.cfg.slowed != nil {
		d.cfg.slowed(moved)
	}
}

// toSlow moves a main-lane fire to a free slow slot; mu is held.
func (d *Driver) toSlow(f *fire) {
	f.slow, f.moving = true, false
	d.main--
	d.slow++
	d.cfg.Metrics.inFlight(d.main, d.slow)
}

// release gives back the worker of a fire that ended; mu is held. A freed
// slow slot goes to the oldest waiter, a fire waiting to leave the main
// lane or a partition waiting for the slow lane.
func (d *Driver) release(f *fire) {
	f.done = true
	if f.moving {
		d.moving = slices.DeleteFunc(d.moving, func(m *fire) bool { return m == f })
	}
	if !f.slow {
		d.main--
		d.cfg.Metrics.inFlight(d.main, d.slow)
		return
	}
	d.slow--
	d.cfg.Metrics.inFlight(d.main, d.slow)
	d.handOff()
}
