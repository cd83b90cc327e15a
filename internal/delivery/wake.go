package delivery

import (
	"context"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// How the driver hears of work between polls: from ingest, an enable or a
// replay in this process.

// Wake makes the driver poll now, without waiting for the poll interval:
// an ingest calls it after an accepted append. It never blocks.
func (d *Driver) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// WakePartition makes the driver scan partition p now, without reading
// every due index: an ingest, an enable or a replay calls it for the
// namespace it just made due, at the cost of one scan rather than one read
// per bucket. It never blocks.
func (d *Driver) WakePartition(p store.Partition) {
	d.cfg.Arrivals.Arrived(p, nil)
	d.wakeScan(p)
}

func (d *Driver) wakeScan(p store.Partition) {
	d.mu.Lock()
	d.hot.push(p)
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// FireDue fires the due timer rows an ingest of p left, as it left them
// (outbox.Appender.Due): a row held for this process (HoldFor) at once,
// with no claim, and an idle one claimed as if a scan had found it. An
// outcome ingested into an idle stream so costs no scan. It reports
// false, having launched what it could, when the driver has not started
// or is stopping, or a row found its lane full: it puts a held row it
// could not launch back due as it was, and the ingest then wakes a scan
// of p, which queues what is left as any scan does. A held row's fire is
// handed what the ingest read for it (withHanded).
func (d *Driver) FireDue(p store.Partition, due []store.Entry, h outbox.Handed) bool {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	nowMs := d.cfg.Clock.Now().UnixMilli()
	took := started
	for _, e := range due {
		c, held := timers.Held(p, e)
		l := stopping
		switch {
		case !took:
		case held:
			l = d.launch(p, nowMs, e, &heldFire{claim: c, handed: h})
		default:
			l = d.launch(p, nowMs, e, nil)
		}
		switch {
		case l == fired, l == alreadyFiring && !held:
			// A busy stream's partition is scanned when its fire ends.
		case l == alreadyFiring:
			// A row held by no fire: released, it is due for the scan
			// that follows the busy fire.
			d.releaseHeld(c)
		default:
			took = false
			if held {
				d.releaseHeld(c)
			}
		}
	}
	return took
}

// releaseHeld puts back a timer held for this process that it will not
// fire: left held, its stream would wait out the lease.
func (d *Driver) releaseHeld(c timers.Claimed) {
	if err := timers.ReleaseDetached(context.Background(), d.fireStore, c); err != nil {
		d.cfg.Logger.Warn("release of a timer held by ingest failed; it fires when its lease expires",
			"namespace", c.Partition.Namespace, "error", err)
	}
}

// HoldFor is how long an ingest may write a new delivery timer held by
// this process (outbox.Appender.Hold): the lease, when a main worker is
// free to fire it at once; 0 otherwise.
func (d *Driver) HoldFor() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.stopping:
		return 0
	default:
	}
	if !d.started || d.main >= d.cfg.Concurrency {
		return 0
	}
	return d.cfg.Lease
}

// Ingested tells the driver that an ingest accepted outcomes in p, rows
// by sequence number and rid: lingering fires take them, and p is
// scanned only when the ingest left a stream due that no fire holds
// (outbox.Status.Due), the only timer a scan could find for it. A stream
// the ingest did not make due has a timer already: leased, its fire finds
// the rows (lingering, at once; else its completion, which counts them,
// reschedules it now), or waiting out a backoff, a pace or a disable. With
// due, rows may not be known, and lingering fires read to the log's end.
func (d *Driver) Ingested(p store.Partition, rows []outbox.StreamRef, due bool) {
	if !due {
		d.cfg.Arrivals.Arrived(p, rows)
		return
	}
	d.WakePartition(p)
}
