package delivery

import (
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
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
// (outbox.Appender.Due), each claimed as if a scan had found it: an
// outcome ingested into an idle stream costs no scan. It reports false,
// having launched what it could, when the driver has not started or is
// stopping, or a row found its lane full: the ingest then wakes a scan of
// p, which queues what is left as any scan does.
func (d *Driver) FireDue(p store.Partition, due []store.Entry) bool {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		return false
	}
	nowMs := d.cfg.Clock.Now().UnixMilli()
	for _, e := range due {
		if d.launch(p, nowMs, e) != launchedOrBusy {
			return false
		}
	}
	return true
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
