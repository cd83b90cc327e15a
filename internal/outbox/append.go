package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/zeebo/blake3"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Appender defaults and bounds.
const (
	// DefaultWindow is how long an accepted reservation id answers as a
	// duplicate or conflict.
	DefaultWindow = 24 * time.Hour
	// DefaultMaxEndpoints bounds the endpoints of a namespace, so that one
	// outcome always fits one batch: IngestOps(8) = 64.
	DefaultMaxEndpoints = 8
	// HardMaxEndpoints is the most MaxEndpoints may be: IngestOps(10) = 78.
	HardMaxEndpoints = 10
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
//	seen and log sweep timer creation            2
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
	// (makesDue), which only a scan of the namespace finds. Otherwise each
	// stream it went to has a timer that will fire for it: leased by a
	// fire, which finds the new rows, or waiting out a backoff, a pace or
	// a disable. True when not known.
	Due bool
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
	// MaxEndpoints refuses a namespace with more endpoints,
	// DefaultMaxEndpoints when zero, at most HardMaxEndpoints.
	MaxEndpoints int
	// MaxRetries bounds consecutive failed batches, DefaultMaxRetries when
	// zero.
	MaxRetries int
	// Wait pauses before re-planning a batch that lost a race, returning
	// early with ctx's error; a timer when nil. Tests make it return at once.
	Wait func(ctx context.Context, d time.Duration) error
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
	windowMs     int64
	maxEndpoints int
	maxRetries   int
}

func (a *Appender) config() (appendConfig, error) {
	c := appendConfig{windowMs: DefaultWindow.Milliseconds(), maxEndpoints: DefaultMaxEndpoints, maxRetries: DefaultMaxRetries}
	switch {
	case a.Store == nil || a.Clock == nil:
		return c, errors.New("outbox: appender needs a store and a clock")
	case a.Window < 0 || (a.Window > 0 && a.Window < time.Millisecond):
		return c, fmt.Errorf("outbox: idempotency window %v is not a positive number of milliseconds", a.Window)
	case a.MaxEndpoints < 0 || a.MaxEndpoints > HardMaxEndpoints:
		return c, fmt.Errorf("outbox: max endpoints %d out of range 1..%d", a.MaxEndpoints, HardMaxEndpoints)
	case a.MaxRetries < 0:
		return c, fmt.Errorf("outbox: max retries %d is negative", a.MaxRetries)
	}
	if a.Window > 0 {
		c.windowMs = a.Window.Milliseconds()
	}
	if a.MaxEndpoints > 0 {
		c.maxEndpoints = a.MaxEndpoints
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
	kind    Kind
	record  store.Value
	digest  [32]byte
	seenKey store.Key
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
func (a *Appender) Append(ctx context.Context, p store.Partition, outcomes []Outcome) ([]Status, error) {
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

func prepare(outcomes []Outcome) *prepared {
	pr := &prepared{statuses: make([]Status, len(outcomes)), items: make([]*item, 0, len(outcomes))}
	for i := range outcomes {
		o := &outcomes[i]
		if err := o.Validate(); err != nil {
			pr.statuses[i] = Status{Code: Invalid, Detail: err.Error()}
			continue
		}
		rec := encodeRecord(o)
		pr.items = append(pr.items, &item{
			index:   i,
			rid:     o.ReservationID,
			kind:    o.Kind(),
			record:  rec,
			digest:  blake3.Sum256(rec),
			seenKey: tagged(ClassSeen, o.ReservationID),
		})
	}
	return pr
}

// MaxSnapshotReuse bounds how long after its read a snapshot plans the
// batches of later Appends (run with a snapshot).
const MaxSnapshotReuse = time.Second

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
// ago or more is not reused, so what no guard covers (a sweep timer) is
// never older than that.
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
		pl, err := snap.plan(items[at:], k, cfg)
		if err != nil {
			return nil, fmt.Errorf("plan ingest of %s: %w", p, err)
		}
		if pl.accepted > 0 {
			res, err := a.Store.Apply(ctx, p, pl.batch)
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
			snap.observe(pl.batch.Writes)
			due := makesDue(&pl.batch, snap.nowMs)
			for i := range pl.decided {
				if st := &pl.decided[i].status; st.Code == Accepted && !st.Due {
					st.Due = due
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

// makesDue reports whether an ingest batch leaves a stream due that no
// fire holds: it writes a delivery timer (a new one, or one pulled
// forward), or depends on an idle one already due by nowMs. A stream whose
// timer is leased, or waits past nowMs, needs no scan for these rows.
func makesDue(b *store.Batch, nowMs int64) bool {
	for _, w := range b.Writes {
		if w.Kind != store.Put {
			continue
		}
		if _, kind, _, ok := timers.ParseKey(w.Key); ok && kind == timers.KindOutcomeDelivery {
			return true
		}
	}
	for _, pc := range b.Preconditions {
		if pc.Kind != store.Equals {
			continue
		}
		if due, kind, _, ok := timers.ParseKey(pc.Key); ok && kind == timers.KindOutcomeDelivery && due <= nowMs {
			if row, err := timers.DecodeRow(pc.Key, pc.Value); err != nil || row.Lease == nil {
				return true
			}
		}
	}
	return false
}

// known is what the failed batches of one Append taught it.
type known struct {
	// sent maps an item (its index in the request) to the seen row a failed
	// batch wrote for it. A client resends a script whose reply was lost,
	// and the resent run fails the guard its first run falsified; finding
	// that exact row (digest and acceptance time) on the next read means the
	// first run committed. Keyed by item, not by reservation id: a later
	// item of the same request under the same id is another outcome.
	sent map[int]store.Value
}

// remember notes the seen rows of the items a failed plan would have
// accepted.
func (k *known) remember(items []*item, pl plan) {
	seen := map[string]store.Value{}
	for _, w := range pl.batch.Writes {
		if pk, ok := Parse(w.Key); ok && pk.Class == ClassSeen && w.Kind == store.Put {
			seen[pk.RID] = w.Value
		}
	}
	for j, d := range pl.decided {
		// Only items this batch wrote: one answered from an earlier lost
		// reply keeps what it was remembered by.
		if v, ok := seen[items[j].rid]; ok && d.status.Code == Accepted {
			k.sent[d.index] = v
		}
	}
}

type decision struct {
	index  int
	status Status
}

// plan is one batch and the answers it stands for.
type plan struct {
	batch store.Batch
	// decided answers items[:consumed]; accepted of them are in the batch.
	decided  []decision
	consumed int
	accepted int
}

// plan packs the leading items into one batch while it fits MaxBatchOps.
// Items that need no write (duplicate, conflict, no endpoint) are answered
// from the snapshot. The pack stops before a rid already in it, so that item
// sees the first one's seen row.
func (s *snapshot) plan(items []*item, k *known, cfg appendConfig) (plan, error) {
	var pl plan
	var pack []*item
	rids := map[string]bool{}
	// bound is at least the operations of the pack's batch, kept as items
	// join, so that the batch is built once rather than once per item: the
	// sequence guard and write, the sweep timer, a guard per endpoint, and
	// per endpoint used its backlog guard and write, up to three timer
	// operations and its head's creation; per item its seen guard and
	// write, its log row and the guard of an earlier one, and a pending
	// row per endpoint taking it.
	bound := 4 + len(s.endpoints)
	used := make([]bool, len(s.endpoints))
	for j, it := range items {
		if rids[it.rid] {
			break
		}
		st, done, err := s.decide(it, k, cfg)
		if err != nil {
			return plan{}, err
		}
		if !done {
			cand := append(pack[:len(pack):len(pack)], it)
			grow := 4
			for _, i := range s.matching(it.kind) {
				grow++
				if !used[i] {
					grow += 7
				}
			}
			exact := -1
			if bound+grow > store.MaxBatchOps {
				// Near the limit the bound is too coarse: count exactly,
				// and go on from the exact count, or every item after
				// would build the whole batch again.
				b, err := s.build(cand, cfg)
				if err != nil {
					return plan{}, err
				}
				if b.Ops() > store.MaxBatchOps {
					if len(pack) == 0 {
						return plan{}, fmt.Errorf("one outcome needs %d batch operations", b.Ops())
					}
					break
				}
				exact = b.Ops()
			}
			for _, i := range s.matching(it.kind) {
				used[i] = true
			}
			pack, bound = cand, bound+grow
			if exact >= 0 {
				bound = exact
			}
			rids[it.rid] = true
			pl.accepted++
			st = Status{Code: Accepted, Seq: s.next + uint64(len(pack)-1)}
		}
		pl.decided = append(pl.decided, decision{index: it.index, status: st})
		pl.consumed = j + 1
	}
	if len(pack) > 0 {
		var err error
		if pl.batch, err = s.build(pack, cfg); err != nil {
			return plan{}, err
		}
	}
	return pl, nil
}

// decide answers an item that needs no write; done is false for an item to
// accept. A seen row inside the window answers first; then the filters; then
// an outcome of the rid past the window still waiting on a stream (its log
// row has a pending entry), which is never accepted again beside it: one
// pending row per stream and rid, or two deliveries would share one id.
func (s *snapshot) decide(it *item, k *known, cfg appendConfig) (st Status, done bool, err error) {
	if sent, r := k.sent[it.index], s.seen[it.rid]; sent != nil && r.found && bytes.Equal(r.raw, sent) {
		return Status{Code: Accepted, Due: true}, true, nil
	}
	if r := s.seen[it.rid]; r.found {
		seen, err := DecodeSeen(r.raw)
		if err != nil {
			return Status{}, false, fmt.Errorf("seen row of %s: %w", it.rid, err)
		}
		if s.nowMs-seen.AcceptedMs < cfg.windowMs {
			if seen.Matches(it.digest) {
				return Status{Code: Duplicate}, true, nil
			}
			return Status{Code: Conflict, Detail: "a different outcome was already accepted under this reservation_id"}, true, nil
		}
	}
	eps := s.matching(it.kind)
	if len(eps) == 0 {
		return Status{Code: NoEndpoint, Detail: fmt.Sprintf("no endpoint of this namespace receives %s outcomes", it.kind)}, true, nil
	}
	if old, ok := s.earlier(it.rid); ok && slices.ContainsFunc(old.row.Entries, func(e LogEntry) bool { return e.State == EntryPending }) {
		if bytes.Equal(old.row.Record, it.record) {
			return Status{Code: Duplicate}, true, nil
		}
		return Status{Code: Conflict, Detail: "a different outcome under this reservation_id is still waiting for delivery"}, true, nil
	}
	return Status{}, false, nil
}

// build is the batch accepting items, all known to be new. A backlog it
// would take past store.MaxCounter is refused (ErrBacklogFull): the store's
// adds refuse a counter beyond it, so no acknowledgement could reduce it.
func (s *snapshot) build(items []*item, cfg appendConfig) (store.Batch, error) {
	// Sized for streams with heads, so a combined batch of 100 outcomes
	// does not grow its slices a dozen times.
	b := store.Batch{
		Preconditions: make([]store.Precondition, 0, 1+2*len(s.endpoints)+len(items)),
		Writes:        make([]store.Write, 0, 2+2*len(items)+4*len(s.endpoints)),
	}
	matching := make([][]int, len(items))
	added := make([]Backlog, len(s.endpoints))
	used := make([]bool, len(s.endpoints))
	for j, it := range items {
		matching[j] = s.matching(it.kind)
		for _, i := range matching[j] {
			used[i] = true
			added[i].Rows++
			added[i].Bytes += uint64(len(it.record))
		}
	}
	// Preconditions: every row the plan read and depends on, as read.
	// Every endpoint read is guarded, used or not: a filter widened or an
	// endpoint enabled meanwhile changes who must get these outcomes. An
	// endpoint created meanwhile is not seen, as if this ingest came first.
	b.Guard(SequenceKey(), s.seq.raw, s.seq.found)
	for i, ep := range s.endpoints {
		b.RequireEquals(ep.key, ep.raw)
		if !used[i] {
			continue
		}
		bl := s.backlogs[ep.id]
		b.Guard(tagged(ClassBacklog, ep.id), bl.raw, bl.found)
	}
	for _, it := range items {
		r := s.seen[it.rid]
		b.Guard(it.seenKey, r.raw, r.found)
		if old, ok := s.earlier(it.rid); ok {
			// Accepted again past the window because nothing waits on the
			// earlier one: a resend of it meanwhile must fail this batch.
			b.RequireEquals(LogKey(old.seq), old.raw)
		}
	}
	// Writes. A stream with a head reads these rows from the log; one
	// with nothing pending starts its head at its first; one whose backlog
	// predates heads gets pending rows until it empties.
	seq := s.next
	headed := make([]bool, len(s.endpoints))
	for i, ep := range s.endpoints {
		headed[i] = s.heads[ep.id]
	}
	for j, it := range items {
		l := LogRow{RID: it.rid, AcceptedMs: s.nowMs, Record: it.record, Entries: make([]LogEntry, len(matching[j]))}
		for n, i := range matching[j] {
			id := s.endpoints[i].id
			l.Entries[n] = LogEntry{Endpoint: id, State: EntryPending}
			switch {
			case headed[i]:
			case s.backlogs[id].backlog.Rows == 0:
				b.RequireAbsent(tagged(ClassHead, id))
				b.Put(tagged(ClassHead, id), EncodeHead(seq))
				headed[i] = true
			default:
				b.Put(pendingKey(id, seq, it.rid), store.Value{})
			}
		}
		v, err := EncodeLog(l)
		if err != nil {
			return store.Batch{}, err
		}
		b.Put(LogKey(seq), v)
		seen, _ := EncodeSeen(Seen{Digest: it.digest, Short: true, AcceptedMs: s.nowMs, Writer: s.writer, Logged: true, Seq: seq})
		b.Put(it.seenKey, seen)
		seq++
	}
	b.Put(SequenceKey(), EncodeSequence(seq))
	for i, ep := range s.endpoints {
		if !used[i] {
			continue
		}
		bl := s.backlogs[ep.id].backlog
		if bl.Rows > store.MaxCounter-added[i].Rows || bl.Bytes > store.MaxCounter-added[i].Bytes {
			return store.Batch{}, fmt.Errorf("%w: endpoint %s holds %d rows of %d bytes", ErrBacklogFull, ep.id, bl.Rows, bl.Bytes)
		}
		b.Put(tagged(ClassBacklog, ep.id), EncodeBacklog(Backlog{Rows: bl.Rows + added[i].Rows, Bytes: bl.Bytes + added[i].Bytes}))
	}
	for i := range s.endpoints {
		if used[i] {
			s.planDeliveryTimer(&b, i)
		}
	}
	if !s.hasTimer(timers.KindSeenSweep) {
		b.Put(sweepTimerKey(s.nowMs+cfg.windowMs), sweepTimerValue())
	}
	if !s.hasTimer(timers.KindLogSweep) {
		b.Put(logSweepTimerKey(s.nowMs+LogSweepFirst.Milliseconds()), sweepTimerValue())
	}
	return b, nil
}
