package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// DefaultDisableAfter is how long an endpoint may deliver nothing while its
// calls fail before relay disables it, as the settings of a production
// relay default it (Handler.DisableAfter).
const DefaultDisableAfter = 5 * 24 * time.Hour

// FailingEventEvery is the least time between two endpoint.failing events
// of one endpoint: a flapping receiver must not page its operator at the
// rate it flaps.
const FailingEventEvery = time.Hour

// Reasons relay gives for an endpoint it disabled.
const (
	ReasonGone    = "gone"
	ReasonFailing = "failing"
)

// EventAppender appends operator events to a namespace's outbox, as an
// *outbox.Appender on the driver's store does: idempotently, so an event
// appended twice is one event.
type EventAppender interface {
	Append(ctx context.Context, p store.Partition, outcomes []schema.Outcome) ([]outbox.Status, error)
}

// judgement is what a fire's calls say of its endpoint's health: the
// stream's health after them, and whether the endpoint has failed long
// enough to be disabled.
type judgement struct {
	health  schema.Health
	disable bool
}

// judge weighs the calls of f against the stream's health as the fire
// read it. A call that delivered makes the endpoint healthy (and recovered,
// if an event said it was not); the first failed call after health (after
// what the fire delivered, failedSince) starts
// the disable-after period and emits endpoint.failing, unless one was
// emitted within FailingEventEvery; a failed call once the period has run
// asks for the disable. The period counts from the endpoint's last edit
// when that is later, so an operator who enables an endpoint again gives
// it a whole period.
func (h *Handler) judge(f *firing, nowMs int64) judgement {
	run := &f.calls
	var j judgement
	if prev := f.state.Health; prev != nil {
		j.health = *prev
		j.health.Pending = slices.Clone(prev.Pending)
	}
	hl := &j.health
	if len(run.acked) > 0 {
		if hl.FailingSinceMs != 0 && hl.NotifiedMs >= hl.FailingSinceMs {
			h.queue(hl, &f.stream, schema.Event{Type: schema.EventRecovered, FailingSinceMs: hl.FailingSinceMs}, nowMs)
		}
		hl.FailingSinceMs, hl.LastStatus, hl.LastError = 0, 0, ""
	}
	failed := failedSince(run)
	if len(failed) == 0 {
		return j
	}
	last := failed[len(failed)-1].err
	hl.LastStatus, hl.LastError = eventStatus(last.Status), eventError(last.Class)
	if hl.FailingSinceMs == 0 {
		hl.FailingSinceMs = nowMs
		// A 410 is told by its own event, endpoint.gone, once the plan has
		// disabled the endpoint.
		if run.gone() == nil && (hl.NotifiedMs == 0 || nowMs-hl.NotifiedMs >= FailingEventEvery.Milliseconds()) {
			h.queue(hl, &f.stream, schema.Event{Type: schema.EventFailing, FailingSinceMs: nowMs}, nowMs)
		}
		return j
	}
	from := max(hl.FailingSinceMs, f.stream.ep.UpdatedMs)
	j.disable = h.DisableAfter > 0 && run.gone() == nil && nowMs-from >= h.DisableAfter.Milliseconds()
	return j
}

// failedSince is the fire's failed calls the endpoint is failing with
// now: all of them when nothing was delivered, else those of the last page
// a lingering fire took when it delivered nothing (calls.refusedLast), as a
// fire of their own would have found them. Otherwise what was delivered
// outweighs them.
func failedSince(run *calls) []failed {
	if len(run.acked) == 0 {
		return run.failed
	}
	return run.refusedLast
}

// queue adds an event to append, dated nowMs, with the health's last
// failure; a failing, disabled or gone event marks the stream notified.
// Past MaxPendingEvents (events that could not be appended, fire after
// fire) the oldest is dropped and logged.
func (h *Handler) queue(hl *schema.Health, s *stream, e schema.Event, nowMs int64) {
	e.Endpoint = s.endpoint
	if e.Type != schema.EventRecovered {
		e.LastStatus, e.LastError = hl.LastStatus, hl.LastError
		hl.NotifiedMs = nowMs
	}
	if h.Events == nil {
		// Nowhere to append it: told at once, by log and metric.
		h.tell(s.ns, e)
		return
	}
	if len(hl.Pending) == schema.MaxPendingEvents {
		h.log().Error("operator event dropped: too many pending", "namespace", s.ns, "endpoint", s.endpoint, "event", hl.Pending[0].Event.Type)
		hl.Pending = hl.Pending[1:]
	}
	hl.Pending = append(hl.Pending, schema.PendingEvent{Event: e, AtMs: max(nowMs, 1)})
}

// stateHealth is the health a timer state keeps: none once there is
// nothing to remember, so a healthy stream's state stays as small as it
// was.
func stateHealth(hl schema.Health, nowMs int64) *schema.Health {
	recent := hl.NotifiedMs != 0 && nowMs-hl.NotifiedMs < FailingEventEvery.Milliseconds()
	if hl.FailingSinceMs == 0 && len(hl.Pending) == 0 && !recent {
		return nil
	}
	if !recent && hl.FailingSinceMs == 0 {
		hl.NotifiedMs = 0
	}
	return &hl
}

// tell logs and counts an event, once it is appended (or has nowhere to
// go).
func (h *Handler) tell(ns string, e schema.Event) {
	h.Metrics.event(e.Type)
	h.log().Warn("endpoint event", "namespace", ns, "endpoint", e.Endpoint, "event", e.Type,
		"reason", e.Reason, "failing_since_ms", e.FailingSinceMs, "last_status", e.LastStatus, "last_error", e.LastError)
}

func eventStatus(s int) int {
	if s < 100 || s > 599 {
		return 0
	}
	return s
}

func eventError(class string) string {
	if !schema.ValidEventError(class) {
		return ClassError
	}
	return class
}

// flush appends the events an earlier fire decided on, before this fire
// does anything else. About an endpoint that takes events itself they are
// only logged and counted: it is the one they are about. When the
// deciding fire's due time is still ahead, the fire ends there, rescheduled
// to it with the events cleared; otherwise it goes on, with state cleared,
// and its own completion records them appended. Its error leaves the
// events for the next fire.
func (h *Handler) flush(ctx context.Context, fc timers.FireContext, t timers.DueTimer, s *stream, endpoint store.Row, state *schema.DeliveryState) (timers.Fired, bool, error) {
	hl := state.Health
	takes := false
	if endpoint.Found {
		if ep, err := schema.DecodeEndpoint(endpoint.Value); err == nil {
			takes = ep.TakesEvents()
		}
	}
	if !takes && h.Events != nil {
		outs := make([]schema.Outcome, len(hl.Pending))
		for i, p := range hl.Pending {
			outs[i] = schema.NewEvent(p.Event, p.AtMs)
		}
		st, err := h.Events.Append(ctx, fc.Partition, outs)
		switch {
		case err != nil && (errors.Is(err, store.ErrUnavailable) || errors.Is(err, outbox.ErrContended) || ctx.Err() != nil):
			// For now: the next fire appends them.
			return timers.Fired{}, false, fmt.Errorf("append operator events of %s/%s: %w", s.ns, s.endpoint, err)
		case err != nil:
			// One that would fail again (a namespace over its endpoint
			// limit, a full backlog) must not hold the stream's delivery:
			// the events are logged, not appended.
			h.log().ErrorContext(ctx, "operator events not appended", "namespace", s.ns, "endpoint", s.endpoint, "error", err)
			st = nil
		}
		for i, x := range st {
			if x.Code == outbox.Invalid || x.Code == outbox.Conflict {
				h.log().ErrorContext(ctx, "operator event not appended", "namespace", s.ns, "endpoint", s.endpoint,
					"event", hl.Pending[i].Event.Type, "code", x.Code, "detail", x.Detail)
			}
		}
	}
	for _, p := range hl.Pending {
		h.tell(s.ns, p.Event)
	}
	nowMs := max(fc.NowMs, h.clock().Now().UnixMilli())
	resume := hl.ResumeMs
	next := *hl
	next.Pending, next.ResumeMs = nil, 0
	state.Health = stateHealth(next, nowMs)
	if resume <= nowMs || resume >= timers.NeverMs || (state.FailedFires == 0 && !state.Paced()) {
		// Due now, parked, or due later with nothing to wait for (no
		// backoff, no tokens): rows ingested meanwhile go now, as the
		// ingest would have pulled the timer to now.
		return timers.Fired{}, false, nil
	}
	value, err := schema.EncodeDeliveryState(*state)
	if err != nil {
		return timers.Fired{}, false, err
	}
	return timers.Fired{DueAtMs: max(resume, t.DueAtMs), State: value, Batch: store.Batch{Settles: true}, Backoff: true}, true, nil
}
