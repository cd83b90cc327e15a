package outbox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/hookrelay/relay/internal/gopool"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// DefaultCoalesceTimeout bounds one combined Append of a Coalescer whose
// Timeout is zero.
const DefaultCoalesceTimeout = 10 * time.Second

// Coalescer is group commit in front of an Appender. Every ingest of a
// namespace writes its sequence row, so concurrent Appends on one namespace
// collide, back off and retry, and small requests spend their time losing
// races. A Coalescer queues the requests of each partition, and one flusher
// per partition appends them together: while one combined Append is in
// flight the requests that arrive queue behind it, and the next takes as many
// of them as fit MaxOutcomes, whole and in arrival order. Before each
// combined Append the flusher yields its processor once (runtime.Gosched),
// so that requests this process is already handling reach the queue
// first: under load they join this Append instead of each starting one of
// its own, and a combined Append costs Redis about as much for 1 outcome as
// for 4. Nothing waits on a timer: on an idle process the yield returns at
// once, so a lone request goes at once.
//
// While the queue stays busy, each combined Append plans from the rows the
// previous one read and wrote (see Appender.run) instead of reading them
// again: one round trip per combined Append rather than two. Its guards
// fail it, and it reads afresh, when another writer changed what it
// depends on.
//
// A caller gets the answers Appender.Append would give its outcomes had the
// requests of a combined Append been sent one after another in arrival
// order: an outcome under the reservation id of an earlier request of the
// same combined Append answers Duplicate or Conflict. An error of a combined Append is
// the error of each of its requests, some of whose outcomes may be stored; a
// retry answers those Duplicate.
//
// Requests coalesce within one Coalescer only: other processes' Appends on
// the namespace still collide. A Coalescer is safe for concurrent use and
// its zero value needs only the Appender. A partition's flusher goroutine
// exits when its queue is empty.
type Coalescer struct {
	Appender *Appender
	// MaxOutcomes bounds one combined Append, MaxAppendOutcomes when zero,
	// at most MaxAppendOutcomes. A request with more goes alone.
	MaxOutcomes int
	// Timeout bounds one combined Append, which outlives the request that
	// started it: a request that goes away cancels nobody else's outcomes.
	// DefaultCoalesceTimeout when zero.
	Timeout time.Duration
	// Goroutines runs the flushers on goroutines kept between them, whose
	// stacks a flusher finds grown. A process shares one pool between
	// ingest and delivery (delivery.Config.Goroutines); a pool of the
	// Coalescer's own when nil.
	Goroutines *gopool.Pool

	mu sync.Mutex
	// queues holds the queue of each partition whose flusher runs, and no
	// other.
	queues map[store.Partition]*queue
	// left holds the snapshot the last flusher of a partition left, for
	// the next one; kept holds how many entries it had at its last prune.
	left map[store.Partition]*snapshot
	kept int
	// maxKept bounds left, maxKeptSnapshots when zero.
	maxKept int
}

// maxKeptSnapshots bounds the snapshots a Coalescer keeps for partitions
// whose flusher exited: a few MiB, however many namespaces a process
// serves within MaxSnapshotReuse. Past it, kept ones are dropped at
// random, and their partitions read again.
const maxKeptSnapshots = 4096

// CoalescerStats is a moment's view of a Coalescer.
type CoalescerStats struct {
	// Flushers counts the partitions with requests queued or a combined
	// Append in flight: one goroutine each. It is zero once every Append has
	// returned, unless one returned its ctx's error while its combined Append
	// went on.
	Flushers int
	// Queued counts the requests waiting for a combined Append.
	Queued int
}

type queue struct {
	waiting []*request
	// observed are the batches Observe saw commit while the flusher ran,
	// for it to fold into its snapshot; overflowed says it saw more than
	// maxObserved, and reads again instead.
	observed   []observedBatch
	overflowed bool
}

// observedBatch is a batch Observe saw commit, and when.
type observedBatch struct {
	at     time.Time
	writes []store.Write
}

// maxObserved bounds the batches a flusher's queue holds for it: a
// flusher holds its snapshot for one combined Append, a few milliseconds.
const maxObserved = 64

// Observe follows a batch that committed on p other than through c, such
// as a fire's claim or completion in this process: p's next combined
// Append plans from its snapshot with the batch's writes folded in,
// rather than failing the guards of the rows the batch changed and
// reading p again. writes must not change after. A batch Observe does not
// see (another process's) fails those guards as before.
func (c *Coalescer) Observe(p store.Partition, writes []store.Write) {
	at := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[p]; q != nil {
		// The flusher holds the snapshot: it folds the batch in when its
		// combined Append returns, unless it read p after the batch.
		if len(q.observed) == maxObserved {
			q.overflowed = true
			return
		}
		q.observed = append(q.observed, observedBatch{at: at, writes: writes})
		return
	}
	if s := c.left[p]; s != nil && !s.fold(writes) {
		delete(c.left, p)
	}
}

// folded is snap with the batches q observed folded in; c.mu is held.
// A batch that committed before snap was read is in it already. Nil when
// a batch cannot be followed.
func (q *queue) folded(snap *snapshot) *snapshot {
	observed, overflowed := q.observed, q.overflowed
	q.observed, q.overflowed = nil, false
	if snap == nil || overflowed {
		return nil
	}
	for _, o := range observed {
		if o.at.Before(snap.readAt) {
			continue
		}
		if !snap.fold(o.writes) {
			return nil
		}
	}
	return snap
}

// request is one caller's Append. The flusher sets statuses or err, then
// closes done.
type request struct {
	ctx      context.Context
	outcomes []schema.Outcome
	taken    bool // guarded by Coalescer.mu
	done     chan struct{}
	statuses []Status
	err      error
}

func (c *Coalescer) config() (limit int, timeout time.Duration, err error) {
	switch {
	case c.Appender == nil:
		return 0, 0, errors.New("outbox: coalescer needs an appender")
	case c.MaxOutcomes < 0 || c.MaxOutcomes > MaxAppendOutcomes:
		return 0, 0, fmt.Errorf("outbox: coalescer max outcomes %d out of range 1..%d", c.MaxOutcomes, MaxAppendOutcomes)
	case c.Timeout < 0:
		return 0, 0, fmt.Errorf("outbox: coalescer timeout %v is negative", c.Timeout)
	}
	limit, timeout = MaxAppendOutcomes, DefaultCoalesceTimeout
	if c.MaxOutcomes > 0 {
		limit = c.MaxOutcomes
	}
	if c.Timeout > 0 {
		timeout = c.Timeout
	}
	return limit, timeout, nil
}

// Append is Appender.Append through the partition's queue. A request whose
// ctx ends while it is queued leaves the queue and returns ctx's error,
// having stored nothing. One whose ctx ends after its combined Append
// started returns ctx's error as well, but that Append goes on and may
// store its outcomes. The flusher reads outcomes until then, so the caller
// must not change them.
func (c *Coalescer) Append(ctx context.Context, p store.Partition, outcomes []schema.Outcome) ([]Status, error) {
	limit, timeout, err := c.config()
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(outcomes) > MaxAppendOutcomes {
		return nil, invalidf("at most %d outcomes may be sent at once", MaxAppendOutcomes)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &request{ctx: ctx, outcomes: outcomes, done: make(chan struct{})}
	c.mu.Lock()
	q := c.queues[p]
	if q == nil {
		if c.queues == nil {
			c.queues = map[store.Partition]*queue{}
		}
		q = &queue{}
		c.queues[p] = q
		if c.Goroutines == nil {
			c.Goroutines = new(gopool.Pool)
		}
		c.Goroutines.Go(func() { c.flush(p, q, limit, timeout) })
	}
	q.waiting = append(q.waiting, r)
	c.mu.Unlock()

	select {
	case <-r.done:
		return r.statuses, r.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if !r.taken {
		// Still queued, so the flusher runs and q is p's queue.
		q.waiting = slices.DeleteFunc(q.waiting, func(w *request) bool { return w == r })
	}
	c.mu.Unlock()
	return nil, ctx.Err()
}

// Stats reports how many flushers run and how many requests wait.
func (c *Coalescer) Stats() CoalescerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := CoalescerStats{Flushers: len(c.queues)}
	for _, q := range c.queues {
		s.Queued += len(q.waiting)
	}
	return s
}

// flush runs p's combined Appends until its queue is empty. It answers one
// Append's requests and takes the next's, or leaves c.queues, in one
// critical section, so the flusher is gone by the time its last request
// has its answer.
func (c *Coalescer) flush(p store.Partition, q *queue, limit int, timeout time.Duration) {
	c.mu.Lock()
	// snap is what the last combined Append left, for the next.
	snap := q.folded(c.left[p])
	delete(c.left, p)
	for {
		if len(q.waiting) > 0 {
			// An empty queue ends the flusher in the critical section that
			// answered its last requests, as Stats promises.
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
		}
		reqs := q.take(limit)
		if len(reqs) == 0 {
			delete(c.queues, p)
			c.keep(p, snap)
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		var statuses []Status
		var err error
		statuses, snap, err = c.appendCombined(p, reqs, snap, timeout)
		c.mu.Lock()
		snap = q.folded(snap)
		off := 0
		for _, r := range reqs {
			if err != nil {
				r.err = err
			} else {
				end := off + len(r.outcomes)
				r.statuses, off = statuses[off:end:end], end
			}
			close(r.done)
		}
	}
}

// keep holds s, the snapshot p's flusher left, for p's next flusher, so
// that a partition whose queue empties between requests does not read
// before each. The entries that are too old to be reused are pruned now
// and then, so the map holds about the partitions of the last
// MaxSnapshotReuse, and never more than maxKeptSnapshots. c.mu is held.
func (c *Coalescer) keep(p store.Partition, s *snapshot) {
	if s == nil {
		return
	}
	if c.left == nil {
		c.left = map[store.Partition]*snapshot{}
	}
	c.left[p] = s
	if len(c.left) > 2*c.kept+64 {
		for q, o := range c.left {
			if s.readMs-o.readMs >= MaxSnapshotReuse.Milliseconds() {
				delete(c.left, q)
			}
		}
		c.kept = len(c.left)
	}
	limit := c.maxKept
	if limit <= 0 {
		limit = maxKeptSnapshots
	}
	if len(c.left) > limit {
		// One out for one in: a map's order is random enough an eviction.
		for q := range c.left {
			if q != p {
				delete(c.left, q)
				break
			}
		}
	}
}

// outcomesOf is the outcomes of reqs, in order.
func outcomesOf(reqs []*request) []schema.Outcome {
	if len(reqs) == 1 {
		return reqs[0].outcomes
	}
	var outcomes []schema.Outcome
	for _, r := range reqs {
		outcomes = append(outcomes, r.outcomes...)
	}
	return outcomes
}

// take removes the requests of the next combined Append from the front of
// the queue: whole, in arrival order, as many as fit limit, at least one.
func (q *queue) take(limit int) []*request {
	n, total := 0, 0
	for _, r := range q.waiting {
		if n > 0 && total+len(r.outcomes) > limit {
			break
		}
		r.taken = true
		total += len(r.outcomes)
		n++
	}
	taken := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	return taken
}

// appendCombined appends the outcomes of reqs in one call, under the first
// request's context values but none of the requests' cancellation, planned
// from snap when it is not nil, and returns the snapshot it left (nil
// after an error). A panic is returned as every request's error, as
// net/http would have contained it had each request appended on its own
// goroutine.
func (c *Coalescer) appendCombined(p store.Partition, reqs []*request, snap *snapshot, timeout time.Duration) (statuses []Status, left *snapshot, err error) {
	defer func() {
		if v := recover(); v != nil {
			statuses, left, err = nil, nil, fmt.Errorf("outbox: combined append panicked: %v\n%s", v, debug.Stack())
		}
	}()
	a := c.Appender
	cfg, err := a.config()
	if err != nil {
		return nil, nil, err
	}
	pr := prepare(outcomesOf(reqs))
	ctx, cancel := context.WithTimeout(withRequests(context.WithoutCancel(reqs[0].ctx), reqs), timeout)
	defer cancel()
	if left, err = a.run(ctx, p, cfg, pr, snap); err != nil {
		return nil, nil, err
	}
	return pr.statuses, left, nil
}
