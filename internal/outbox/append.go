package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/digest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Appender defaults and bounds.
const (
	// DefaultWindow is how long an accepted reservation id answers as a
	// duplicate or conflict.
	DefaultWindow = 24 * time.Hour
	// DefaultMaxEndpoints bounds the endpoints a namespace is given
	// (Admin.MaxEndpoints), so that one outcome fits one batch with room
	// to spare: IngestOps(8) = 72.
	DefaultMaxEndpoints = 8
	// HardMaxEndpoints is the most Admin.MaxEndpoints may be: IngestOps(10)
	// = 88.
	HardMaxEndpoints = 10
	// MaxIngestEndpoints is the most endpoints an outcome is ingested to,
	// one batch's worth: IngestOps(31) = 256. A namespace holding more
	// than its limit, which an earlier version let racing registrations
	// leave and a lowered limit leaves, is ingested into up to this many;
	// past it ingest refuses, while reads and deletes still work. It is
	// the bound of a log row's entries, one per endpoint
	// (schema.MaxLogEntries).
	MaxIngestEndpoints = schema.MaxLogEntries
	// DefaultMaxRetries bounds consecutive batches of one Append that fail
	// their guards because another writer changed the namespace. With the
	// backoff between them, 64 concurrent requests on one namespace all
	// succeed; 128 lose about 1 in 1,000.
	DefaultMaxRetries = 32
	// MaxAppendOutcomes is the most outcomes one Append takes, the API's
	// request limit.
	MaxAppendOutcomes = 100
)

// IngestOps is the worst case operations of an ingest batch holding one
// outcome for e endpoints:
//
//	sequence guard and write                     2
//	seen row guard and write                     2
//	log row, and the guard of an earlier one
//	  under the rid past the window              2
//	seen and log sweep timer creation or guard   2
//	per endpoint: endpoint guard, backlog guard,
//	  its head's creation (guard and write) or
//	  a pending row, backlog write, delivery
//	  timer move (3)                             8
//
// Outcomes packed into one batch share the sequence, sweep and per-endpoint
// operations other than the pending rows; a stream with a head (queue.go)
// has none.
func IngestOps(e int) int { return 8 + 8*e }

// Code is what became of one outcome of an Append.
type Code string

// Codes of Status.
const (
	// Accepted: stored for every endpoint whose filter takes its kind.
	Accepted Code = "accepted"
	// Duplicate: the same outcome was accepted under this reservation id
	// before; nothing changed.
	Duplicate Code = "duplicate"
	// Conflict: a different outcome was accepted under this reservation id;
	// nothing changed.
	Conflict Code = "conflict"
	// NoEndpoint: no endpoint would receive it, so it was refused rather
	// than stored and never sent.
	NoEndpoint Code = "no_endpoint"
	// Invalid: the outcome breaks a rule Detail explains.
	Invalid Code = "invalid"
)

// Status is the answer for one outcome.
type Status struct {
	Code Code
	// Detail explains a refusal to the producer. It names fields and kinds,
	// never payload values or secrets.
	Detail string
	// Seq is an accepted outcome's sequence number in the namespace's log,
	// unless Due: an outcome whose batch is known only from a retry has
	// none.
	Seq uint64
	// Due: the batch that accepted it left a stream due that no fire holds
	// (dueTimers), which only a scan of the namespace finds, and the
	// Appender's Due hook did not take. Otherwise each stream it went to
	// has a timer that will fire for it: leased by a fire, which finds the
	// new rows, launched by the hook, or waiting out a backoff, a pace or
	// a disable. True when not known.
	Due bool
	// Log is an accepted outcome's log row as its batch committed it, when
	// its reservation id was never accepted before: the row has no attempt
	// row either, so a fire in this process need read nothing of it. Nil
	// otherwise.
	Log store.Value
	// Endpoints are the endpoint rows the batch that accepted it guarded:
	// the configuration it is to be sent under. Nil when not known.
	Endpoints *Endpoints
}

// Endpoints are the endpoint rows an ingest batch guarded, as it read them
// and as they stood when it committed.
type Endpoints struct {
	rows []store.Precondition
}

// guardedEndpoints are the endpoint rows b guards.
func guardedEndpoints(b *store.Batch) *Endpoints {
	e := &Endpoints{}
	for _, pc := range b.Preconditions {
		if pc.Kind == store.Equals && len(pc.Key) > 0 && schema.Class(pc.Key[0]) == schema.ClassEndpoint {
			e.rows = append(e.rows, pc)
		}
	}
	return e
}

// Row is endpoint id's row as the batch guarded it; false when it guarded
// none (e is nil, or the endpoint did not stand).
func (e *Endpoints) Row(id string) (store.Value, bool) {
	if e == nil {
		return nil, false
	}
	for _, pc := range e.rows {
		if got, _ := schema.ClassEndpoint.ID(pc.Key); got == id {
			return pc.Value, true
		}
	}
	return nil, false
}

// Ref is the stream row an accepted status names, rid being its outcome's
// reservation id, as a fire in this process takes it (ReadArrived).
func (s Status) Ref(rid string) StreamRef {
	return StreamRef{Seq: s.Seq, RID: rid, Logged: true, Log: s.Log, Fresh: s.Log != nil, Endpoints: s.Endpoints}
}

// Appender accepts outcomes into a namespace's outbox, idempotently: one
// guarded batch writes the outcome's log row at the namespace's next
// sequence number, and for each endpoint whose filter matches its pending
// row at that number, the stream's backlog and its delivery timer, plus the
// sequence and the seen row. Every
// row the plan depends on is guarded, so a concurrent ingest, delivery or
// endpoint change fails the batch and the Appender re-reads and re-plans (an
// endpoint created meanwhile is not seen: the ingest counts as earlier); a
// batch a client retries after a network error fails its own sequence guard
// rather than applying twice. An Appender holds no state of its own and is
// safe for concurrent use.
type Appender struct {
	Store store.NamespaceStore
	Clock clock.Clock
	// Window is the idempotency window, DefaultWindow when zero. The seen
	// sweeper must use the same.
	Window time.Duration
	// MaxRetries bounds consecutive failed batches, DefaultMaxRetries when
	// zero.
	MaxRetries int
	// Wait pauses before re-planning a batch that lost a race, returning
	// early with ctx's error; a timer when nil. Tests make it return at once.
	Wait func(ctx context.Context, d time.Duration) error
	// Due, when set, is told once of each committed batch that left
	// streams due that no fire holds: the delivery timer rows it wrote or
	// depends on, as it left them (dueTimers). It reports whether it took
	// them all, as a driver does that fires them at once with no scan;
	// the batch's statuses are then not Due. It runs on the appending
	// goroutine and must not block. h is what the batch hands the fires
	// of the timers it wrote held (Hold).
	Due func(p store.Partition, timers []store.Entry, h Handed) bool
	// Hold, with Due, is how long a stream's new delivery timer is written
	// held by this process (timers.NewHeld), so that the fire Due
	// launches needs no claim; 0, or Hold nil, writes it idle, for a
	// claim. It is asked once per plan, as a driver reports whether it
	// has a worker free, and must not block. Due must fire or release
	// every held timer it is told of.
	Hold func() time.Duration
	// Tracer traces each batch sent to the store, under the request's
	// span; nil traces none.
	Tracer trace.Tracer
}

// Backoff between retries of a batch that lost a race: every ingest of a
// namespace writes its sequence row, so concurrent requests collide, and
// retrying at once mostly collides again.
const (
	retryBase = 100 * time.Microsecond
	retryMax  = 50 * time.Millisecond
)

// retryDelay is the pause before the n-th consecutive retry (n ≥ 1): an
// exponential step with jitter, so the writers that collided spread out.
func retryDelay(n int) time.Duration {
	d := min(retryBase<<min(n-1, 16), retryMax)
	return d/2 + time.Duration(mrand.Int64N(int64(d/2)+1))
}

func (a *Appender) wait(ctx context.Context, d time.Duration) error {
	if a.Wait != nil {
		return a.Wait(ctx, d)
	}
	return pause(ctx, d)
}

// pause waits d, or until ctx is done.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type appendConfig struct {
	windowMs   int64
	maxRetries int
}

func (a *Appender) config() (appendConfig, error) {
	c := appendConfig{windowMs: DefaultWindow.Milliseconds(), maxRetries: DefaultMaxRetries}
	switch {
	case a.Store == nil || a.Clock == nil:
		return c, errors.New("outbox: appender needs a store and a clock")
	case a.Window < 0 || (a.Window > 0 && a.Window < time.Millisecond):
		return c, fmt.Errorf("outbox: idempotency window %v is not a positive number of milliseconds", a.Window)
	case a.MaxRetries < 0:
		return c, fmt.Errorf("outbox: max retries %d is negative", a.MaxRetries)
	}
	if a.Window > 0 {
		c.windowMs = a.Window.Milliseconds()
	}
	if a.MaxRetries > 0 {
		c.maxRetries = a.MaxRetries
	}
	return c, nil
}

// item is one valid outcome of an Append.
type item struct {
	index   int
	rid     string
	kind    schema.Kind
	record  store.Value
	digest  [32]byte
	seenKey store.Key
	trace   schema.TraceParent
	// to is the one endpoint an event that routes itself goes to
	// (schema.EventType.Routes); empty for an outcome its kind routes.
	to string
}

// Append accepts outcomes into partition p and answers each in order. An
// invalid outcome is answered Invalid and never stored. Each outcome is all
// or nothing; several may share one batch when they fit. A later outcome
// with the reservation id of an earlier one in the same call sees it as
// accepted before.
//
// An error (store failure, corrupt row, too many endpoints, contention)
// returns no statuses. Outcomes answered by batches before the error are
// stored: retrying the whole request is safe, and they then answer
// Duplicate.
func (a *Appender) Append(ctx context.Context, p store.Partition, outcomes []schema.Outcome) ([]Status, error) {
	cfg, err := a.config()
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if len(outcomes) > MaxAppendOutcomes {
		return nil, invalidf("at most %d outcomes may be sent at once", MaxAppendOutcomes)
	}
	pr := prepare(outcomes)
	if _, err := a.run(ctx, p, cfg, pr, nil); err != nil {
		return nil, err
	}
	return pr.statuses, nil
}

// prepared is the outcomes of one Append, validated and encoded: statuses
// holds the answers of the invalid ones, and run fills in the others.
type prepared struct {
	statuses []Status
	items    []*item
}

func prepare(outcomes []schema.Outcome) *prepared {
	pr := &prepared{statuses: make([]Status, len(outcomes)), items: make([]*item, 0, len(outcomes))}
	for i := range outcomes {
		o := &outcomes[i]
		rec, err := schema.EncodeRecord(o)
		if err != nil {
			pr.statuses[i] = Status{Code: Invalid, Detail: err.Error()}
			continue
		}
		it := &item{
			index:   i,
			rid:     o.ReservationID,
			kind:    o.Kind(),
			record:  rec,
			digest:  digest.Sum256(rec),
			seenKey: schema.ClassSeen.Key(o.ReservationID),
			trace:   o.Trace,
		}
		if o.Event != nil && o.Event.Type.Routes() {
			it.to = o.Event.Endpoint
		}
		pr.items = append(pr.items, it)
	}
	return pr
}

// releaseHeld puts back due, idle, each timer b wrote held for this process
// (Appender.Hold), in case b committed though its Apply did not say so: an
// error (a lost reply, too few replicas) or a guard failure of a resent
// run whose first run committed. Nobody would fire it until its lease
// ran out; released, it is due now, for the next plan of p to hand to Due,
// or for any driver's poll. Each release is guarded by the row as b wrote
// it, so it writes nothing where b did not commit. A release that fails
// leaves the timer to its lease.
func (a *Appender) releaseHeld(ctx context.Context, p store.Partition, b *store.Batch) {
	if a.Hold == nil {
		return
	}
	for _, w := range b.Writes {
		if w.Kind != store.Put {
			continue
		}
		if c, ok := timers.Held(p, store.Entry{Key: w.Key, Value: w.Value}); ok {
			_ = timers.ReleaseDetached(ctx, a.Store, c)
		}
	}
}

// freshRows is the rows of a committed plan's accepted items, nil unless
// each is fresh; decided[i] answers items[i].
func freshRows(items []*item, decided []decision) []StreamRef {
	var rows []StreamRef
	for i, d := range decided {
		if d.status.Code != Accepted {
			continue
		}
		if d.log == nil {
			return nil
		}
		rows = append(rows, StreamRef{Seq: d.status.Seq, RID: items[i].rid, Logged: true, Log: d.log, Fresh: true})
	}
	return rows
}

// MaxSnapshotReuse bounds how long after its read a snapshot plans the
// batches of later Appends (run with a snapshot). Every row a plan depends
// on is guarded, so the bound is not for safety: it keeps the snapshots a
// Coalescer holds to the partitions of the last minute, and a namespace
// taking an outcome every few seconds reads once in a minute rather than
// with every outcome.
const MaxSnapshotReuse = time.Minute

// run stores pr's items and sets their statuses, and returns the snapshot
// as its last batch left it: what the next run on p may plan from without
// reading.
//
// snap, when not nil, is such a snapshot of an earlier run. Every row a
// plan depends on is guarded, so planning from it is as safe as from a
// fresh read: what changed since (an endpoint created, which fences the
// sequence; an endpoint changed; a backlog or timer a fire changed) fails
// the batch, and run reads again. The items' seen rows were never read and
// plan as absent, guarded absent: a reservation id seen before fails the
// batch, and the read that follows answers it duplicate or conflict. A
// batch that fails on a reused snapshot is read again at once, neither
// waited for nor counted as contention. A snapshot read MaxSnapshotReuse
// ago or more is not reused.
func (a *Appender) run(ctx context.Context, p store.Partition, cfg appendConfig, pr *prepared, snap *snapshot) (*snapshot, error) {
	items := pr.items
	k := &known{sent: map[int]store.Value{}}
	var writer [8]byte
	if _, err := rand.Read(writer[:]); err != nil {
		return nil, fmt.Errorf("append to %s: %w", p, err)
	}
	reused := false
	if snap != nil {
		nowMs := a.Clock.Now().UnixMilli()
		if nowMs-snap.readMs < MaxSnapshotReuse.Milliseconds() && nowMs >= snap.readMs {
			snap.reuse(nowMs, writer)
			reused = true
		} else {
			snap = nil
		}
	}
	failed := 0
	for at := 0; at < len(items); {
		if snap == nil {
			var err error
			if snap, err = a.read(ctx, p, items[at:], cfg); err != nil {
				return nil, err
			}
			snap.writer = writer
			reused = false
		}
		snap.hold = 0
		if a.Due != nil && a.Hold != nil {
			snap.hold = a.Hold()
		}
		pl, err := snap.plan(items[at:], k, cfg)
		if err != nil {
			return nil, fmt.Errorf("plan ingest of %s: %w", p, err)
		}
		if pl.accepted > 0 {
			span := a.startBatch(ctx, p, &pl.batch, pl.accepted, failed)
			res, err := a.Store.Apply(ctx, p, pl.batch)
			endBatch(span, res, err)
			if err != nil || !res.Committed {
				a.releaseHeld(ctx, p, &pl.batch)
			}
			if err != nil {
				return nil, fmt.Errorf("apply ingest batch of %s: %w", p, err)
			}
			if !res.Committed {
				k.remember(items[at:], pl)
				snap = nil
				if reused {
					continue
				}
				failed++
				if failed > cfg.maxRetries {
					return nil, fmt.Errorf("%w %s: %d batches in a row failed their guards", ErrContended, p, failed)
				}
				if err := a.wait(ctx, retryDelay(failed)); err != nil {
					return nil, fmt.Errorf("append to %s: %w", p, err)
				}
				continue
			}
			failed = 0
			left := dueTimers(&pl.batch, snap.nowMs)
			due := len(left) > 0 && (a.Due == nil || !a.Due(p, left, Handed{
				Rows:    freshRows(items[at:], pl.decided),
				Streams: streamsRead(&pl.batch, res.Rows),
			}))
			if !snap.fold(pl.batch.Writes) {
				// A row this batch wrote does not decode: the next plan
				// reads it.
				snap = nil
			}
			eps := guardedEndpoints(&pl.batch)
			for i := range pl.decided {
				if st := &pl.decided[i].status; st.Code == Accepted && !st.Due {
					st.Due, st.Log, st.Endpoints = due, pl.decided[i].log, eps
				}
			}
		}
		for _, d := range pl.decided {
			pr.statuses[d.index] = d.status
		}
		at += pl.consumed
	}
	return snap, nil
}
