package delivery

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

// Backlog sampler defaults.
const (
	// DefaultBacklogEvery is the least time between the starts of two
	// passes over every namespace.
	DefaultBacklogEvery = 15 * time.Second
	// DefaultBacklogPerTick bounds the namespaces one tick reads, at most
	// three round trips each.
	DefaultBacklogPerTick = 100
	// DefaultBacklogPause separates the ticks of one pass.
	DefaultBacklogPause = 100 * time.Millisecond
	// backlogTickTimeout bounds one tick's reads.
	backlogTickTimeout = 10 * time.Second
)

// BacklogStore is what the backlog sampler reads: the buckets' totals,
// which sum every namespace's backlog, and the partitions whose backlog
// counts rows, whose oldest rows it dates.
type BacklogStore interface {
	store.NamespaceStore
	store.Totals
}

// BacklogConfig configures a BacklogSampler.
type BacklogConfig struct {
	Store BacklogStore
	// Registerer takes the gauges.
	Registerer prometheus.Registerer
	// Clock is clock.System when nil.
	Clock clock.Clock
	// Window is the Appender's idempotency window, outbox.DefaultWindow
	// when zero.
	Window time.Duration
	// Every is DefaultBacklogEvery, PerTick DefaultBacklogPerTick and
	// Pause DefaultBacklogPause when zero.
	Every   time.Duration
	PerTick int
	Pause   time.Duration
	// Logger is slog.Default when nil.
	Logger *slog.Logger

	// after replaces time.After in tests, to tick by hand.
	after func(d time.Duration) <-chan time.Time
}

// BacklogSampler exports what every namespace has waiting as gauges with
// no labels, sampled: the pending rows and their bytes summed over every
// stream (disabled endpoints' included), and the age of the oldest pending
// row. An on-call alert is written on these.
//
// A pass reads the buckets' totals (store.Totals: one command a bucket,
// whatever the number of namespaces), which give the rows and bytes, then
// dates the oldest row of each namespace whose backlog counts rows, listed
// by the buckets that count any (store.Totals.Summed): an idle fleet costs
// the totals' read alone, and a backlog three reads per namespace that
// holds one. It reads at most PerTick namespaces a tick, ticks Pause apart,
// so a large backlog costs Redis a steady trickle, not a burst; the gauges
// change only when a pass is complete, never to a partial sum. Several
// processes on one Redis each export the same figures: aggregate them with
// max, not sum.
type BacklogSampler struct {
	cfg    BacklogConfig
	reader outbox.BacklogReader

	rows, bytes, oldestAge, sampledAt, unread prometheus.Gauge

	mu   sync.Mutex // one tick at a time
	pass backlogPass

	// last is the last complete pass's oldest row and end, for Oldest.
	lastMu                  sync.Mutex
	lastOldestMs, lastEndMs int64

	stopping chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	started  bool
}

// backlogPass is a pass over every bucket, as far as it has got.
type backlogPass struct {
	begun   bool
	startMs int64
	// buckets are those whose totals count pending rows, left to list.
	buckets []int
	queue   []store.Partition

	rows, bytes uint64
	oldestMs    int64
	unread      int
	firstErr    error
}

// NewBacklogSampler registers the gauges and returns a sampler that is not
// started.
func NewBacklogSampler(cfg BacklogConfig) (*BacklogSampler, error) {
	switch {
	case cfg.Store == nil || cfg.Registerer == nil:
		return nil, errors.New("backlog sampler: a store and a registerer are required")
	case cfg.Every < 0 || cfg.PerTick < 0 || cfg.Pause < 0 || cfg.Window < 0:
		return nil, errors.New("backlog sampler: every, per tick, pause and window must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Every == 0 {
		cfg.Every = DefaultBacklogEvery
	}
	if cfg.PerTick == 0 {
		cfg.PerTick = DefaultBacklogPerTick
	}
	if cfg.Pause == 0 {
		cfg.Pause = DefaultBacklogPause
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	s := &BacklogSampler{
		cfg:    cfg,
		reader: outbox.BacklogReader{Store: cfg.Store, Window: cfg.Window},
		rows:   gauge("relay_backlog_rows", "Outcome rows pending delivery, over every namespace and endpoint, as of the last complete sampling pass."),
		bytes:  gauge("relay_backlog_bytes", "Bytes of the records of the pending rows, as of the last complete sampling pass."),
		oldestAge: gauge("relay_backlog_oldest_age_seconds",
			"Age of the oldest pending row at the end of the last complete sampling pass; 0 when none is pending. A row older than the idempotency window counts as that old."),
		sampledAt: gauge("relay_backlog_sampled_timestamp_seconds", "Unix time the last complete backlog sampling pass ended; 0 before the first."),
		unread:    gauge("relay_backlog_unread_namespaces", "Namespaces the last complete sampling pass could not read, left out of its figures (the log says why)."),
		stopping:  make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, g := range []prometheus.Collector{s.rows, s.bytes, s.oldestAge, s.sampledAt, s.unread} {
		if err := cfg.Registerer.Register(g); err != nil {
			return nil, errors.Join(errors.New("register backlog gauges"), err)
		}
	}
	return s, nil
}

// Start samples until Stop or until ctx ends; its first tick runs at once.
func (s *BacklogSampler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("backlog sampler: started twice")
	}
	s.started = true
	go s.loop(ctx)
	return nil
}

// Stop ends sampling and waits for a tick in progress.
func (s *BacklogSampler) Stop() {
	s.mu.Lock()
	started := s.started
	s.mu.Unlock()
	if !started {
		return
	}
	s.stopOnce.Do(func() { close(s.stopping) })
	<-s.done
}

func (s *BacklogSampler) loop(ctx context.Context) {
	defer close(s.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		finished, startMs := s.tick(ctx)
		wait := s.cfg.Pause
		if finished {
			// The next pass starts Every after this one started.
			wait = max(0, s.cfg.Every-time.Duration(s.cfg.Clock.Now().UnixMilli()-startMs)*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.cfg.after(wait):
		}
	}
}

// Pass runs ticks, without pausing, until the pass under way is complete
// and the gauges show it.
func (s *BacklogSampler) Pass(ctx context.Context) {
	for {
		if finished, _ := s.tick(ctx); finished || ctx.Err() != nil {
			return
		}
	}
}

// tick reads up to PerTick namespaces of the pass, beginning one if none
// is under way; finished reports that the pass completed and was
// published, startMs when it began.
func (s *BacklogSampler) tick(ctx context.Context) (finished bool, startMs int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, backlogTickTimeout)
	defer cancel()
	p := &s.pass
	if !p.begun {
		totals, err := s.cfg.Store.Totals(ctx)
		if err != nil {
			// Tried again next tick.
			s.cfg.Logger.Warn("backlog sample: reading the totals failed", "error", err)
			return false, s.cfg.Clock.Now().UnixMilli()
		}
		*p = backlogPass{begun: true, startMs: s.cfg.Clock.Now().UnixMilli()}
		for b, t := range totals {
			p.rows += uint64(max(t.Sums[0], 0))
			p.bytes += uint64(max(t.Sums[1], 0))
			if t.Sums[0] > 0 {
				p.buckets = append(p.buckets, b)
			}
		}
	}
	for budget := s.cfg.PerTick; budget > 0; {
		if len(p.queue) == 0 {
			if len(p.buckets) == 0 {
				s.publish()
				return true, p.startMs
			}
			parts, err := s.cfg.Store.Summed(ctx, p.buckets[0])
			budget-- // a listing is a round trip too
			if err != nil {
				// Tried again next tick, from the same place.
				s.cfg.Logger.Warn("backlog sample: listing namespaces failed", "bucket", p.buckets[0], "error", err)
				return false, p.startMs
			}
			p.buckets, p.queue = p.buckets[1:], parts
			continue
		}
		part := p.queue[0]
		budget--
		b, err := s.reader.Read(ctx, part, s.cfg.Clock.Now().UnixMilli())
		switch {
		case errors.Is(err, store.ErrCorrupt):
			// It will not read better next time; the pass goes on
			// without it and says so.
			p.unread++
			if p.firstErr == nil {
				p.firstErr = err
			}
			p.queue = p.queue[1:]
			continue
		case err != nil:
			// Redis away, or the tick out of time: the same namespace
			// next tick, rather than a pass that counts it as empty.
			s.cfg.Logger.Warn("backlog sample: reading a namespace failed", "error", err)
			return false, p.startMs
		}
		p.queue = p.queue[1:]
		if b.OldestAcceptedMs != 0 && (p.oldestMs == 0 || b.OldestAcceptedMs < p.oldestMs) {
			p.oldestMs = b.OldestAcceptedMs
		}
	}
	return false, p.startMs
}

// publish sets the gauges from the complete pass and ends it.
func (s *BacklogSampler) publish() {
	p := &s.pass
	nowMs := s.cfg.Clock.Now().UnixMilli()
	age := 0.0
	if p.oldestMs != 0 {
		age = max(0, float64(nowMs-p.oldestMs)/1000)
	}
	s.rows.Set(float64(p.rows))
	s.bytes.Set(float64(p.bytes))
	s.oldestAge.Set(age)
	s.unread.Set(float64(p.unread))
	s.sampledAt.Set(float64(nowMs) / 1000)
	s.lastMu.Lock()
	s.lastOldestMs, s.lastEndMs = p.oldestMs, nowMs
	s.lastMu.Unlock()
	s.cfg.Logger.Debug("backlog sampled", "rows", p.rows, "bytes", p.bytes, "oldest_age_seconds", age, "unread", p.unread)
	if p.unread > 0 {
		s.cfg.Logger.Warn("backlog sample left out namespaces it could not read", "namespaces", p.unread, "error", p.firstErr)
	}
	p.begun = false
}

// Oldest is when the oldest row the last complete pass dated was accepted
// (0 when none was pending) and when that pass ended; ok is false before
// the first pass ends.
func (s *BacklogSampler) Oldest() (acceptedMs, sampledMs int64, ok bool) {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	return s.lastOldestMs, s.lastEndMs, s.lastEndMs != 0
}
