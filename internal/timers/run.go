package timers

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/store"
)

// Defaults of a run.
const (
	DefaultMaxTimers = 16
	// DefaultLease must outlast a fire: a delivery fire's calls end within
	// its 15 s bound (a 10 s budget and a last 5 s call), whatever the
	// endpoint's timeout.
	DefaultLease = 30 * time.Second
)

// Budget bounds one run over a partition.
type Budget struct {
	// MaxTimers bounds the due timers claimed in one run.
	MaxTimers int
	// Lease is how long a claim holds a timer. A fire that outlasts it may
	// be taken over, and its completion is then refused.
	Lease time.Duration
}

func (b Budget) withDefaults() Budget {
	if b.MaxTimers <= 0 {
		b.MaxTimers = DefaultMaxTimers
	}
	if b.Lease < time.Millisecond {
		// A lease is counted in whole milliseconds: less would be over
		// before it was granted.
		b.Lease = DefaultLease
	}
	return b
}

// Report counts what one run did. The zero Report means nothing was due.
type Report struct {
	// Claimed timers, of which TakenOver had an expired lease of another claim.
	Claimed, TakenOver int
	// Contended claims lost to another worker.
	Contended int
	// Fired handlers, and how their results ended.
	Fired, Done, Rescheduled int
	// Replanned fires whose batch failed the handler's own guard: the timer
	// was released, due at once, for the next fire to re-plan.
	Replanned int
	// LeaseLost completions that wrote nothing (see the LeaseLost completion).
	LeaseLost int
	// Deferred timers that could not be fired (corrupt row, unknown kind, or
	// a failed fire); each waits one lease before it is tried again.
	Deferred int
	// Refused completions: the store refused the fire's batch as one that
	// can never commit (a counter out of range, a counter row of another
	// layout). The timer waits one lease and fires again.
	Refused int
	// Woke completions that ended their timer and put another of their
	// partition due by the fire's end (a recovery queueing rows wakes its
	// stream): the partition holds due work that only a scan of it finds.
	Woke int
}

// Empty reports whether the run did nothing worth logging.
func (r Report) Empty() bool { return r == Report{} }

func (r *Report) add(o Report) {
	r.Claimed += o.Claimed
	r.TakenOver += o.TakenOver
	r.Contended += o.Contended
	r.Fired += o.Fired
	r.Done += o.Done
	r.Rescheduled += o.Rescheduled
	r.Replanned += o.Replanned
	r.LeaseLost += o.LeaseLost
	r.Deferred += o.Deferred
	r.Refused += o.Refused
	r.Woke += o.Woke
}

// Claimed is a timer held under a lease by this worker.
type Claimed struct {
	Partition store.Partition
	Timer     DueTimer
	// Key and Value are the leased row: the guard of the completion.
	Key   store.Key
	Value store.Value
	// ExpiresAtMs is when the lease runs out.
	ExpiresAtMs int64
}

// Claim leases a due timer row: it rewrites the row to be due when the lease
// expires, carrying a fresh token, guarded by the row as read. ok is false
// when another worker changed the row first.
func Claim(ctx context.Context, st store.NamespaceStore, p store.Partition, row Row, nowMs int64, lease time.Duration) (c Claimed, ok bool, err error) {
	var l Lease
	if _, err := rand.Read(l.Token[:]); err != nil {
		return Claimed{}, false, fmt.Errorf("lease token: %w", err)
	}
	l.DueAtMs = row.DueAtMs
	if row.Lease != nil {
		l.DueAtMs = row.Lease.DueAtMs
	}
	expires := nowMs + lease.Milliseconds()
	c = Claimed{
		Partition:   p,
		Timer:       DueTimer{DueAtMs: l.DueAtMs, Kind: row.Kind, Reference: row.Reference, State: row.State},
		Key:         Key(expires, row.Kind, row.Reference),
		Value:       encodeLeased(l, row.State),
		ExpiresAtMs: expires,
	}
	// A claim rewrites a row of the same size: it must run on a full store.
	b := store.Batch{Settles: true}
	b.RequireEquals(row.Key, row.Raw)
	if c.Key != row.Key {
		b.Delete(row.Key)
	}
	b.Put(c.Key, c.Value)
	res, err := st.Apply(ctx, p, b)
	if err != nil {
		return Claimed{}, false, fmt.Errorf("claim timer of %s: %w", p, err)
	}
	if res.Committed {
		return c, true, nil
	}
	// A client that resent the claim after a lost reply sees its own first
	// run fail the guard. The token is fresh, so a leased row carrying it
	// can only be this claim's: the lease is held, not lost.
	v, found, err := st.Get(ctx, p, c.Key)
	if err != nil {
		return Claimed{}, false, fmt.Errorf("claim timer of %s: %w", p, err)
	}
	return c, found && bytes.Equal(v, c.Value), nil
}

// Completion is how one Complete ended.
type Completion int

const (
	// Completed: the handler's batch and the timer's deletion or move committed.
	Completed Completion = iota + 1
	// Replanned: the handler's own guard failed; the timer is due again now.
	Replanned
	// LeaseLost: this call wrote nothing, because the lease expired or was
	// taken over, or because a client resent the call after a lost reply
	// and its first run had already committed. Callers must not read it as
	// "the fire's batch did not apply".
	LeaseLost
)

// Complete applies a fire's result under the claim's lease: the handler's
// batch, and the leased row deleted (Done) or moved (Reschedule), in one
// batch guarded by the leased row. When the handler's own precondition fails,
// the fire's Replan, if it has one, plans again against fresh rows under the
// same lease; failing that, the timer is released due at its original time,
// so the next fire re-plans, except that a Backoff reschedule that writes
// nothing else is applied as planned. A store that is away is waited out
// while the lease lasts.
func Complete(ctx context.Context, st store.NamespaceStore, clk clock.Clock, c Claimed, f Fired) (Completion, error) {
	out, _, err := complete(ctx, st, clk, c, f)
	return out, err
}

// complete is Complete that also returns the plan it applied, which a
// re-plan may have changed (a fire done when planned may not be after).
func complete(ctx context.Context, st store.NamespaceStore, clk clock.Clock, c Claimed, f Fired) (Completion, Fired, error) {
	first := f
	for replans := 0; ; replans++ {
		// Past its lease by this process's clock the completion is still
		// sent: the lease guard refuses it if another worker claimed the
		// timer since, and if none did, the work is kept rather than done
		// again. A clock stepped forward would otherwise throw away every
		// fire in flight.
		b := store.Batch{
			Preconditions: append(append([]store.Precondition(nil), f.Batch.Preconditions...), f.MarkGuards...),
			Writes:        withNotes(append(slices.Clone(f.Batch.Writes), f.Marks...), f.Notes),
			Settles:       f.Batch.Settles,
		}
		leaseGuard := len(b.Preconditions)
		b.RequireEquals(c.Key, c.Value)
		if f.Done && f.Stay {
			b.Put(c.Key, EncodeIdle(f.State))
		} else {
			b.Delete(c.Key)
			if !f.Done {
				b.Put(Key(f.DueAtMs, c.Timer.Kind, c.Timer.Reference), EncodeIdle(f.State))
			}
		}
		if err := b.Validate(); err != nil {
			return 0, f, fmt.Errorf("complete timer %d/%s of %s: %w", c.Timer.Kind, c.Timer.Reference, c.Partition, err)
		}
		// A Redis restart or failover mid-completion is waited out while the
		// lease lasts: giving up would leave the timer leased until then and
		// send the fire's delivered rows again.
		var res store.Result
		sent := false
		err := store.RetryUnavailable(ctx, store.UnavailableAttempts, func() error {
			if sent && clk.Now().UnixMilli() >= c.ExpiresAtMs {
				// Another worker may hold the timer by now.
				return errLeaseExpired
			}
			sent = true
			var err error
			res, err = st.Apply(ctx, c.Partition, b)
			return err
		})
		if errors.Is(err, errLeaseExpired) {
			return LeaseLost, f, nil
		}
		if err != nil {
			return 0, f, fmt.Errorf("complete timer of %s: %w", c.Partition, err)
		}
		switch {
		case res.Committed:
			return Completed, f, nil
		case res.Failed == leaseGuard:
			return LeaseLost, f, nil
		case f.Replan != nil && replans < maxReplans:
			next, err := f.Replan(ctx)
			if err == nil {
				next.Replan = f.Replan
				f = next
				continue
			}
		case f.Backoff && !f.Done && len(f.Batch.Writes) == 0:
			// A failed call backing off: what moved under its guard, such
			// as an append, does not change that plan, and firing again at
			// once would call a failing endpoint at the rate of ingest.
			out, err := releaseMarked(ctx, st, c, f)
			if out == Replanned {
				out = Completed
			}
			return out, f, err
		}
		out, err := release(ctx, st, c, c.Timer.DueAtMs, c.Timer.State, first.Notes)
		return out, first, err
	}
}

var errLeaseExpired = errors.New("timers: lease expired")

// maxReplans bounds the re-plans of one completion; a stream so contended
// that every one fails is released and fired afresh.
const maxReplans = 8

// withNotes is a copy of writes with notes after them. A note that adds to
// a row the writes already add to, with the same header and counters, joins
// that Add, since a batch adds to a row at most once: a fire's count of
// failed calls and its acknowledgements' count of delivered rows are one
// write to the stream's counters, and one operation of the batch.
func withNotes(writes, notes []store.Write) []store.Write {
	out := append(make([]store.Write, 0, len(writes)+len(notes)), writes...)
	for _, n := range notes {
		if i := sameAdd(out, n); i >= 0 {
			d := append([]int64(nil), out[i].Deltas...)
			for k := range d {
				d[k] += n.Deltas[k]
			}
			out[i].Deltas = d
			continue
		}
		out = append(out, n)
	}
	return out
}

// sameAdd is the index of an Add in ws to the row of the Add n with its
// header, counters and saturation, or -1.
func sameAdd(ws []store.Write, n store.Write) int {
	if n.Kind != store.Add {
		return -1
	}
	for i, w := range ws {
		if w.Kind == store.Add && w.Key == n.Key && bytes.Equal(w.Value, n.Value) &&
			len(w.Deltas) == len(n.Deltas) && w.Saturating == n.Saturating {
			return i
		}
	}
	return -1
}

// release puts a leased timer back, idle and due at dueAtMs, with the fire's
// notes.
func release(ctx context.Context, st store.NamespaceStore, c Claimed, dueAtMs int64, state []byte, notes []store.Write) (Completion, error) {
	out, _, err := releaseWith(ctx, st, c, dueAtMs, state, notes, nil, nil)
	return out, err
}

// releaseMarked releases the timer at the state f plans, with its marks,
// or, when their guards fail, at the state as claimed, without them.
func releaseMarked(ctx context.Context, st store.NamespaceStore, c Claimed, f Fired) (Completion, error) {
	out, marksFailed, err := releaseWith(ctx, st, c, f.DueAtMs, f.State, f.Notes, f.MarkGuards, f.Marks)
	if marksFailed {
		return release(ctx, st, c, c.Timer.DueAtMs, c.Timer.State, f.Notes)
	}
	return out, err
}

func releaseWith(ctx context.Context, st store.NamespaceStore, c Claimed, dueAtMs int64, state []byte, notes []store.Write, guards []store.Precondition, marks []store.Write) (Completion, bool, error) {
	b := store.Batch{Settles: true}
	b.RequireEquals(c.Key, c.Value)
	b.Preconditions = append(b.Preconditions, guards...)
	b.Delete(c.Key)
	b.Put(Key(dueAtMs, c.Timer.Kind, c.Timer.Reference), EncodeIdle(state))
	b.Writes = withNotes(append(b.Writes, marks...), notes)
	res, err := st.Apply(ctx, c.Partition, b)
	if err != nil {
		return 0, false, fmt.Errorf("release timer of %s: %w", c.Partition, err)
	}
	if !res.Committed {
		return LeaseLost, res.Failed > 0, nil
	}
	return Replanned, false, nil
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Store    store.NamespaceStore
	Handlers *Handlers
	// Clock dates each claim's lease and bounds a completion's waits;
	// clock.System when nil.
	Clock clock.Clock
	// Budget bounds each run; its zero fields take their defaults.
	Budget Budget
	// Logger reports the timers deferred or refused; slog.Default when nil.
	Logger *slog.Logger
}

// Runner claims, fires and completes the due timers of a store's
// partitions, with its handlers.
type Runner struct {
	cfg RunnerConfig
}

// NewRunner returns a runner of cfg.
func NewRunner(cfg RunnerConfig) *Runner {
	cfg.Budget = cfg.Budget.withDefaults()
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Runner{cfg: cfg}
}

// RunDue fires the partition's timers due at nowMs, at most
// Budget.MaxTimers of them, one after another. Each is claimed with a lease
// first, so several workers may run the same partition and each timer fires
// once per claim. Each claim's lease starts when it is taken, by the clock,
// not at nowMs: fires take time, and a lease counted from the start of the
// run would already be running out for the later ones. Errors of
// single timers are joined into the returned error after the run; the timer
// stays leased and is tried again when its lease expires.
func (r *Runner) RunDue(ctx context.Context, p store.Partition, nowMs int64) (Report, error) {
	var report Report
	start, end := DueRange(nowMs)
	page, err := r.cfg.Store.Scan(ctx, p, start, end, nil, r.cfg.Budget.MaxTimers)
	if err != nil {
		return report, fmt.Errorf("scan due timers of %s: %w", p, err)
	}
	var errs []error
	for _, e := range page.Entries {
		rep, err := r.RunTimer(ctx, p, nowMs, e)
		report.add(rep)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return report, errors.Join(errs...)
}

// RunTimer claims, fires and completes one due timer row e of a partition,
// as read by a scan of DueRange. A driver that fires several timers at once
// calls it once per row; runMs is the time the row was found due, the least
// time the fire sees.
func (r *Runner) RunTimer(ctx context.Context, p store.Partition, runMs int64, e store.Entry) (Report, error) {
	st, clk, lease, log := r.cfg.Store, r.cfg.Clock, r.cfg.Budget.Lease, r.cfg.Logger
	var report Report
	nowMs := max(clk.Now().UnixMilli(), runMs)
	row, err := DecodeRow(e.Key, e.Value)
	if err != nil {
		log.WarnContext(ctx, "undecodable timer row; deferring", "partition", p.Namespace, "error", err)
		report.Deferred++
		return report, deferRaw(ctx, st, p, e, nowMs+lease.Milliseconds())
	}
	c, ok, err := Claim(ctx, st, p, row, nowMs, lease)
	if err != nil || !ok {
		report.Contended += btoi(err == nil)
		return report, err
	}
	report.Claimed++
	if row.Lease != nil {
		report.TakenOver++
	}
	rep, err := r.fire(ctx, c, nowMs)
	report.add(rep)
	return report, err
}

// RunHeld fires and completes a timer this process already holds, as
// Held reads it from the row its writer left: RunTimer with no claim.
func (r *Runner) RunHeld(ctx context.Context, runMs int64, c Claimed) (Report, error) {
	return r.fire(ctx, c, max(r.cfg.Clock.Now().UnixMilli(), runMs))
}

// fire runs the handler of a claimed timer and completes it.
func (r *Runner) fire(ctx context.Context, c Claimed, nowMs int64) (Report, error) {
	st, clk, lease, log := r.cfg.Store, r.cfg.Clock, r.cfg.Budget.Lease, r.cfg.Logger
	p, row := c.Partition, c.Timer
	var report Report
	h, known := r.cfg.Handlers.Handler(row.Kind)
	if !known {
		// A timer of a kind this process does not know (a newer version
		// wrote it) waits out the lease rather than spinning the driver.
		log.WarnContext(ctx, "timer of unknown kind; deferring", "partition", p.Namespace, "kind", row.Kind)
		report.Deferred++
		return report, nil
	}
	fireCtx, cancel := context.WithTimeout(ctx, lease)
	defer cancel()
	report.Fired++
	fired, err := h.Fire(fireCtx, FireContext{Store: st, Partition: p, NowMs: nowMs}, c.Timer)
	if err != nil {
		report.Deferred++
		if errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
			// The store went away mid-fire. Once it is back, put the timer
			// back due as it was, rather than leave it leased until the
			// lease expires.
			_ = store.RetryUnavailable(ctx, store.UnavailableAttempts, func() error {
				if clk.Now().UnixMilli() >= c.ExpiresAtMs {
					return nil
				}
				_, err := release(ctx, st, c, c.Timer.DueAtMs, c.Timer.State, nil)
				return err
			})
		}
		return report, fmt.Errorf("fire timer %d/%s of %s: %w", row.Kind, row.Reference, p, err)
	}
	if err := ctx.Err(); err != nil {
		// Stopped while firing: write nothing and let the lease expire.
		report.Deferred++
		return report, err
	}
	out, fired, err := complete(ctx, st, clk, c, fired)
	if errors.Is(err, store.ErrCounterRange) || errors.Is(err, store.ErrCorrupt) {
		// The same fire would be refused again, so it is no passing fault:
		// every time is logged, for an operator to repair the row. Only
		// the partition and the timer are named, never a row's contents.
		log.ErrorContext(ctx, "timer completion refused by the store; the timer fires again after its lease",
			"namespace", p.Namespace, "kind", row.Kind, "reference", row.Reference, "error", err)
		report.Refused++
	}
	if err != nil {
		return report, err
	}
	switch {
	case out == Replanned:
		report.Replanned++
	case out == LeaseLost:
		report.LeaseLost++
	case fired.Done:
		report.Done++
	default:
		report.Rescheduled++
	}
	// Only a fire that ended needs it: one rescheduled has its partition
	// scanned anyway. Due by the end of the fire: a handler dates what it
	// writes by a clock read after the fire's start.
	if out != Replanned && out != LeaseLost && fired.Done && putsDue(fired.Batch, max(nowMs, clk.Now().UnixMilli())) {
		report.Woke++
	}
	return report, nil
}

// putsDue reports whether b puts a timer due by nowMs.
func putsDue(b store.Batch, nowMs int64) bool {
	for _, w := range b.Writes {
		if w.Kind != store.Put {
			continue
		}
		if due, _, _, ok := ParseKey(w.Key); ok && due <= nowMs {
			return true
		}
	}
	return false
}

// deferRaw moves a row that does not decode out of the way for one lease,
// keeping its bytes, so an operator can inspect it and the driver does not
// spin on it.
func deferRaw(ctx context.Context, st store.NamespaceStore, p store.Partition, e store.Entry, dueAtMs int64) error {
	due, kind, ref, ok := ParseKey(e.Key)
	if !ok || due >= dueAtMs {
		return nil
	}
	b := store.Batch{Settles: true}
	b.RequireEquals(e.Key, e.Value)
	b.Delete(e.Key)
	b.Put(Key(dueAtMs, kind, ref), e.Value)
	if _, err := st.Apply(ctx, p, b); err != nil {
		return fmt.Errorf("defer corrupt timer of %s: %w", p, err)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
