package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Enabled is what SetEnabled left.
type Enabled struct {
	// Endpoint is the endpoint row as the call left it: as it wrote it, or
	// as it read it when it changed nothing.
	Endpoint schema.Endpoint
	// Changed: the call wrote the row; false when the endpoint already was
	// as asked.
	Changed bool
}

// SetEnabled enables or disables the endpoint id and changes nothing else
// of it: its URL, secrets, keys and headers stay as stored. Enabling
// clears why it was disabled ("gone", "failing") and delivers its stream
// at once, as PutEndpoint does (planWake); disabling is what a PUT with
// enabled false writes, so the next fire parks the stream. One batch
// guarded by the endpoint row as read, re-planned when a concurrent edit
// got there first, so neither write is lost. An endpoint already as asked
// is answered as it is, with nothing written.
func (a *Admin) SetEnabled(ctx context.Context, p store.Partition, id string, enabled bool) (Enabled, error) {
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return Enabled{}, err
		}
		if s.ep == nil {
			return Enabled{}, ErrNotFound
		}
		if s.ep.ep.DisabledReason == ReasonDeleting {
			return Enabled{}, ErrDeleting
		}
		if s.ep.ep.Enabled == enabled {
			return Enabled{Endpoint: s.ep.ep}, nil
		}
		nowMs := a.Clock.Now().UnixMilli()
		var b store.Batch
		e, value, err := planEnabled(&b, s, enabled, nowMs)
		if err != nil {
			return Enabled{}, err
		}
		if enabled {
			planWake(&b, s, id, nowMs)
			markWake(&b, s, id, s.class())
		} else {
			MarkEndpoint(&b, id, s.class(), ClassOperatorDisabled, false)
		}
		ok, err := a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.holds(ctx, p, s.ep.key, value) })
		if err != nil {
			return Enabled{}, err
		}
		if ok {
			return Enabled{Endpoint: e, Changed: true}, nil
		}
	}
	return Enabled{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// planEnabled adds to b the endpoint row of s with only its enabled flag,
// and what goes with it, changed, guarded by the row as read: the row and
// its encoding.
func planEnabled(b *store.Batch, s *streamRead, enabled bool, nowMs int64) (schema.Endpoint, store.Value, error) {
	e := s.ep.ep
	e.Enabled = enabled
	// Updated, as by a PUT: a "failing" auto-disable planned before this
	// edit then starts its period again (delivery's disable).
	e.UpdatedMs = max(e.UpdatedMs, nowMs)
	e.DisabledReason, e.DisabledMs = "", 0
	if !enabled {
		e.DisabledMs = e.UpdatedMs
	}
	value, err := schema.EncodeEndpoint(&e)
	if err != nil {
		return e, nil, err
	}
	b.RequireEquals(s.ep.key, s.ep.raw)
	b.Put(s.ep.key, value)
	return e, value, nil
}

// Retried is what Retry did to a stream.
type Retried struct {
	// Rows is how many rows the stream had pending.
	Rows uint64
	// DueAtMs is when the stream is next tried; timers.NeverMs when no row
	// is pending, so there is nothing to try.
	DueAtMs int64
	// Enabled: the call enabled the endpoint (RetryOptions.Enable).
	Enabled bool
}

// Retry makes every pending row of the stream of endpoint id go at the next
// fire, now: in one batch guarded by the endpoint row and the timer as read,
// the stream's delivery timer is made due now with its backoff reset
// (retryState: no failed fires, no throttle, the scan from the head), or
// created when rows wait without one. A disabled endpoint is ErrDisabled,
// unless enable, which enables it in the same batch (planEnabled), so no
// state is ever stored in which it is enabled but still backing off. A
// stream that a fire holds this instant is ErrBusy; one with nothing
// pending is answered with no rows, and only an enable written.
func (a *Admin) Retry(ctx context.Context, p store.Partition, id string, enable bool) (Retried, error) {
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return Retried{}, err
		}
		if s.ep == nil {
			return Retried{}, ErrNotFound
		}
		if s.ep.ep.DisabledReason == ReasonDeleting {
			return Retried{}, ErrDeleting
		}
		enabling := !s.ep.ep.Enabled
		if enabling && !enable {
			return Retried{}, ErrDisabled
		}
		rows := s.backlog.backlog.Rows
		if t := s.timer; t != nil && t.Lease != nil && rows > 0 {
			return Retried{}, ErrBusy
		}
		nowMs := a.Clock.Now().UnixMilli()
		res := Retried{Rows: rows, DueAtMs: timers.NeverMs, Enabled: enabling}
		var b store.Batch
		if enabling {
			if _, _, err := planEnabled(&b, s, true, nowMs); err != nil {
				return Retried{}, err
			}
			// With rows the timer is reset below, guarded; without, it
			// stays as read, and is guarded here.
			failing := false
			if rows == 0 && s.timer != nil {
				b.RequireEquals(s.timer.Key, s.timer.Raw)
				failing = timerFailing(s.timer)
			}
			MarkEndpoint(&b, id, s.class(), ClassEnabled, failing)
		} else {
			b.RequireEquals(s.ep.key, s.ep.raw)
			if rows > 0 {
				// The backoff reset below.
				MarkStream(&b, id, s.ep.key, s.ep.raw, true, timerFailing(s.timer), false)
			}
		}
		if rows > 0 {
			res.DueAtMs = nowMs
			state, err := schema.EncodeDeliveryState(retryState(s.timer))
			if err != nil {
				return Retried{}, err
			}
			if t := s.timer; t != nil {
				// Replace guards the row as read, corrupt or not.
				t.Replace(&b, nowMs, state)
			} else {
				// The sequence fences out an ingest that also read no
				// timer and would create a second one.
				b.Guard(schema.ClassBacklog.Key(id), s.backlog.raw, s.backlog.found)
				if err := s.fence(&b); err != nil {
					return Retried{}, err
				}
				b.Put(timers.Key(nowMs, timers.KindOutcomeDelivery, id), timers.EncodeIdle(state))
			}
		} else if !enabling {
			// Nothing to try and nothing to change.
			return res, nil
		}
		ok, err := a.apply(ctx, p, b)
		if err != nil {
			return Retried{}, err
		}
		if ok {
			return res, nil
		}
	}
	return Retried{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// retryState is the stream's delivery state with its backoff reset: no
// failed fires, no throttle, and the scan from the head, so every pending
// row is tried; no later due time an appending fire would keep for its
// events. Its token bucket stays, so the endpoint's configured rate_limit
// holds, as does its health with the events not yet appended. A state
// that does not decode is replaced by a fresh one.
func retryState(t *timers.Row) schema.DeliveryState {
	var st schema.DeliveryState
	if t != nil && t.Err == nil {
		if got, err := schema.DecodeDeliveryState(t.State); err == nil {
			st = got
		}
	}
	st.Cursor, st.FailedFires, st.Throttle = nil, 0, nil
	if st.Health != nil {
		h := *st.Health
		h.ResumeMs = 0
		st.Health = &h
	}
	return st
}
