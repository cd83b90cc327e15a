package delivery

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

const (
	// DefaultLinger is how long a fire that delivered every row of its
	// stream waits for the next outcome ingested in its process.
	DefaultLinger = 50 * time.Millisecond
	// MaxLinger bounds Handler.Linger.
	MaxLinger = time.Second
	// lingerFor bounds one fire's lingering, from its start: the rows it
	// takes wait that long at most for their acknowledgement (the outbox
	// view shows them pending until then), and an edit of the endpoint for
	// the fire to end. At 122 outcomes a second a page of MaxRowsCeiling
	// (61) fills in it.
	lingerFor = 500 * time.Millisecond
)

// Arrivals tells the fires lingering on a partition that outcomes arrived
// in it: at low rates each outcome would otherwise cost a scan, a claim, a
// read of its stream and a completion of its own, where a fire that holds
// its lease a moment longer takes the next outcome with one read and
// acknowledges them together. Ingest in the same process calls Arrived;
// an outcome ingested by another process is found by the lingering fire's
// next read, or by the completion that ends it, whose backlog still counts
// it.
type Arrivals struct {
	mu    sync.Mutex
	parts map[store.Partition]*arrival
	// times are every partition's last two arrivals, by the wall clock: a
	// fire lingers only where arrivals come closer together than its
	// linger, or it would hold its worker for nothing. Pruned of the quiet
	// every pruneEvery arrivals.
	times  map[store.Partition]arrivalTimes
	counts int
	// waiting counts the watches waiting now, at most max.
	waiting, max int
	closed       bool
	// began, when a test sets it, learns that a wait began.
	began func()
}

type arrivalTimes struct{ prev, last time.Time }

// pruneEvery is how many arrivals pass between prunes of Arrivals.times.
const pruneEvery = 4096

type arrival struct {
	gen uint64
	// last is the highest sequence number an arrival named, and unknown
	// the generation of the last arrival that named none.
	last, unknown uint64
	// recent are the rows the last arrivals named, at most maxRecent.
	recent []outbox.StreamRef
	// next is closed at the next arrival, then replaced.
	next  chan struct{}
	watch int
}

// NewArrivals returns an Arrivals that lets at most max fires linger at
// once, each holding a worker while it waits.
func NewArrivals(max int) *Arrivals {
	return &Arrivals{parts: map[store.Partition]*arrival{}, times: map[store.Partition]arrivalTimes{}, max: max}
}

// maxRecent bounds the rows a partition's watch keeps of its arrivals:
// more than a page of them.
const maxRecent = 2 * MaxRowsCeiling

// Arrived notes that outcomes arrived in p: the rows an ingest appended,
// by sequence number and rid, or none when not known. It never blocks.
func (a *Arrivals) Arrived(p store.Partition, rows []outbox.StreamRef) {
	if a == nil {
		return
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.times[p] = arrivalTimes{prev: a.times[p].last, last: now}
	if a.counts++; a.counts%pruneEvery == 0 {
		for q, t := range a.times {
			if now.Sub(t.last) > MaxLinger {
				delete(a.times, q)
			}
		}
	}
	if s := a.parts[p]; s != nil && !a.closed {
		s.gen++
		if len(rows) == 0 {
			s.unknown = s.gen
		}
		for _, r := range rows {
			s.last = max(s.last, r.Seq)
			if len(s.recent) == maxRecent {
				s.recent = slices.Delete(s.recent, 0, 1)
			}
			s.recent = append(s.recent, r)
		}
		close(s.next)
		s.next = make(chan struct{})
	}
}

// Close ends every linger, and lets none begin: the driver is stopping.
func (a *Arrivals) Close() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	// Closed once: Arrived leaves a closed Arrivals' channels alone.
	for _, s := range a.parts {
		close(s.next)
	}
}

// lingerWatch is one fire's watch of its partition's arrivals.
type lingerWatch struct {
	a *Arrivals
	p store.Partition
	s *arrival
	// seen is the generation the fire's last read follows; to is where
	// that read may stop in the log, 0 for its end: the highest sequence
	// number named up to seen, unless an arrival since the read before
	// named none.
	seen, to uint64
	// began is the generation the watch began at.
	began uint64
}

// saw marks the arrivals so far as seen; mu is held.
func (w *lingerWatch) saw() {
	w.to = w.s.last
	if w.s.unknown > w.seen {
		w.to = 0
	}
	w.seen = w.s.gen
}

// watch starts watching p, marked as seen now; nil when a is nil or closed.
func (a *Arrivals) watch(p store.Partition) *lingerWatch {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	s := a.parts[p]
	if s == nil {
		s = &arrival{next: make(chan struct{})}
		a.parts[p] = s
	}
	s.watch++
	return &lingerWatch{a: a, p: p, s: s, seen: s.gen, began: s.gen}
}

// arrived is the rows arrivals named at sequence numbers from to to, in
// order, or nil unless they named each of them: another process's rows
// come between, or the arrivals were too many to keep.
func (w *lingerWatch) arrived(from, to uint64) []outbox.StreamRef {
	if to < from || to-from >= maxRecent {
		return nil
	}
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	out := make([]outbox.StreamRef, to-from+1)
	n := 0
	for _, r := range w.s.recent {
		if r.Seq >= from && r.Seq <= to && out[r.Seq-from].RID == "" {
			out[r.Seq-from] = r
			n++
		}
	}
	if n != len(out) {
		return nil
	}
	return out
}

// nothingAfter reports whether every arrival since the watch began named
// its rows, each before end: no outcome ingested in this process since
// then is past the fire's page. An arrival from another process is not
// seen here; the completion's guard finds it.
func (w *lingerWatch) nothingAfter(end uint64) bool {
	if w == nil {
		return false
	}
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.s.unknown <= w.began && w.s.last < end
}

// release ends the watch.
func (w *lingerWatch) release() {
	a := w.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if w.s.watch--; w.s.watch == 0 && a.parts[w.p] == w.s {
		delete(a.parts, w.p)
	}
}

// wait waits up to d for an arrival after the last one seen, then marks
// every arrival so far as seen: a read after wait returns follows them. It
// reports false, at once, when d passed, the fire's ctx ended, the
// Arrivals closed, or max watches wait already; and when nothing arrived
// since the last seen and the partition's last two arrivals were further
// apart than d: at that rate the next is not worth holding a worker for.
func (w *lingerWatch) wait(ctx context.Context, d time.Duration) bool {
	a := w.a
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false
	}
	if w.s.gen != w.seen {
		w.saw()
		a.mu.Unlock()
		return true
	}
	if t := a.times[w.p]; a.waiting >= a.max || t.prev.IsZero() || t.last.Sub(t.prev) > d {
		// Bounded; and only where arrivals come within d of each other.
		a.mu.Unlock()
		return false
	}
	a.waiting++
	next := w.s.next
	a.mu.Unlock()
	if a.began != nil {
		a.began()
	}

	t := time.NewTimer(d)
	defer t.Stop()
	arrived := false
	select {
	case <-next:
		arrived = true
	case <-t.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting--
	if !arrived || a.closed {
		return false
	}
	w.saw()
	return true
}

// lingers reports whether a fire may wait for more of its stream's rows
// after its calls so far: everything it examined is delivered, up to the
// end of the queue read from the stream's head, with room left in its page
// and no limit that would count the wait. A stream with a rate limit, a
// throttle or health to report goes as it did without lingering.
func (h *Handler) lingers(f *firing, started time.Time) bool {
	run := &f.calls
	switch {
	case h.Linger <= 0, !f.stream.head.Found, !f.page.FromHead, f.page.Next != nil:
		return false
	case run.callFailed, run.cut, run.paced, len(run.failed) > 0, len(run.acked) != len(f.page.Rows):
		return false
	case len(f.page.Rows) >= h.maxRows(), f.limits.rate != 0, f.limits.throttle != nil, f.state.Health != nil:
		return false
	}
	return h.clock().Now().Sub(started) < lingerFor
}

// linger takes, while the fire lingers, the rows that arrive on its
// stream: it waits for an arrival, reads the queue on from where the fire's
// page ended, and calls its rows, as one page with the rows before. A read
// that fails ends the lingering, and the fire completes what it did; only
// a fire stopped mid-way returns an error, and writes nothing.
func (h *Handler) linger(ctx context.Context, w *lingerWatch, f *firing, started time.Time) error {
	for w != nil && h.lingers(f, started) {
		if !w.wait(ctx, min(h.Linger, MaxLinger)) {
			return ctx.Err()
		}
		s := &f.stream
		page, rows, err := h.readArrived(ctx, w, f)
		if errors.Is(err, outbox.ErrEndpointEdited) {
			// The rows that arrived go as the edit says, in the next fire.
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			h.log().WarnContext(ctx, "lingering fire could not read its stream; completing what it delivered",
				"namespace", s.ns, "endpoint", s.endpoint, "error", err)
			return nil
		}
		run := h.call(ctx, s, page, rows, started, &f.limits)
		if err := ctx.Err(); err != nil {
			return err
		}
		f.extend(page, rows, run)
	}
	return nil
}

// readArrived reads the stream's queue on from where the fire's page
// ended, up to the last row arrived: the log holds nothing further unless
// another process appended it, which the completion counts. Rows the
// arrivals named one by one are read by key with their outcomes and
// attempts (outbox.ReadArrivedUnder): they were appended after the fire's
// page found the queue's end, so their log entries alone queue them. Any
// other range is read as the queue. Either way the rows are taken only
// when accepted under the endpoint row the fire holds (as their ingest
// guarded it, or as read with them); else outbox.ErrEndpointEdited, and
// they go as the edit says in the next fire.
func (h *Handler) readArrived(ctx context.Context, w *lingerWatch, f *firing) (outbox.QueuePage, []*pendingRow, error) {
	s, from, room := &f.stream, f.page.LogEnd, h.maxRows()-len(f.page.Rows)
	if refs := w.arrived(from, w.to); refs != nil {
		page, got, err := outbox.ReadArrivedUnder(ctx, f.fc.Store, f.fc.Partition, s.endpoint, s.epRaw, refs, room)
		if err != nil {
			return outbox.QueuePage{}, nil, err
		}
		rows := h.rowsOf(ctx, s, page)
		kept := got[:0]
		for i, r := range rows {
			if r != nil {
				kept = append(kept, got[i])
			}
		}
		h.adopt(ctx, s, rows, kept)
		return page, rows, nil
	}
	page, ep, err := outbox.ReadQueueWith(ctx, f.fc.Store, f.fc.Partition, s.endpoint, s.head, outbox.QueueFrom(s.endpoint, from), room, w.to, s.ep.TakesAll(),
		[]store.Key{s.endpointKey})
	if err != nil {
		return outbox.QueuePage{}, nil, err
	}
	if !ep[0].Found || !bytes.Equal(ep[0].Value, s.epRaw) {
		return outbox.QueuePage{}, nil, outbox.ErrEndpointEdited
	}
	rows, err := h.prepare(ctx, f.fc, s, page)
	return page, rows, err
}

// extend appends a page read after the fire's page, its rows and the
// calls made of them, to the fire's: one page, as if read at once.
func (f *firing) extend(page outbox.QueuePage, rows []*pendingRow, run calls) {
	off := len(f.page.Rows)
	for _, r := range rows {
		if r != nil {
			r.index += off
		}
	}
	f.page.Rows = append(f.page.Rows, page.Rows...)
	f.page.Next, f.page.LogEnd = page.Next, max(f.page.LogEnd, page.LogEnd)
	f.rows = append(f.rows, rows...)
	c := &f.calls
	if len(run.acked) == 0 && len(run.failed) > 0 {
		c.refusedLast = run.failed
	}
	c.acked = append(c.acked, run.acked...)
	c.failed = append(c.failed, run.failed...)
	c.callFailed, c.cut, c.paced = run.callFailed, run.cut, run.paced
	if run.last >= 0 {
		c.last = run.last + off
	}
	c.retryAfter = max(c.retryAfter, run.retryAfter)
	c.launched += run.launched
	if c.signal == "" {
		c.signal = run.signal
	}
}
