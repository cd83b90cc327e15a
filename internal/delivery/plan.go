package delivery

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// firing is what one fire knows once its calls are made: its timer and
// partition, its stream and the delivery state it started from, the page it
// examined and what the calls did. plan reads it and never changes it, so
// a re-plan plans the same fire again.
type firing struct {
	fc     timers.FireContext
	timer  timers.DueTimer
	stream stream
	state  schema.DeliveryState
	page   outbox.QueuePage
	// rows are the page's rows as prepared, nil where one was left out.
	rows []*pendingRow
	// after is the cursor the page was read after.
	after *store.Cursor
	calls calls
	// limits are the stream's rate limit and throttle at the fire's start.
	limits limits
	// handedBacklog is set when the fire may plan against the backlog its
	// ingest handed it, read before the calls (see Handler.Fire).
	handedBacklog bool
	// endedLately is set when the stream ended a moment before the fire
	// (Handler.ends): if the fire ends it again, its timer stays.
	endedLately bool
}

// plan turns a fire's calls into the timer's completion: the
// acknowledgements of the delivered rows, a 410's disable, and the timer's
// next due time and state. head is the backlog as read before the calls;
// reread (or an acknowledgement or disable to plan) reads it afresh, and a
// disable reads the endpoint row afresh with it.
func (h *Handler) plan(ctx context.Context, f *firing, head store.Row, reread bool) (timers.Fired, error) {
	s, run := &f.stream, &f.calls
	clk := h.clock()
	fresh := head
	gone := run.gone()
	judged := h.judge(f, max(f.fc.NowMs, clk.Now().UnixMilli()))
	disabling := gone != nil || judged.disable
	var endpoint store.Row
	// again are the page's rows whose log rows are read with the backlog:
	// on a re-plan every row the plan writes or guards, since whatever
	// failed its guard (an erasure, a resend to another endpoint of a row
	// this stream was to delete) changed one of them; else the rows
	// other streams still waited on (sharedRows).
	again := sharedRows(run.acked, h.Retention)
	if reread {
		again = loggedRows(f.rows)
	}
	// left are the rows the stream no longer has pending: erased or
	// dropped while the calls were made. There is nothing of them to
	// acknowledge or keep.
	var left map[int]bool
	if reread || disabling || len(again) > 0 || len(run.acked) > 0 && !f.handedBacklog {
		// Acknowledgements, and a 410's disable, are planned against rows
		// read after the calls, so the slow calls sit outside the
		// read-modify-write window (but for a quiet handed fire's, see
		// Handler.Fire). The calls are made: a Redis restart now
		// is waited out (within the fire's lease) so they are not made again.
		keys := []store.Key{s.backlogKey}
		if disabling {
			keys = append(keys, s.endpointKey)
		}
		logAt := len(keys)
		for _, r := range again {
			key, _ := r.rec.LogKey()
			keys = append(keys, key)
		}
		var rows []store.Row
		err := store.RetryUnavailable(ctx, store.UnavailableAttempts, func() error {
			if len(keys) == 1 {
				v, found, err := f.fc.Store.Get(ctx, f.fc.Partition, keys[0])
				rows = []store.Row{{Value: v, Found: found}}
				return err
			}
			var err error
			rows, err = f.fc.Store.GetMany(ctx, f.fc.Partition, keys)
			return err
		})
		if err != nil {
			return timers.Fired{}, fmt.Errorf("read backlog of %s/%s: %w", s.ns, s.endpoint, err)
		}
		fresh = rows[0]
		if disabling {
			endpoint = rows[1]
		}
		for i, r := range again {
			rec, ok := r.rec.Reread(rows[logAt+i])
			if !ok {
				if left == nil {
					left = make(map[int]bool)
				}
				left[r.index] = true
				continue
			}
			r.rec = rec
		}
	}
	// Acknowledgements and the completion share one snapshot: a plan that
	// acknowledges every row the read counts is Done, guarded by that read,
	// and an append since fails it and the completion re-plans; one that
	// leaves rows subtracts what it acknowledged, whatever ingest added.
	acks, err := outbox.NewAcks(s.endpoint, fresh.Value, fresh.Found)
	if err != nil {
		return timers.Fired{}, err
	}
	acks.Retain = h.Retention > 0
	acked := make(map[int]bool, len(run.acked))
	// Refused acknowledgements are logged once a fire, with the first one's
	// row and error: a stream deleted while its fire ran refuses every row
	// of the page, and a line each was hundreds of lines for one event.
	var (
		refused  int
		firstRID string
		firstErr error
	)
	for _, r := range run.acked {
		if left[r.index] {
			continue
		}
		if err := acks.Add(r.rid, r.seq, r.rec, r.done); err != nil {
			if refused == 0 {
				firstRID, firstErr = r.rid, err
			}
			refused++
			continue
		}
		acked[r.index] = true
	}
	if refused > 0 {
		h.log().WarnContext(ctx, "acknowledgement not planned; keeping the rows",
			"namespace", s.ns, "endpoint", s.endpoint, "rows", refused,
			"reservation_id", firstRID, "error", firstErr, "backlog_found", fresh.Found)
	}
	h.moveHead(f, acks, acked, left)
	nowMs := max(f.fc.NowMs, clk.Now().UnixMilli())
	// A stream that ended a moment ago and ends again keeps its timer and
	// its empty backlog row (timers.Fired.Stay): the next ingest then holds
	// the timer in place and adds to the row, writing no index.
	stay := f.endedLately && !disabling && acks.Remaining().Rows == 0
	acks.StayEmpty = stay
	var b store.Batch
	if disabling && acks.Len() == 0 && acks.Remaining().Rows > 0 {
		// Nothing to acknowledge, and the disable does not depend on the
		// backlog: its guard alone would only let ingest fail the disable.
		b.Settles = true
	} else {
		acks.Plan(&b)
	}
	delivered := acks.Len()
	parked := false
	health := judged.health
	if disabling {
		reason, event := ReasonGone, schema.EventGone
		if gone == nil {
			reason, event = ReasonFailing, schema.EventDisabled
		}
		var disabled bool
		parked, disabled = h.disable(ctx, &b, s, endpoint, nowMs, reason)
		if disabled {
			h.queue(&health, s, schema.Event{Type: event, Reason: reason, FailingSinceMs: health.FailingSinceMs}, nowMs)
		}
	}
	lim := f.limits
	throttle := lim.adapt(run, nowMs)
	rowsLeft := acks.Remaining().Rows > 0
	tokens, waitDue, fullDue := lim.tokensAfter(run, throttle, rowsLeft, h.maxRows())
	if !rowsLeft {
		ended := schema.DeliveryState{Tokens: tokens, Throttle: throttle, Health: stateHealth(health, nowMs)}
		due := int64(0)
		if tokens != nil && !parked && fullDue > nowMs {
			// A stream that ends with its token bucket short keeps its timer until
			// the token bucket is full again: ended, the next outcome would start
			// a fresh timer with a full one, and a trickle of outcomes
			// would go at any rate. Not paced, so an ingest pulls it to now;
			// the fire then finds tokens, or an empty backlog and ends.
			due = fullDue
		}
		if hl := ended.Health; hl != nil && hl.NotifiedMs != 0 && h.Events != nil {
			// Kept until an hour after the stream's last event, so a
			// failure within it is not told again (FailingEventEvery).
			due = max(due, hl.NotifiedMs+FailingEventEvery.Milliseconds())
		}
		switch {
		case due > nowMs:
			due = max(due, f.timer.DueAtMs)
		case ended.Health == nil || len(ended.Health.Pending) == 0:
			h.ends.ended(streamID{s.ns, s.endpoint}, nowMs)
			return timers.Fired{Done: true, Stay: stay, Batch: b}, nil
		}
		return h.fired(timers.Fired{Batch: b}, ended, due, nowMs)
	}

	resume := f.page.Next
	if run.callFailed || run.cut || run.paced {
		// Resume after the last row examined: after a failed row rather
		// than at it, so a row the endpoint keeps refusing does not starve
		// the rows behind it; at the first untried row after a cut.
		resume = f.after
		if run.last >= 0 {
			resume = f.page.Cursor(run.last)
		}
	}
	next := schema.DeliveryState{FailedFires: f.state.FailedFires, Cursor: resume, Tokens: tokens, Throttle: throttle}
	// A Retry-After the endpoint gave is a floor whatever else the fire
	// did: rows delivered before the call told to wait do not cut it
	// short, or a rate-limited endpoint would be called again at once.
	floorMs := min(run.retryAfter, MaxBackoff).Milliseconds()
	var delayMs int64
	switch {
	case delivered > 0:
		// The endpoint took something, so its count of failing fires
		// starts afresh and the rest are due now, unless it asked to wait.
		// Then this fire counts as the first failing one: a stream with no
		// failed fire is not backing off, and an ingest would pull it to now.
		next.FailedFires = 0
		if floorMs > 0 {
			next.FailedFires = 1
		}
		delayMs = floorMs
	case run.paced && !run.callFailed:
		// Out of tokens before any call: waiting for them is not a
		// backoff, and the count of failing fires stays as it was.
		delayMs = floorMs
	case len(f.page.Rows) == 0 && f.page.Next != nil:
		// The log rows the page examined held none of the stream's: its
		// rows are further on, and due now.
		delayMs = floorMs
	default:
		// The wait grows with the stream's failing fires, not with the
		// failures of the rows that failed: a dead endpoint fails a new row
		// in each fire and must still back off. Only a failed call raises
		// the count: a page of rows that cannot be sent is no fault of the
		// endpoint.
		delayMs = max(backoffMs(s.ns, s.endpoint, f.state.FailedFires), floorMs)
		if run.callFailed && next.FailedFires < ^uint32(0) {
			next.FailedFires++
		}
	}
	next.Health = stateHealth(health, nowMs)
	// Never earlier than it was due, but not a millisecond later either:
	// a stream due again now must be found by a scan in this millisecond,
	// or a fast fire would leave it for the next full poll.
	due := max(nowMs+delayMs, f.timer.DueAtMs)
	if next.Paced() {
		// Due when the next tokens are, whatever was delivered.
		due = max(due, waitDue)
	}
	if parked {
		// Disabled: parked, rows kept, until the endpoint is enabled again.
		due = timers.NeverMs
	}
	return h.fired(timers.Fired{
		Batch:   b,
		Backoff: delivered == 0,
		Notes:   h.attemptNotes(ctx, s, run.failed, nowMs),
	}, next, due, nowMs)
}

// moveHead plans the stream's head past the rows of the page read from the
// log that the fire finished: each acknowledged, not the stream's, or,
// when the fire delivered rows, refused and kept (outbox.Acks.Keep), so a
// row the endpoint keeps refusing does not hold the head while the rows
// behind it go. It stops at the first row left: untried, unreadable, or
// refused by an endpoint that took nothing, whose rows all stay in the
// log rather than each get a pending row. Only a page that read the log
// from the head knows every row up to where it stopped.
func (h *Handler) moveHead(f *firing, acks *outbox.Acks, acked, left map[int]bool) {
	head := f.stream.head
	if !head.Found || !f.page.FromHead {
		return
	}
	refused := make(map[int]bool, len(f.calls.failed))
	for _, fl := range f.calls.failed {
		refused[fl.row.index] = true
	}
	to := f.page.LogEnd
	for i, q := range f.page.Rows {
		if !q.Logged || acked[i] || left[i] {
			continue
		}
		if r := f.rows[i]; r != nil && refused[i] && acks.Len() > 0 && acks.Keep(r.rid, r.seq, r.rec) == nil {
			continue
		}
		to = q.Seq
		break
	}
	if to > head.Seq {
		acks.MoveHead(to)
	}
}

// fired completes a plan's Fired: the timer due at due with state next;
// or, with events to append, due now, next's health keeping due for the
// fire that appends them (none when due has come: that fire goes on). A
// due of 0 is one that has come.
func (h *Handler) fired(f timers.Fired, next schema.DeliveryState, due, nowMs int64) (timers.Fired, error) {
	if hl := next.Health; hl != nil && len(hl.Pending) > 0 {
		hl.ResumeMs = 0
		if due > nowMs {
			hl.ResumeMs = due
		}
		due = nowMs
	}
	value, err := schema.EncodeDeliveryState(next)
	if err != nil {
		return timers.Fired{}, err
	}
	f.DueAtMs, f.State = max(due, nowMs), value
	return f, nil
}

// sharedRows are the acknowledged rows whose log rows, as read before the
// calls, had other streams waiting: with nothing retained, whichever stream
// finishes a row last deletes it, so they are read again with the backlog
// after the calls, and a row another stream finished meanwhile is deleted
// now rather than left to the log sweep.
func sharedRows(acked []*pendingRow, retention time.Duration) []*pendingRow {
	var out []*pendingRow
	if retention > 0 {
		return nil
	}
	for _, r := range acked {
		if r.rec.Shared() && len(out) < store.MaxBatchOps-2 {
			out = append(out, r)
		}
	}
	return out
}

// loggedRows are the rows of a page that are in the log.
func loggedRows(rows []*pendingRow) []*pendingRow {
	var out []*pendingRow
	for _, r := range rows {
		if r == nil {
			continue
		}
		if _, ok := r.rec.LogKey(); ok {
			out = append(out, r)
		}
	}
	return out
}

// disable plans the endpoint's disabling with reason, after it answered
// 410 (ReasonGone) or failed for Handler.DisableAfter (ReasonFailing),
// against cur, the endpoint row as read after the calls. It reports whether
// the stream is to be parked until the endpoint is enabled, and whether
// this plan disables it (and so tells the operator). An operator's change
// since the fire read the row wins where it bears on the verdict: a new URL
// is not known to be gone or failing, so the endpoint stays as the operator
// left it; one disabled meanwhile (or being deleted) stays so, with its
// reason. Any other change (secret, filter, max_in_flight, a disable and
// enable again) is kept and the endpoint disabled anyway. The plan is
// guarded by cur, so an edit landing before it applies makes the
// completion re-plan against a new read rather than fail, and lose the
// fire's acknowledgements with the disable.
func (h *Handler) disable(ctx context.Context, b *store.Batch, s *stream, cur store.Row, nowMs int64, reason string) (parked, disabled bool) {
	log := h.log().With("namespace", s.ns, "endpoint", s.endpoint, "reason", reason)
	if !cur.Found {
		// Deleted meanwhile: parked, as a fire that finds it missing does.
		b.RequireAbsent(s.endpointKey)
		return true, false
	}
	ep, err := schema.DecodeEndpoint(cur.Value)
	if err != nil {
		// The acknowledgements stand; the next fire reports the row.
		log.ErrorContext(ctx, "endpoint to be disabled but its row does not decode; not disabled", "error", err)
		return false, false
	}
	switch {
	case ep.URL != s.ep.URL:
		log.WarnContext(ctx, "endpoint to be disabled but its URL changed meanwhile; not disabled")
		return false, false
	case reason == ReasonFailing && ep.UpdatedMs != s.ep.UpdatedMs:
		// Edited meanwhile: the edit starts a new disable-after period.
		return false, false
	case !ep.Enabled:
		b.RequireEquals(s.endpointKey, cur.Value)
		return true, false
	}
	ep.Enabled = false
	ep.DisabledReason = reason
	ep.UpdatedMs = max(ep.UpdatedMs, nowMs)
	ep.DisabledMs = ep.UpdatedMs
	v, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		log.ErrorContext(ctx, "cannot disable endpoint", "error", err)
		return false, false
	}
	if reason == ReasonGone {
		log.WarnContext(ctx, "endpoint answered 410 Gone; disabled, rows kept")
	} else {
		log.WarnContext(ctx, "endpoint delivered nothing while its calls failed for the disable-after period; disabled, rows kept",
			"disable_after", h.DisableAfter.String())
	}
	b.RequireEquals(s.endpointKey, cur.Value)
	b.Put(s.endpointKey, v)
	outbox.MarkEndpoint(b, s.endpoint, outbox.ClassEnabled, outbox.ClassFailingRow, false)
	return true, true
}

// attemptNotes records each failed call on its row's attempt row, for
// operators to see why a row is stuck: the row's attempts as the fire read
// them with this one added, the oldest dropped past schema.MaxAttempts. It
// is one Put per failed call whatever the row holds, so the fire's
// operation budget (outbox.MaxAcksPerBatch) is as it was.
func (h *Handler) attemptNotes(ctx context.Context, s *stream, fs []failed, nowMs int64) []store.Write {
	var notes []store.Write
	for _, f := range fs {
		at := nowMs
		if !f.ended.IsZero() {
			at = max(0, f.ended.UnixMilli())
		}
		a := schema.Attempt{
			AtMs: at, DurationMs: durationMs(f.took), Status: f.err.Status, ErrorClass: f.err.Class,
			Excerpt: schema.Excerpt(f.err.Excerpt),
		}
		if a.ErrorClass == "" {
			a.ErrorClass = ClassError // a failed call has a class
		}
		v, err := schema.EncodeAttempts(f.row.attempts.With(a))
		if err != nil {
			// A sink's class or status no row may hold: keep the fact.
			a.Status, a.ErrorClass = 0, ClassError
			v, err = schema.EncodeAttempts(f.row.attempts.With(a))
		}
		if err != nil {
			h.log().WarnContext(ctx, "cannot record attempt", "namespace", s.ns, "endpoint", s.endpoint, "error", err)
			continue
		}
		key, _ := schema.AttemptKey(s.endpoint, f.row.rid)
		notes = append(notes, store.Write{Kind: store.Put, Key: key, Value: v})
	}
	if len(fs) > 0 {
		// Every failed call counts, recorded on its row or not.
		ws, err := outbox.FailedAttemptsNotes(s.endpoint, len(fs), nowMs)
		if err != nil {
			h.log().WarnContext(ctx, "cannot count failed attempts", "namespace", s.ns, "endpoint", s.endpoint, "error", err)
			return notes
		}
		notes = append(notes, ws...)
	}
	return notes
}

// durationMs is d in whole milliseconds, 0 when negative (a clock stepped
// back) and saturated at 2^32-1.
func durationMs(d time.Duration) uint32 {
	return uint32(min(max(d.Milliseconds(), 0), math.MaxUint32))
}
