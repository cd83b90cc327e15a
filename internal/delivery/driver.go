package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Driver defaults.
const (
	// DefaultConcurrency is the timers (streams) fired at once.
	DefaultConcurrency = 64
	// DefaultPollInterval is how often an idle driver reads the due
	// indexes: one pipelined read of every bucket per poll.
	DefaultPollInterval = 500 * time.Millisecond
	// MinLease is the shortest lease a driver takes. A lease must outlast a
	// fire, or the fire is cut and its stream called again every lease:
	// with the default sink timeout a fire lasts up to about 15 s (its 10 s
	// budget and a last 5 s call).
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
	Registry *timers.Registry
	// Clock is clock.System when nil.
	Clock clock.Clock
	// Concurrency bounds the timers fired at once, DefaultConcurrency
	// when zero. One stream is one timer, so a dead endpoint holds at most
	// one slot.
	Concurrency int
	// Lease is how long a claim holds a timer, timers.DefaultLease when
	// zero; it must outlast a fire.
	Lease time.Duration
	// PollInterval is DefaultPollInterval when zero. Wake starts a poll at
	// once; a fire that reschedules has its partition scanned at once.
	PollInterval time.Duration
	// Logger is slog.Default when nil.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics

	// after replaces time.After in tests, to tick the poll by hand.
	after func(d time.Duration) <-chan time.Time
	// finished, when a test sets it, learns that a fire's worker is done
	// and whether it asked the loop to poll again.
	finished func(kicked bool)
}

// Driver fires due timers of every partition with a bounded pool of
// workers. Several drivers, in one process or many, may share a store: a
// timer is claimed under a lease before it fires, so each fires once per
// claim, and an expired lease is taken over by whichever driver polls first.
type Driver struct {
	cfg Config

	wake     chan struct{}
	kick     chan struct{}
	stopping chan struct{}
	loopDone chan struct{}
	slots    chan struct{}
	workers  sync.WaitGroup

	// fireCtx is canceled when Stop's deadline ends: fires then write
	// nothing, and their leases expire.
	fireCtx    context.Context
	cancelFire context.CancelFunc
	loopCtx    context.Context
	cancelLoop context.CancelFunc

	mu       sync.Mutex
	inFlight map[string]struct{}
	// hot are partitions to scan before the due indexes are read again,
	// oldest first: those whose fires rescheduled (they may be due again
	// at once), and those a poll left for want of workers.
	hot partitionQueue
	// saturated: the last poll left due work for want of workers, so the
	// next fire to finish polls every due index again.
	saturated bool
	started   bool
	stopOnce  sync.Once
}

// New checks the configuration and returns a driver that is not started.
func New(cfg Config) (*Driver, error) {
	if cfg.Store == nil || cfg.Registry == nil {
		return nil, errors.New("delivery driver: a store and a timer registry are required")
	}
	if cfg.Concurrency < 0 || cfg.Lease < 0 || cfg.PollInterval < 0 {
		return nil, errors.New("delivery driver: concurrency, lease and poll interval must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
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
	return &Driver{
		cfg:      cfg,
		wake:     make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		loopDone: make(chan struct{}),
		slots:    make(chan struct{}, cfg.Concurrency),
		inFlight: map[string]struct{}{},
		hot:      partitionQueue{in: map[store.Partition]struct{}{}},
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
	d.mu.Lock()
	d.hot.push(p)
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
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
	for {
		if err := d.poll(d.loopCtx, all); err != nil && d.loopCtx.Err() == nil {
			d.cfg.Logger.Warn("delivery poll failed", "error", err)
		}
		if all {
			// The interval counts from the last full poll: the kicks of a
			// busy stream must not postpone reading every due index.
			interval = d.cfg.after(d.cfg.PollInterval)
		}
		// Work is left that only the end of a fire would look for, and no
		// fire is running (those launched ended, or what was queued had
		// been taken meanwhile): read every due index again now, once.
		d.mu.Lock()
		again := !retried && d.saturated && d.hot.len() == 0 && len(d.slots) == 0
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
		select {
		case <-d.stopping:
			return
		case <-d.loopCtx.Done():
			return
		case <-d.wake:
			all = true
		case <-interval:
			all = true
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

// poll launches the due timers it has free workers for: when all is set,
// it first queues every partition the due indexes name (one pipelined
// read), earliest first, behind the hot ones; then it scans queued
// partitions, oldest first, while a worker is free. A partition that may
// hold more than its scan took is queued again once the poll is over, so a
// poll never spins on one partition.
func (d *Driver) poll(ctx context.Context, all bool) error {
	if all {
		nowMs := d.cfg.Clock.Now().UnixMilli()
		due, err := d.cfg.Store.DueAll(ctx, nowMs, d.cfg.Concurrency)
		if err != nil {
			return err
		}
		perBucket := map[int]int{}
		more := false
		for _, dp := range due {
			b := d.cfg.Store.BucketOf(dp.Partition)
			perBucket[b]++
			more = more || perBucket[b] >= d.cfg.Concurrency
		}
		d.mu.Lock()
		if more {
			// A bucket may hold more due partitions than its read
			// returned: the next fire to end reads every due index again.
			// Set before any launch, so no fire can end unaware of it.
			d.saturated = true
		}
		for _, dp := range due {
			d.hot.push(dp.Partition)
		}
		d.mu.Unlock()
	}
	// again are partitions scanned in this poll that may hold more due
	// timers; they are queued again once the poll is over.
	var again []store.Partition
	found := 0
	defer func() {
		d.mu.Lock()
		for _, p := range again {
			d.hot.push(p)
		}
		left := d.hot.len()
		d.mu.Unlock()
		if all {
			// At least this many streams are due: those scanned, and one
			// for each partition left queued.
			d.cfg.Metrics.streamsDue(found + left)
		}
	}()
	for {
		// Workers give their slot back under mu and then read saturated
		// and the queue: deciding here under mu, none can finish unseen.
		d.mu.Lock()
		free := cap(d.slots) - len(d.slots)
		var (
			p  store.Partition
			ok bool
		)
		if free == 0 {
			if d.hot.len() > 0 || len(again) > 0 {
				// The next fire to end polls again.
				d.saturated = true
			}
		} else {
			p, ok = d.hot.pop()
		}
		d.mu.Unlock()
		if !ok {
			return nil
		}
		// Read the clock for each scan: a poll runs on while fires end and
		// queue their partitions, due at their own now.
		nowMs := d.cfg.Clock.Now().UnixMilli()
		start, end := timers.DueRange(nowMs)
		limit := min(free, timers.DefaultMaxTimers)
		page, err := d.cfg.Store.Scan(ctx, p, start, end, nil, limit)
		if err != nil {
			again = append(again, p)
			return fmt.Errorf("scan due timers of %s: %w", p, err)
		}
		found += len(page.Entries)
		full := len(page.Entries) == limit
		for _, e := range page.Entries {
			if !d.launch(p, nowMs, e) {
				full = true
				break
			}
		}
		if full {
			// More may be due in p than this poll took.
			again = append(again, p)
		}
	}
}

// partitionQueue is a FIFO of partitions, each in it at most once.
type partitionQueue struct {
	items []store.Partition
	in    map[store.Partition]struct{}
}

func (q *partitionQueue) len() int { return len(q.items) }

func (q *partitionQueue) push(p store.Partition) {
	if _, ok := q.in[p]; ok {
		return
	}
	q.in[p] = struct{}{}
	q.items = append(q.items, p)
}

func (q *partitionQueue) pop() (store.Partition, bool) {
	if len(q.items) == 0 {
		return store.Partition{}, false
	}
	p := q.items[0]
	q.items[0] = store.Partition{}
	q.items = q.items[1:]
	delete(q.in, p)
	return p, true
}

// launch fires one due timer row on a free worker. It is false when the
// driver is stopping or out of workers. A timer this driver is already
// firing (its lease ran out mid-fire) is left to that fire.
func (d *Driver) launch(p store.Partition, nowMs int64, e store.Entry) bool {
	_, kind, ref, ok := timers.ParseKey(e.Key)
	id := fmt.Sprintf("%s\x00%d\x00%s", p.Namespace, kind, ref)
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, busy := d.inFlight[id]; ok && busy {
		return true
	}
	select {
	case <-d.stopping:
		return false
	default:
	}
	select {
	case d.slots <- struct{}{}:
	default:
		d.saturated = true
		return false
	}
	d.inFlight[id] = struct{}{}
	d.workers.Add(1)
	go func() {
		defer d.workers.Done()
		rep, err := timers.RunTimer(d.fireCtx, d.cfg.Store, p, d.cfg.Registry, d.cfg.Clock, nowMs, d.cfg.Lease, e)
		d.cfg.Metrics.report(rep)
		if err != nil && d.fireCtx.Err() == nil {
			d.cfg.Logger.Warn("timer fire failed", "namespace", p.Namespace, "error", err)
		}
		d.mu.Lock()
		delete(d.inFlight, id)
		<-d.slots
		if rep.Rescheduled+rep.Replanned > 0 {
			// A stream with more rows than one fire takes is due again
			// now; scanning its partition is enough to find it.
			d.hot.push(p)
		}
		// A claim that failed (a store refusing writes) leaves its row due:
		// kicking would spin on it, so it waits for the poll interval. A
		// fire that failed after its claim has moved its timer a lease
		// away, and hands its worker on as any other.
		kick := (err == nil || rep.Claimed > 0) && (d.saturated || d.hot.len() > 0)
		d.mu.Unlock()
		if kick {
			select {
			case d.kick <- struct{}{}:
			default:
			}
		}
		if d.cfg.finished != nil {
			d.cfg.finished(kick)
		}
	}()
	return true
}
