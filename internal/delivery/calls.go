package delivery

import (
	"context"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// calls is what the calls of one fire did.
type calls struct {
	acked  []*pendingRow
	failed []failed
	// refusedLast are the failed calls of the last page a lingering fire
	// took when that page delivered nothing after earlier ones did: the
	// endpoint fails now, as a fire of their own would have found.
	refusedLast []failed
	// callFailed: a call failed, so no further one was launched. cut: the
	// budget ran out first.
	callFailed, cut bool
	// paced: the stream's tokens ran out first (see limits).
	paced bool
	// last is the page index of the last row examined, -1 for none.
	last       int
	retryAfter time.Duration
	// launched counts the calls made, each paid for with a token.
	launched int
	// signal is why the first call that asked relay to slow down did (see
	// signal), "" when none did.
	signal string
}

func (c *calls) gone() *Error {
	for _, f := range c.failed {
		if f.err.Gone {
			return f.err
		}
	}
	return nil
}

type result struct {
	row *pendingRow
	err error
	// timedOut: the call's own deadline cut it.
	timedOut bool
	// took is how long the call lasted, and ended when, by the handler's
	// clock.
	took  time.Duration
	ended time.Time
	// status is the 2xx a StatusSink reported.
	status int
}

// call delivers the page's rows in sequence order, keeping up to the
// endpoint's max_in_flight calls open. It launches nothing after a failure
// or once a call could no longer end within the fire's bound, and waits for every open call before it
// returns. Synthetic rows are acknowledged without a call. At one call in
// flight it is strictly sequential: nothing after a failed row is called.
// It keeps to the stream's effective limits: lim's width at once, and no
// more calls than it has tokens.
func (h *Handler) call(ctx context.Context, s *stream, page outbox.QueuePage, rows []*pendingRow, started time.Time, lim *limits) calls {
	clk := h.clock()
	width := min(max(lim.width, 1), schema.MaxMaxInFlight)
	allow := lim.allowance()
	// Each call is bounded by the endpoint's own timeout, and a call is
	// launched only while it can end within the fire's bound: the longest
	// fire is the same whatever the endpoint's timeout.
	timeout := h.callTimeout(&s.ep)
	budget := h.fireBound() - timeout
	run := calls{last: -1}
	results := make(chan result, width)
	open := 0
	collect := func(res result) {
		open--
		if h.collected != nil {
			defer h.collected(res.row.rid, res.err)
		}
		h.Metrics.observeCall(res, ctx.Err() != nil)
		switch {
		case res.err == nil:
			res.row.done = outbox.Done{AtMs: max(res.ended.UnixMilli(), 0), DurationMs: durationMs(res.took), Status: uint16(min(max(res.status, 0), 999))}
			run.acked = append(run.acked, res.row)
		case ctx.Err() != nil:
			// Stopped (the driver stopping, or the lease running out): the
			// fire writes nothing, so nothing to record.
		default:
			e := failure(res.err)
			if res.timedOut {
				e = &Error{Class: ClassTimeout, Reason: "no answer within the sink timeout"}
			}
			h.log().WarnContext(ctx, "delivery failed", "namespace", s.ns, "endpoint", s.endpoint,
				"reservation_id", res.row.rid, "class", e.Class, "status", e.Status, "reason", e.Reason)
			run.failed = append(run.failed, failed{row: res.row, err: e, took: res.took, ended: res.ended})
			if run.signal == "" {
				run.signal = signal(e, res.timedOut)
			}
			run.retryAfter = max(run.retryAfter, e.RetryAfter)
			run.callFailed = true
		}
	}
	for i := range page.Rows {
		// A full window waits for a call to end; at width 1 that makes the
		// loop sequential, so nothing past a failed row is examined.
		for open >= width {
			collect(<-results)
		}
		for drained := false; !drained; {
			select {
			case res := <-results:
				collect(res)
			default:
				drained = true
			}
		}
		if run.callFailed || ctx.Err() != nil {
			break
		}
		r := rows[i]
		switch {
		case r == nil:
			run.last = i
			continue
		case schema.IsSynthetic(r.rid):
			h.Metrics.synthetic()
			r.done = outbox.Done{AtMs: max(clk.Now().UnixMilli(), 0)}
			run.acked = append(run.acked, r)
			run.last = i
			continue
		}
		if clk.Now().Sub(started) >= budget {
			run.cut = true
			break
		}
		if allow == 0 {
			run.paced = true
			break
		}
		allow--
		run.launched++
		open++
		run.last = i
		go h.deliver(ctx, s, r, timeout, results)
	}
	for open > 0 {
		collect(<-results)
	}
	return run
}

// deliver makes one call, bounded by timeout even if the sink ignores its
// context, and reports it on results.
func (h *Handler) deliver(ctx context.Context, s *stream, r *pendingRow, timeout time.Duration, results chan<- result) {
	clk := h.clock()
	callCtx, cancel := h.withDeadline(ctx, timeout)
	defer cancel()
	begin := clk.Now()
	done := make(chan error, 1)
	var status int
	// On a worker, whose stack has grown already (see workers): the
	// attempt's span too, whose start and end run deep.
	callWorkers.run(func() {
		callCtx, span := s.fire.startAttempt(callCtx, r)
		parcel := Parcel{Namespace: s.ns, EndpointID: s.endpoint, Endpoint: s.ep, Seq: r.seq, Outcome: r.outcome}
		var err error
		code := 0
		if ss, ok := h.Sink.(StatusSink); ok {
			code, err = ss.DeliverStatus(callCtx, parcel)
		} else {
			err = h.Sink.Deliver(callCtx, parcel)
		}
		// Ended before the fire hears of the call, so its span ends last.
		endAttempt(span, code, err, err != nil && ctx.Err() == nil && callCtx.Err() != nil)
		status = code
		done <- err
	})
	res := result{row: r}
	select {
	case res.err = <-done:
		// Written before the send on done, so read after it.
		res.status = status
		// The call's context ended but the fire's did not: its own bound
		// cut it.
		res.timedOut = res.err != nil && ctx.Err() == nil && callCtx.Err() != nil
	case <-callCtx.Done():
		res.err = callCtx.Err()
		res.timedOut = ctx.Err() == nil
	}
	res.ended = clk.Now()
	res.took = res.ended.Sub(begin)
	results <- res
}
