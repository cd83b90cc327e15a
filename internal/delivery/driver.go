package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/gopool"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Driver defaults.
const (
	// DefaultConcurrency is the timers (streams) fired at once in the main
	// lane.
	DefaultConcurrency = 64
	// DefaultSlowConcurrency is the fires the slow lane holds at once: those
	// that outlasted SlowAfter, and those of streams whose last fire failed.
	DefaultSlowConcurrency = 256
	// DefaultSlowAfter is how long a fire may hold a main-lane worker. A
	// healthy fire on a near endpoint takes a few milliseconds; one still
	// running after this is most likely waiting on a slow endpoint, and
	// moves to the slow lane so the next due stream gets its worker.
	DefaultSlowAfter = 25 * time.Millisecond
	// DefaultPollInterval is how often a driver reads every due index (a
	// full poll: one read of each bucket, 64 commands by default) to find
	// the timers it was not told of, those another process wrote and the
	// leases of a process that crashed. Between full polls it sleeps until
	// the earliest due time it knows of and scans only that partition, so
	// an idle process costs Redis 64 commands per interval, not per 500 ms.
	DefaultPollInterval = 15 * time.Second
	// MinLease is the shortest lease a driver takes. A lease must outlast a
	// fire, or the fire is cut and its stream called again every lease: a
	// fire's calls end within its bound, about 15 s with the default sink
	// timeout (its 10 s budget and a last 5 s call), whatever an endpoint's
	// own timeout_ms, since a call is launched only while it can end by then.
	MinLease = 20 * time.Second
)

// DueStore is what the driver needs of the store: partitions, and the
// bucket due indexes that say which partitions have due timers.
type DueStore interface {
	store.NamespaceStore
	// DueAll returns the partitions whose earliest timer is due at or
	// before upToMs, up to limitPerBucket of each bucket, earliest first.
	DueAll(ctx context.Context, upToMs int64, limitPerBucket int) ([]store.DuePartition, error)
	// BucketOf is the due-index bucket of a partition.
	BucketOf(p store.Partition) int
}

// Config configures a Driver.
type Config struct {
	Store    DueStore
	Handlers *timers.Handlers
	// Clock is clock.System when nil.
	Clock clock.Clock
	// Goroutines runs the fires on goroutines kept between them, whose
	// stacks a fire finds grown. A process shares one pool between delivery
	// and ingest (outbox.Coalescer.Goroutines); a pool of the Driver's own
	// when nil.
	Goroutines *gopool.Pool
	// Concurrency bounds the timers fired at once in the main lane,
	// DefaultConcurrency when zero. One stream is one timer, so a dead
	// endpoint holds at most one slot.
	Concurrency int
	// SlowConcurrency bounds the fires of the slow lane,
	// DefaultSlowConcurrency when zero: with the main lane, the most fires
	// at once, and so the most calls open to endpoints that hang.
	SlowConcurrency int
	// SlowAfter is how long a fire holds a main-lane worker before it
	// moves to the slow lane, DefaultSlowAfter when zero. A fire that finds
	// the slow lane full keeps its worker until a slow slot frees.
	SlowAfter time.Duration
	// Lease is how long a claim holds a timer, timers.DefaultLease when
	// zero; it must outlast a fire.
	Lease time.Duration
	// PollInterval is the time between full polls, DefaultPollInterval
	// when zero. Wake starts one at once; a fire that reschedules has its
	// partition scanned at once, and a timer due within two intervals that
	// a poll or a scan saw is scanned when it falls due.
	PollInterval time.Duration
	// Logger is slog.Default when nil.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Committed is told of each batch the fires commit (claims,
	// completions), after it committed: the ingest of this process follows
	// them (outbox.Coalescer.Observe) rather than finding its rows changed.
	// Optional.
	Committed func(p store.Partition, writes []store.Write)
	// Arrivals are the lingering fires' (Handler.Arrivals): WakePartition
	// tells them, and Stop ends their lingering.
	Arrivals *Arrivals

	// after replaces time.After in tests, to tick the poll by hand.
	after func(d time.Duration) <-chan time.Time
	// until replaces time.After in tests for the sleep until the earliest
	// known due time, to end it by hand.
	until func(d time.Duration) <-chan time.Time
	// slowTimer replaces the timer of SlowAfter in tests, to move fires to
	// the slow lane by hand.
	slowTimer func(d time.Duration) <-chan time.Time
	// finished, when a test sets it, learns that a fire's worker is done
	// and whether it asked the loop to poll again.
	finished func(kicked bool)
	// slowed, when a test sets it, learns that a fire outlasted SlowAfter
	// and whether it moved to the slow lane or waits for a slot there.
	slowed func(moved bool)
	// slowWaits, when a test sets it, learns that a scan of p left it
	// waiting for the slow lane.
	slowWaits func(p store.Partition)
}

// Driver fires due timers of every partition with two bounded lanes of
// workers, so that endpoints that hang cannot hold back the others. A fire
// starts in the main lane; one that outlasts SlowAfter, which is what a
// call to an endpoint that hangs does, moves to the slow lane and gives its
// main worker to the next due stream. A stream whose last fire failed
// (its delivery state counts a failed fire) fires in the slow lane from
// the start, or waits for a slot there: it never takes a main worker.
//
// Several drivers, in one process or many, may share a store: a timer is
// claimed under a lease before it fires, so each fires once per claim, and
// an expired lease is taken over by whichever driver polls first.
type Driver struct {
	cfg Config
	// runner claims, fires and completes each due timer, logging through
	// cfg.Logger.
	runner *timers.Runner

	wake     chan struct{}
	kick     chan struct{}
	stopping chan struct{}
	loopDone chan struct{}
	// workers counts the fires running.
	workers sync.WaitGroup

	// fireCtx is canceled when Stop's deadline ends: fires then write
	// nothing, and their leases expire.
	fireCtx    context.Context
	cancelFire context.CancelFunc
	loopCtx    context.Context
	cancelLoop context.CancelFunc

	// fireStore is the store of fires, which tells Committed of each
	// batch.
	fireStore store.NamespaceStore

	mu sync.Mutex
	// inFlight are the timers this driver fires, by namespace, kind and
	// reference; true once a
	// launch found one already firing, so its partition is scanned again
	// when that fire ends: the row launched may be a newer timer of the
	// stream, written after the fire's completion.
	inFlight map[string]bool
	// main and slow count the fires holding a worker of each lane.
	main, slow int
	// moving are main-lane fires past SlowAfter that found the slow lane
	// full, oldest first; each keeps its main worker until it gets a slot.
	moving []*fire
	// slowWait are partitions with a due stream whose last fire failed and
	// that found the slow lane full, oldest first. A full poll still scans
	// them: only their failed streams wait, not the partition's others.
	slowWait partitionQueue
	// waitSince stamps each partition of slowWait, and each fire of moving
	// its since, from waits: a freed slow slot goes to the oldest of both,
	// so neither kind of waiter can starve the other.
	waitSince map[store.Partition]uint64
	waits     uint64
	// handed are partitions of slowWait handed a slow slot, to scan before
	// any other; reserved holds their slots, so that no other fire takes
	// one before the scan: reservedN is their sum.
	handed    partitionQueue
	reserved  map[store.Partition]int
	reservedN int
	// hot are partitions to scan before the due indexes are read again,
	// oldest first: those whose fires rescheduled (they may be due again
	// at once), and those a poll left for want of workers.
	hot partitionQueue
	// soon is what the driver knows of timers due later, to scan each
	// partition when its timer falls due.
	soon dueSoon
	// saturated: the last poll left due work for want of workers, so the
	// next fire to finish polls every due index again.
	saturated bool
	started   bool
	stopOnce  sync.Once
}

// New checks the configuration and returns a driver that is not started.
func New(cfg Config) (*Driver, error) {
	if cfg.Store == nil || cfg.Handlers == nil {
		return nil, errors.New("delivery driver: a store and a timer registry are required")
	}
	if cfg.Concurrency < 0 || cfg.SlowConcurrency < 0 || cfg.SlowAfter < 0 || cfg.Lease < 0 || cfg.PollInterval < 0 {
		return nil, errors.New("delivery driver: concurrencies, slow-lane threshold, lease and poll interval must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Goroutines == nil {
		cfg.Goroutines = new(gopool.Pool)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.SlowConcurrency == 0 {
		cfg.SlowConcurrency = DefaultSlowConcurrency
	}
	if cfg.SlowAfter == 0 {
		cfg.SlowAfter = DefaultSlowAfter
	}
	if cfg.Lease == 0 {
		cfg.Lease = timers.DefaultLease
	}
	if cfg.Lease < MinLease {
		// A lease shorter than a fire would expire under every fire: each
		// completion refused, each row delivered again and again.
		return nil, fmt.Errorf("delivery driver: lease %v is shorter than %v", cfg.Lease, MinLease)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	if cfg.until == nil {
		cfg.until = time.After
	}
	var fireStore store.NamespaceStore = cfg.Store
	if cfg.Committed != nil {
		fireStore = store.Observed(cfg.Store, cfg.Committed)
	}
	runner := timers.NewRunner(timers.RunnerConfig{Store: fireStore, Handlers: cfg.Handlers, Clock: cfg.Clock,
		Budget: timers.Budget{Lease: cfg.Lease}, Logger: cfg.Logger})
	return &Driver{
		cfg:       cfg,
		runner:    runner,
		fireStore: fireStore,
		wake:      make(chan struct{}, 1),
		kick:      make(chan struct{}, 1),
		stopping:  make(chan struct{}),
		loopDone:  make(chan struct{}),
		inFlight:  map[string]bool{},
		hot:       newPartitionQueue(),
		slowWait:  newPartitionQueue(),
		waitSince: map[store.Partition]uint64{},
		handed:    newPartitionQueue(),
		reserved:  map[store.Partition]int{},
		soon:      newDueSoon(),
	}, nil
}

// Start runs the driver until Stop, or until ctx ends (which stops it
// without waiting for fires). It polls at once.
func (d *Driver) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started {
		return errors.New("delivery driver: started twice")
	}
	d.started = true
	d.fireCtx, d.cancelFire = context.WithCancel(ctx)
	d.loopCtx, d.cancelLoop = context.WithCancel(d.fireCtx)
	go d.loop()
	return nil
}

// Stop stops polling and waits for the fires in flight to finish. Once ctx
// ends it cancels them instead: a canceled fire writes nothing, and its
// timer waits for its lease to expire. It returns ctx's error in that case.
func (d *Driver) Stop(ctx context.Context) error {
	d.mu.Lock()
	started := d.started
	d.mu.Unlock()
	if !started {
		return nil
	}
	d.stopOnce.Do(func() {
		d.cfg.Arrivals.Close()
		close(d.stopping)
		d.cancelLoop()
	})
	<-d.loopDone
	done := make(chan struct{})
	go func() {
		d.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
		d.cancelFire()
		return nil
	case <-ctx.Done():
		d.cancelFire()
		<-done
		return ctx.Err()
	}
}

func (d *Driver) loop() {
	defer close(d.loopDone)
	all, retried := true, false
	var interval <-chan time.Time
	// soon ends at armedMs, the earliest due time known when it was armed.
	var soon <-chan time.Time
	armedMs, armed := int64(0), false
	for {
		d.mu.Lock()
		waiting := d.slowWait.len()
		d.mu.Unlock()
		if err := d.poll(d.loopCtx, all); err != nil && d.loopCtx.Err() == nil {
			d.cfg.Logger.Warn("delivery poll failed", "error", err)
		}
		if all {
			// The interval counts from the last full poll: the kicks of a
			// busy stream must not postpone reading every due index.
			interval = d.cfg.after(d.cfg.PollInterval)
		}
		// Work is left that only the end of a fire would look for, and no
		// fire holds a main worker (those launched ended or moved to the
		// slow lane, or what was queued had been taken meanwhile): read
		// every due index again now, once, or for as long as each read
		// finds more streams to wait for the slow lane (the next read goes
		// past them, and there are only so many).
		d.mu.Lock()
		grew := d.slowWait.len() > waiting
		again := (!retried || grew) && d.saturated && d.hot.len() == 0 && d.main == 0
		if again {
			d.saturated = false
		}
		d.mu.Unlock()
		if retried = again; again {
			select {
			case <-d.stopping:
				return
			default:
			}
			all = true
			continue
		}
		// Sleep until the earliest timer known to be due, at most until the
		// next full poll; armed again only when that time changes.
		d.mu.Lock()
		nextMs, known := d.soon.next()
		d.mu.Unlock()
		switch {
		case !known:
			soon, armed = nil, false
		case !armed || nextMs != armedMs:
			wait := time.Duration(nextMs-d.cfg.Clock.Now().UnixMilli()) * time.Millisecond
			soon, armedMs, armed = d.cfg.until(max(0, wait)), nextMs, true
		}
		select {
		case <-d.stopping:
			return
		case <-d.loopCtx.Done():
			return
		case <-d.wake:
			all = true
		case <-interval:
			all = true
		case <-soon:
			// poll scans the partitions now due.
			soon, armed = nil, false
			all = false
		case <-d.kick:
			// Work a poll left goes first; the due indexes are read again
			// once it is used up.
			d.mu.Lock()
			all = d.saturated && d.hot.len() == 0
			if all {
				d.saturated = false
			}
			d.mu.Unlock()
		}
	}
}

// lookAheadMs is how far past now a full poll and a scan look for timers
// to scan when they fall due: two intervals, so the next full poll comes
// before what it did not see falls due, even if it runs late.
func (d *Driver) lookAheadMs() int64 {
	return 2 * d.cfg.PollInterval.Milliseconds()
}

// poll launches the due timers it has free workers for: when all is set,
// it first queues every partition the due indexes name (one pipelined
// read), earliest first, behind the hot ones; then it scans queued
// partitions, oldest first, while a main worker is free. A partition that
// may hold more than its scan took is queued again once the poll is over, so
// a poll never spins on one partition.
func (d *Driver) poll(ctx context.Context, all bool) error {
	nowMs := d.cfg.Clock.Now().UnixMilli()
	d.mu.Lock()
	// The partitions whose known timer fell due, earliest first.
	for _, p := range d.soon.takeDue(nowMs) {
		d.hot.push(p)
	}
	d.mu.Unlock()
	if all {
		// The partitions waiting for the slow lane are read past, not
		// counted against the workers: they must not fill a bucket's read
		// and hide the others.
		d.mu.Lock()
		limit := d.cfg.Concurrency + d.slowWait.len()
		d.mu.Unlock()
		// The read looks ahead two intervals, past the next full poll: a
		// partition due by then is scanned when it falls due. Each bucket
		// answers earliest first, so what is due now comes first.
		due, err := d.cfg.Store.DueAll(ctx, nowMs+d.lookAheadMs(), limit)
		if err != nil {
			return err
		}
		perBucket := map[int]int{}
		more := false
		for _, dp := range due {
			if dp.DueAtMs > nowMs {
				continue
			}
			b := d.cfg.Store.BucketOf(dp.Partition)
			perBucket[b]++
			more = more || perBucket[b] >= limit
		}
		d.mu.Lock()
		if more {
			// A bucket may hold more due partitions than its read
			// returned: the next fire to end reads every due index again.
			// Set before any launch, so no fire can end unaware of it.
			d.saturated = true
		}
		for _, dp := range due {
			if dp.DueAtMs > nowMs {
				d.soon.set(dp.Partition, dp.DueAtMs)
				continue
			}
			// One waiting for the slow lane is scanned too: its other
			// streams are due as any, and only the failed ones wait.
			d.hot.push(dp.Partition)
		}
		d.mu.Unlock()
	}
	// again are partitions scanned in this poll that may hold more due
	// timers; they are queued again once the poll is over.
	var again []store.Partition
	// found counts the due timers scanned; waited holds the scanned
	// partitions that went to wait for the slow lane; gave is set once a
	// slow slot was given, which may have freed a main worker.
	found, waited, gave := 0, map[store.Partition]struct{}{}, false
	defer func() {
		d.mu.Lock()
		for _, p := range again {
			d.hot.push(p)
		}
		left := d.hot.len() + d.handed.len()
		for p := range d.slowWait.in {
			if _, ok := waited[p]; !ok && !d.hot.has(p) && !d.handed.has(p) {
				left++
			}
		}
		// A slot that freed while a scan went on to find the lane full
		// goes to the oldest waiter.
		gave = d.handOff() || gave
		kick := gave && (d.saturated || d.hot.len() > 0 || d.handed.len() > 0)
		d.mu.Unlock()
		if kick {
			d.kickLoop()
		}
		if all {
			// At least this many streams are due: those scanned, and one
			// for each partition left queued or waiting for the slow lane.
			d.cfg.Metrics.streamsDue(found + left)
		}
	}()
	for {
		// Workers give their slot back under mu and then read saturated
		// and the queue: deciding here under mu, none can finish unseen.
		d.mu.Lock()
		free := d.cfg.Concurrency - d.main
		// A partition handed a slow slot is scanned first, main workers
		// or not: the slot is held for it until then.
		p, ok := d.handed.pop()
		switch {
		case ok:
		case free == 0:
			if d.hot.len() > 0 || len(again) > 0 {
				// The next fire to end polls again.
				d.saturated = true
			}
		default:
			p, ok = d.hot.pop()
		}
		d.mu.Unlock()
		if !ok {
			return nil
		}
		// Read the clock for each scan: a poll runs on while fires end and
		// queue their partitions, due at their own now.
		nowMs := d.cfg.Clock.Now().UnixMilli()
		// The scan looks ahead as the full poll does: the first timer not
		// yet due says when to scan p again, at no extra read.
		start, end := timers.DueRange(nowMs + d.lookAheadMs())
		// A whole page, not just the free workers' worth: a stream waiting
		// for the slow lane may come first and must not hide those behind.
		limit := timers.DefaultMaxTimers
		d.mu.Lock()
		d.soon.forget(p)
		d.mu.Unlock()
		page, err := d.cfg.Store.Scan(ctx, p, start, end, nil, limit)
		if err != nil {
			again = append(again, p)
			d.mu.Lock()
			if d.reserved[p] > 0 {
				// It keeps its slot, and is scanned first next time.
				d.handed.push(p)
			}
			d.mu.Unlock()
			return fmt.Errorf("scan due timers of %s: %w", p, err)
		}
		// Timer keys sort by due time: those due now come first.
		dueN, laterMs := len(page.Entries), int64(0)
		for i, e := range page.Entries {
			if dueMs, _, _, ok := timers.ParseKey(e.Key); ok && dueMs > nowMs {
				dueN, laterMs = i, dueMs
				break
			}
		}
		found += dueN
		full, waits := dueN == limit, false
		if dueN < len(page.Entries) {
			d.mu.Lock()
			d.soon.set(p, laterMs)
			d.mu.Unlock()
		}
	entries:
		for _, e := range page.Entries[:dueN] {
			switch d.launch(p, nowMs, e, nil) {
			case slowFull:
				waits = true
			case mainFull:
				// A stream whose last fire failed, further on, may
				// still take its slow slot.
				full = true
			case stopping:
				full = true
				break entries
			}
		}
		d.mu.Lock()
		if n := d.reserved[p]; n > 0 {
			// A slot handed to p that its scan left unused (the stream
			// was fired elsewhere meanwhile) goes to the next waiter.
			delete(d.reserved, p)
			d.reservedN -= n
		}
		if full {
			// More may be due in p than this poll took.
			again = append(again, p)
		}
		if waits {
			waited[p] = struct{}{}
			d.waitSlow(p)
		} else if !full {
			d.slowWait.remove(p)
			delete(d.waitSince, p)
		}
		// A partition handed a slot is scanned next in this poll; a
		// main worker freed is used once the poll is over.
		gave = d.handOff() || gave
		d.mu.Unlock()
		if waits && d.cfg.slowWaits != nil {
			d.cfg.slowWaits(p)
		}
	}
}
