package httpapi

import (
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// outcomeResult is the answer for one outcome of a request.
type outcomeResult struct {
	ReservationID string `json:"reservation_id"`
	Status        string `json:"status"`
	// Type and Detail explain a refusal within a list.
	Type   string `json:"type,omitempty"`
	Detail string `json:"detail,omitempty"`
	slug   Slug
}

type outcomesAnswer struct {
	Results []outcomeResult `json:"results"`
}

// itemError names an invalid outcome of a list.
type itemError struct {
	Index  int    `json:"index"`
	Detail string `json:"detail"`
}

// postOutcomes accepts one outcome, or a list {"outcomes": [...]}. Every
// outcome is validated before anything is written, so a request with an
// invalid outcome writes nothing; each valid one is then stored whole or not
// at all, and answered on its own.
func (a *api) postOutcomes(w http.ResponseWriter, r *http.Request) {
	p, prob := partition(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	// Only a recording span is given attributes: the arguments would cost
	// a request an allocation even where tracing is off.
	span := trace.SpanFromContext(r.Context())
	traced := span.IsRecording()
	if traced {
		span.SetAttributes(attrNamespace.String(p.Namespace))
	}
	var body outcomesBody
	topKeys, prob := readOutcomes(r, &body)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	isList := body.Outcomes != nil
	outcomes := body.Outcomes
	if isList {
		// A member sent with its zero value ("reservation_id": "") decodes
		// as one left out: count them.
		if topKeys != 1 || !isZeroOutcome(&body.Outcome) {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "a list holds only \"outcomes\""))
			return
		}
		if len(outcomes) == 0 || len(outcomes) > outbox.MaxAppendOutcomes {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, fmt.Sprintf("outcomes must hold 1 to %d outcomes", outbox.MaxAppendOutcomes)))
			return
		}
	} else {
		outcomes = []schema.Outcome{body.Outcome}
	}
	if traced {
		span.SetAttributes(attrOutcomes.Int(len(outcomes)))
	}
	var invalid []itemError
	now := a.Clock.Now()
	for i := range outcomes {
		if err := outbox.ValidateIngest(outcomes[i], now); err != nil {
			invalid = append(invalid, itemError{Index: i, Detail: err.Error()})
		}
	}
	if len(invalid) > 0 {
		prob := NewProblem(SlugInvalidOutcome, invalid[0].Detail)
		if isList {
			prob = NewProblem(SlugInvalidOutcome, fmt.Sprintf("%d of %d outcomes are invalid; nothing was stored", len(invalid), len(outcomes))).
				With("errors", invalid)
		}
		WriteProblem(w, r, prob)
		return
	}
	if a.TracerProvider != nil {
		// Kept with each outcome, so that its attempts join this trace.
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			parent := schema.TraceParent{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
			for i := range outcomes {
				outcomes[i].Trace = parent
			}
		}
	}
	statuses, err := a.Appender.Append(r.Context(), p, outcomes)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	answer := outcomesAnswer{Results: make([]outcomeResult, len(statuses))}
	accepted, due := false, false
	var rows []outbox.StreamRef
	var nAccepted, nDuplicate, nConflict int
	for i, st := range statuses {
		res := outcomeResult{ReservationID: outcomes[i].ReservationID, Status: string(st.Code)}
		a.Metrics.outcome(res.Status)
		switch st.Code {
		case outbox.Accepted:
			accepted = true
			nAccepted++
			due = due || st.Due
			if a.Ingested != nil && !st.Due {
				rows = append(rows, st.Ref(outcomes[i].ReservationID))
			}
		case outbox.Duplicate:
			nDuplicate++
		case outbox.Conflict:
			nConflict++
			res.slug, res.Detail = SlugConflict, "a different outcome was accepted under this reservation_id"
		case outbox.NoEndpoint:
			res.slug, res.Detail = SlugNoEndpoint, "no endpoint of this namespace takes outcomes of this kind"
		default:
			res.slug, res.Detail = SlugInvalidOutcome, st.Detail
		}
		if res.slug != "" {
			res.Type = res.slug.Type()
		}
		answer.Results[i] = res
	}
	if traced {
		span.SetAttributes(attrAccepted.Int(nAccepted), attrDuplicate.Int(nDuplicate), attrConflict.Int(nConflict))
	}
	switch {
	case accepted && a.Ingested != nil:
		a.Ingested(p, rows, due)
	case accepted:
		a.wake(p)
	}
	if !isList {
		if res := answer.Results[0]; res.slug != "" {
			WriteProblem(w, r, NewProblem(res.slug, res.Detail))
			return
		}
	}
	WriteJSON(w, http.StatusAccepted, answer)
}

func isZeroOutcome(o *schema.Outcome) bool {
	return o.ReservationID == "" && o.Repository == "" && o.OccurredUnixMs == 0 &&
		o.Committed == nil && o.Aborted == nil && o.Expired == nil && o.ReadServed == nil
}
