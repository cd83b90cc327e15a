package delivery

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Defaults and bounds of one fire.
const (
	// DefaultMaxRows is the pending rows one fire examines: as many as
	// one completion acknowledges, since each fire's claim, reads and
	// completion cost the same whatever its rows.
	DefaultMaxRows = MaxRowsCeiling
	// MaxRowsCeiling bounds MaxRows so that acknowledging every row of a
	// page, with the timer's completion, fits one batch (store.MaxBatchOps).
	MaxRowsCeiling = outbox.MaxAcksPerBatch
	// DefaultSinkTimeout bounds one sink call.
	DefaultSinkTimeout = 5 * time.Second
	// MaxBackoff caps the exponential part of a failing stream's backoff.
	MaxBackoff = 15 * time.Minute
)

// Handler is the outcome-delivery timer handler (timers.KindOutcomeDelivery):
// one fire delivers a page of one stream's pending rows to its endpoint and
// plans their acknowledgement. The sink deduplicates by reservation id: a row
// may be delivered more than once, never lost.
//
// Its rules, each with the reason for it and the function that keeps it,
// are the table "One fire of a stream" in docs/design.md, the one place
// they are written (a test checks that every function it names exists).
type Handler struct {
	Sink Sink
	// Clock bounds the fire and dates failed attempts; clock.System when nil.
	Clock clock.Clock
	// SinkTimeout bounds one call to an endpoint without a timeout_ms of
	// its own; DefaultSinkTimeout when zero. A call cut by its timeout
	// counts as failed.
	SinkTimeout time.Duration
	// FireBudget bounds when a fire launches calls, twice SinkTimeout when
	// zero. Once spent the fire makes no further call and reschedules now,
	// so a slow but successful endpoint cannot hold a worker. With
	// SinkTimeout it makes the fire's bound (fireBound): a call of an
	// endpoint's own timeout T is launched only while the fire has T left
	// of that bound, so no fire outlasts it.
	FireBudget time.Duration
	// MaxRows is the rows examined per fire, DefaultMaxRows when zero,
	// clamped to 1..MaxRowsCeiling.
	MaxRows int
	// Retention keeps a delivered row's log entry and attempts for the
	// outcome's history; 0 deletes them at acknowledgement. The log sweep
	// (outbox.LogSweeper) must use the same.
	Retention time.Duration
	// DisableAfter disables an endpoint that has delivered nothing for this
	// long while its calls failed (reason "failing", rows kept); 0 never
	// does. Relay's setting defaults it to DefaultDisableAfter.
	DisableAfter time.Duration
	// Events appends the operator events (endpoint.failing, .disabled,
	// .recovered, .gone) to the namespace's outbox; when nil they are only
	// logged and counted.
	Events EventAppender
	// Logger is slog.Default when nil.
	Logger *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Linger keeps a fire that delivered every row of its stream waiting
	// this long (at most MaxLinger) for the next outcome to arrive on its
	// partition (Arrivals), to deliver it under the same lease and
	// acknowledge it with the rest, for at most lingerFor from the fire's
	// start and up to its page of rows. 0 never lingers.
	Linger time.Duration
	// Arrivals tells lingering fires of their partition's arrivals; none
	// linger when nil.
	Arrivals *Arrivals
	// Tracer traces each fire that calls its endpoint and each call, in
	// the trace its outcome was accepted under; nil traces nothing.
	Tracer trace.Tracer

	// deadline bounds one call; context.WithTimeout unless a test sets it.
	deadline func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
	// collected, when a test sets it, sees each call's result as the fire
	// takes it in.
	collected func(rid string, err error)
	// endpoints are the streams' endpoints as last decoded.
	endpoints endpointCache
	// ends tells the streams that ended a moment ago, whose timers stay.
	ends ends
}

var _ timers.Handler = (*Handler)(nil)

// Kind is timers.KindOutcomeDelivery.
func (*Handler) Kind() timers.Kind { return timers.KindOutcomeDelivery }

func (h *Handler) clock() clock.Clock {
	if h.Clock == nil {
		return clock.System{}
	}
	return h.Clock
}

func (h *Handler) log() *slog.Logger {
	if h.Logger == nil {
		return slog.Default()
	}
	return h.Logger
}

func (h *Handler) sinkTimeout() time.Duration {
	if h.SinkTimeout <= 0 {
		return DefaultSinkTimeout
	}
	return h.SinkTimeout
}

func (h *Handler) fireBudget() time.Duration {
	if h.FireBudget <= 0 {
		return 2 * h.sinkTimeout()
	}
	return h.FireBudget
}

// fireBound is the longest a fire's calls last: its budget and one last
// call of SinkTimeout, 15 s by default. A lease shorter than a fire's bound
// would let another driver take the stream over mid-fire (see MinLease).
func (h *Handler) fireBound() time.Duration {
	return h.fireBudget() + h.sinkTimeout()
}

// callTimeout bounds each call to the endpoint: its own timeout_ms, else
// SinkTimeout. It is kept to at most two thirds of the fire's bound (10 s
// by default, schema.MaxTimeoutMs), so a fire has at least a third of its
// bound to launch calls in.
func (h *Handler) callTimeout(ep *schema.Endpoint) time.Duration {
	if ep.TimeoutMs <= 0 {
		return h.sinkTimeout()
	}
	return min(time.Duration(ep.TimeoutMs)*time.Millisecond, h.fireBound()*2/3)
}

func (h *Handler) maxRows() int {
	if h.MaxRows == 0 {
		return DefaultMaxRows
	}
	return min(max(h.MaxRows, 1), MaxRowsCeiling)
}

func (h *Handler) withDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if h.deadline != nil {
		return h.deadline(ctx, d)
	}
	return context.WithTimeout(ctx, d)
}

// stream is what one fire knows of its stream.
type stream struct {
	ns, endpoint string
	backlogKey   store.Key
	endpointKey  store.Key
	headKey      store.Key
	// head is the stream's head as read at the start of the fire.
	head schema.Head
	// ep is the endpoint as read at the start of the fire, or with its
	// queue, and epRaw its row.
	ep    schema.Endpoint
	epRaw store.Value
	// fire is the fire's span, nil when untraced.
	fire *fireTrace
}

// pendingRow is one examined row of the page.
type pendingRow struct {
	index   int // in the page
	seq     uint64
	rid     string
	rec     outbox.StreamRecord
	outcome schema.Outcome
	// done is how its delivering call went, once acknowledged.
	done outbox.Done
	// attempts are the row's recorded attempts, empty when none or
	// unreadable.
	attempts schema.Attempts
}

// failed is a call that did not deliver its row.
type failed struct {
	row *pendingRow
	err *Error
	// took and ended time the call, by the handler's clock.
	took  time.Duration
	ended time.Time
}

// Fire delivers one page of the stream named by the timer's reference,
// and keeps its endpoint's failing mark (marked).
func (h *Handler) Fire(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	fired, err := h.fire(ctx, fc, t)
	if err != nil {
		return fired, err
	}
	return h.marked(ctx, fc, t, fired)
}

// marked adds to a fire's plan the failing mark of its stream when its
// failed fires cross zero (outbox.MarkStream), judged by the endpoint row
// read afresh, which the plan then guards: a transition is rare, and a
// fresh read keeps an edit of the endpoint meanwhile from failing every
// re-plan. Its re-plans are marked the same way.
func (h *Handler) marked(ctx context.Context, fc timers.FireContext, t timers.DueTimer, fired timers.Fired) (timers.Fired, error) {
	if replan := fired.Replan; replan != nil {
		fired.Replan = func(ctx context.Context) (timers.Fired, error) {
			next, err := replan(ctx)
			if err != nil {
				return next, err
			}
			return h.mark(ctx, fc, t, next)
		}
	}
	return h.mark(ctx, fc, t, fired)
}

func (h *Handler) mark(ctx context.Context, fc timers.FireContext, t timers.DueTimer, fired timers.Fired) (timers.Fired, error) {
	was := outbox.StateFailing(t.State)
	now := (!fired.Done || fired.Stay) && outbox.StateFailing(fired.State)
	if was == now {
		return fired, nil
	}
	key, err := schema.EndpointKey(t.Reference)
	if err != nil {
		return fired, err
	}
	for _, w := range fired.Batch.Writes {
		if w.Key == key {
			// The fire disables the endpoint, and marks it so itself.
			return fired, nil
		}
	}
	v, found, err := fc.Store.Get(ctx, fc.Partition, key)
	if err != nil {
		return timers.Fired{}, fmt.Errorf("read endpoint %s/%s: %w", fc.Partition.Namespace, t.Reference, err)
	}
	var b store.Batch
	outbox.MarkStream(&b, t.Reference, key, v, found, was, now)
	fired.Marks, fired.MarkGuards = b.Writes, b.Preconditions
	return fired, nil
}

func (h *Handler) fire(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	clk := h.clock()
	started := clk.Now()
	s := stream{ns: fc.Partition.Namespace, endpoint: t.Reference}
	var err error
	if s.backlogKey, err = schema.BacklogKey(s.endpoint); err != nil {
		return timers.Fired{}, fmt.Errorf("delivery timer: %w", err)
	}
	s.endpointKey, _ = schema.EndpointKey(s.endpoint)
	s.headKey, _ = schema.HeadKey(s.endpoint)
	var watch *lingerWatch
	if h.Linger > 0 {
		// From before the first read, so an arrival after it is not missed.
		if watch = h.Arrivals.watch(fc.Partition); watch != nil {
			defer watch.release()
		}
	}
	head, err := h.readStream(ctx, fc, &s)
	if err != nil {
		return timers.Fired{}, fmt.Errorf("read stream %s/%s: %w", s.ns, s.endpoint, err)
	}
	if s.head, err = schema.HeadOf(head[2]); err != nil {
		// A head that does not decode is read as none: the stream's
		// pending rows still go, and the log's wait for a repair.
		h.log().ErrorContext(ctx, "delivery stream's head does not decode; reading its pending rows only",
			"namespace", s.ns, "endpoint", s.endpoint, "error", err)
		s.head = schema.Head{}
	}
	acks, err := outbox.NewAcks(s.endpoint, head[0].Value, head[0].Found)
	if err != nil {
		return timers.Fired{}, err
	}
	state, err := schema.DecodeDeliveryState(t.State)
	if err != nil {
		// The state is only where to resume and how long to back off:
		// starting afresh from the head loses nothing, while refusing to
		// fire would hold every row of the stream.
		h.log().WarnContext(ctx, "undecodable delivery timer state; starting from the head",
			"namespace", s.ns, "endpoint", s.endpoint, "error", err)
		state = schema.DeliveryState{}
	}
	if state.Health != nil && len(state.Health.Pending) > 0 {
		if flushed, ended, err := h.flush(ctx, fc, t, &s, head[1], &state); ended || err != nil {
			return flushed, err
		}
	}
	if acks.Backlog().Rows == 0 {
		var b store.Batch
		acks.Plan(&b)
		if hl := state.Health; hl != nil && hl.NotifiedMs != 0 && h.Events != nil {
			// Kept until an hour after its last event, so the next
			// failure within it is not told again (FailingEventEvery).
			if due := hl.NotifiedMs + FailingEventEvery.Milliseconds(); due > max(fc.NowMs, h.clock().Now().UnixMilli()) {
				value, err := schema.EncodeDeliveryState(schema.DeliveryState{Throttle: state.Throttle, Health: hl})
				if err != nil {
					return timers.Fired{}, err
				}
				return timers.Fired{DueAtMs: max(due, t.DueAtMs), State: value, Batch: b}, nil
			}
		}
		return timers.Fired{Done: true, Batch: b}, nil
	}
	if parked, ok, err := h.park(state, &s, head[1]); ok || err != nil {
		return parked, err
	}
	if b := acks.Backlog(); b.Rows > store.MaxCounter || b.Bytes > store.MaxCounter {
		return h.stall(ctx, fc, t, s, state)
	}

	page, rows, handed := h.handedPage(ctx, fc, &s, t, acks.Backlog())
	var after *store.Cursor
	if !handed {
		var epRow store.Row
		if page, after, epRow, err = h.scan(ctx, fc, &s, state.Cursor); err != nil {
			return timers.Fired{}, err
		}
		if !epRow.Found || !bytes.Equal(epRow.Value, s.epRaw) {
			// Edited between the reads: the page may hold rows accepted
			// after the edit, which go as the edit says, or wait while
			// it disables the endpoint.
			if parked, ok, err := h.park(state, &s, epRow); ok || err != nil {
				return parked, err
			}
		}
		if rows, err = h.prepare(ctx, fc, &s, page); err != nil {
			return timers.Fired{}, err
		}
	}
	lim := startLimits(state, &s.ep, started.UnixMilli())
	if len(page.Rows) > 0 {
		s.fire = h.startFire(ctx, &s, len(page.Rows))
	}
	run := h.call(ctx, &s, page, rows, started, &lim)
	if err := ctx.Err(); err != nil {
		// Stopped (the driver stopping, or the lease running out): write
		// nothing; the lease expires.
		s.fire.end(&run)
		return timers.Fired{}, err
	}

	f := &firing{fc: fc, timer: t, stream: s, state: state, page: page, rows: rows, after: after, calls: run, limits: lim,
		endedLately: h.ends.recent(streamID{s.ns, s.endpoint}, started.UnixMilli())}
	err = h.linger(ctx, watch, f, started)
	s.fire.end(&f.calls)
	if err != nil {
		return timers.Fired{}, err
	}
	// A fire handed its whole stream by the ingest that created its timer
	// plans against the backlog that ingest left, with no read after its
	// calls, when no later outcome arrived in this process: at low rates
	// nothing else touches the stream between the ingest and the
	// completion. An outcome from another process fails the completion's
	// guard, and the re-plan reads.
	f.handedBacklog = handed && len(f.page.Rows) == len(page.Rows) && watch.nothingAfter(f.page.LogEnd)
	fired, err := h.plan(ctx, f, head[0], false)
	if err != nil {
		return timers.Fired{}, err
	}
	// A plan that ends the stream is guarded by the backlog as read after
	// the calls, and a disable by the endpoint row: an append or an
	// operator's edit landing before it applies fails that guard. The
	// re-plan reads both again, rather than leave the timer to a next fire
	// that would send every row of this one again.
	fired.Replan = func(ctx context.Context) (timers.Fired, error) {
		return h.plan(ctx, f, store.Row{}, true)
	}
	return fired, nil
}

// stall backs off, sending nothing, a stream whose backlog counts beyond
// store.MaxCounter: the store refuses every reduction of such a row, so the
// acknowledgement of any row sent would be refused and the rows sent again
// at every fire. Ingest never writes such a count; only a damaged row holds
// one, and an operator must repair it. Each fire logs it at Error, and the
// wait grows as a failing endpoint's does.
func (h *Handler) stall(ctx context.Context, fc timers.FireContext, t timers.DueTimer, s stream, state schema.DeliveryState) (timers.Fired, error) {
	h.log().ErrorContext(ctx, "delivery stream's backlog counts beyond what the store can reduce; stalling the stream until the backlog row is repaired",
		"namespace", s.ns, "endpoint", s.endpoint)
	h.Metrics.stalled()
	next := state
	if next.FailedFires < ^uint32(0) {
		next.FailedFires++
	}
	value, err := schema.EncodeDeliveryState(next)
	if err != nil {
		return timers.Fired{}, err
	}
	nowMs := max(fc.NowMs, h.clock().Now().UnixMilli())
	return timers.Fired{
		DueAtMs: max(nowMs+backoffMs(s.ns, s.endpoint, state.FailedFires), t.DueAtMs),
		State:   value,
		Batch:   store.Batch{Settles: true},
		Backoff: true,
	}, nil
}

// park parks the timer of a stream whose endpoint is disabled or missing:
// its rows stay, and nothing fires until the endpoint is enabled (which pulls
// the timer). The park is guarded by the endpoint row as read, so an enable
// racing it releases the timer to fire at once instead.
func (h *Handler) park(state schema.DeliveryState, s *stream, row store.Row) (timers.Fired, bool, error) {
	// Re-encoded, so a parked timer always holds a state ingest can read
	// when it pulls the timer.
	value, err := schema.EncodeDeliveryState(state)
	if err != nil {
		return timers.Fired{}, false, err
	}
	var b store.Batch
	b.Settles = true
	if !row.Found {
		h.log().Warn("delivery stream has rows but no endpoint; parked", "namespace", s.ns, "endpoint", s.endpoint)
		b.RequireAbsent(s.endpointKey)
		return timers.Fired{DueAtMs: timers.NeverMs, State: value, Batch: b}, true, nil
	}
	ep, err := h.endpoints.decode(s.ns, s.endpoint, row.Value)
	if err != nil {
		return timers.Fired{}, false, fmt.Errorf("endpoint %s/%s: %w", s.ns, s.endpoint, err)
	}
	s.ep, s.epRaw = ep, row.Value
	if ep.Enabled {
		return timers.Fired{}, false, nil
	}
	b.RequireEquals(s.endpointKey, row.Value)
	return timers.Fired{DueAtMs: timers.NeverMs, State: value, Batch: b}, true, nil
}

// handedKey is the context key of the rows handed to a fire (withHanded).
type handedKey struct{}

// withHanded hands a fire what the ingest that created its timer read
// for it (outbox.Appender.Due): its fresh rows, and its stream's rows as
// the ingest left them, so that it need not read them.
func withHanded(ctx context.Context, h outbox.Handed) context.Context {
	if len(h.Rows) == 0 && len(h.Streams) == 0 {
		return ctx
	}
	return context.WithValue(ctx, handedKey{}, h)
}

// readStream reads the stream's backlog, endpoint and head rows, unless
// the ingest that created the fire's timer read them for it as its batch
// left them (withHanded). Those are the rows a read would find: until the
// fire, the timer's lease keeps every other fire off the stream, and an
// ingest since is counted by the backlog the completion reads.
func (h *Handler) readStream(ctx context.Context, fc timers.FireContext, s *stream) ([]store.Row, error) {
	handed, _ := ctx.Value(handedKey{}).(outbox.Handed)
	if r, ok := handed.Streams[s.endpoint]; ok {
		return []store.Row{r.Backlog, r.Endpoint, r.Head}, nil
	}
	return fc.Store.GetMany(ctx, fc.Partition, []store.Key{s.backlogKey, s.endpointKey, s.headKey})
}

// handedPage is the first page of a fire handed the rows of the ingest that
// created its timer (withHanded), taken as that ingest committed them, with
// no read: when the stream's backlog, read by this fire after that ingest,
// counts exactly the handed rows that are the stream's, they are its whole
// queue, as a read from its head would find it. ok is false, and the fire
// reads its queue, for a timer with a state of its own, rows another
// ingest added, a resend's pending rows, or more rows than a page.
func (h *Handler) handedPage(ctx context.Context, fc timers.FireContext, s *stream, t timers.DueTimer, backlog schema.Backlog) (outbox.QueuePage, []*pendingRow, bool) {
	handed, _ := ctx.Value(handedKey{}).(outbox.Handed)
	refs := handed.Rows
	if len(refs) == 0 || len(t.State) != 0 || backlog.Rows == 0 || backlog.Rows > uint64(len(refs)) {
		return outbox.QueuePage{}, nil, false
	}
	for _, r := range refs {
		if !r.Fresh || r.Log == nil {
			return outbox.QueuePage{}, nil, false
		}
	}
	// Fresh rows only: nothing is read.
	page, got, err := outbox.ReadArrived(ctx, fc.Store, fc.Partition, s.endpoint, refs, h.maxRows())
	if err != nil || page.Next != nil || uint64(len(page.Rows)) != backlog.Rows {
		return outbox.QueuePage{}, nil, false
	}
	rows := h.rowsOf(ctx, s, page)
	for i, r := range rows {
		if r == nil {
			return outbox.QueuePage{}, nil, false
		}
		if got[i].Err != nil || !got[i].Found {
			return outbox.QueuePage{}, nil, false
		}
	}
	h.adopt(ctx, s, rows, got)
	page.FromHead = true
	return page, rows, true
}

// scan reads the page of the stream's queue after the cursor, wrapping to
// its start once the cursor is past its last row. It returns the cursor
// the page was read after, and the endpoint row as read with the page.
func (h *Handler) scan(ctx context.Context, fc timers.FireContext, s *stream, after *store.Cursor) (outbox.QueuePage, *store.Cursor, store.Row, error) {
	// The page is the fire's row budget: scanning further would strand the
	// unexamined rest until a whole rotation.
	limit := h.maxRows()
	dense := s.ep.TakesAll()
	also := []store.Key{s.endpointKey}
	page, rows, err := outbox.ReadQueueWith(ctx, fc.Store, fc.Partition, s.endpoint, s.head, after, limit, 0, dense, also)
	if err == nil && len(page.Rows) == 0 && after != nil && page.Next == nil {
		after = nil
		page, rows, err = outbox.ReadQueueWith(ctx, fc.Store, fc.Partition, s.endpoint, s.head, nil, limit, 0, dense, also)
	}
	if err != nil {
		return outbox.QueuePage{}, nil, store.Row{}, err
	}
	return page, after, rows[0], nil
}

// prepare reads the outcomes and attempt rows of the page's rows, in one
// round trip for rows in the log. A row that does not parse, or whose
// outcome is missing or does not decode, is logged and left out: kept,
// never deleted, skipped.
func (h *Handler) prepare(ctx context.Context, fc timers.FireContext, s *stream, page outbox.QueuePage) ([]*pendingRow, error) {
	rows := h.rowsOf(ctx, s, page)
	refs := make([]outbox.StreamRef, 0, len(page.Rows))
	for _, r := range rows {
		if r != nil {
			q := page.Rows[r.index]
			refs = append(refs, outbox.StreamRef{Seq: q.Seq, RID: q.RID, Logged: q.Logged, Log: q.Log})
		}
	}
	got, err := outbox.ReadStreamRows(ctx, fc.Store, fc.Partition, s.endpoint, refs)
	if err != nil {
		return nil, err
	}
	h.adopt(ctx, s, rows, got)
	return rows, nil
}

// rowsOf is a row for each of the page's rows, nil for a corrupt one,
// which is logged and kept.
func (h *Handler) rowsOf(ctx context.Context, s *stream, page outbox.QueuePage) []*pendingRow {
	rows := make([]*pendingRow, len(page.Rows))
	for i, q := range page.Rows {
		if q.Corrupt {
			if q.Logged {
				h.log().WarnContext(ctx, "undecodable log row; keeping it", "namespace", s.ns, "endpoint", s.endpoint, "seq", q.Seq)
			} else {
				h.log().WarnContext(ctx, "invalid pending row; keeping it", "namespace", s.ns, "endpoint", s.endpoint)
			}
			continue
		}
		rows[i] = &pendingRow{index: i, seq: q.Seq, rid: q.RID}
	}
	return rows
}

// adopt gives each row what was read of it, got holding one read row per
// row that is not nil, in order. A row whose outcome is missing or does not
// decode is logged and left out (nil): kept, never deleted, skipped.
func (h *Handler) adopt(ctx context.Context, s *stream, rows []*pendingRow, got []outbox.StreamRow) {
	for i, r := range rows {
		if r == nil {
			continue
		}
		sr := got[0]
		got = got[1:]
		switch {
		case !sr.Found:
			h.log().WarnContext(ctx, "pending row without a record; keeping it",
				"namespace", s.ns, "endpoint", s.endpoint, "reservation_id", r.rid)
			rows[i] = nil
			continue
		case sr.Err != nil:
			h.log().WarnContext(ctx, "undecodable record; keeping it",
				"namespace", s.ns, "endpoint", s.endpoint, "reservation_id", r.rid, "error", sr.Err)
			rows[i] = nil
			continue
		}
		// An unreadable attempt row only restarts the record.
		r.rec, r.outcome, r.attempts = sr.Record, sr.Outcome, sr.Attempts
	}
}
