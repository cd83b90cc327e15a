package httpapi

import (
	"net/http"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// testView is the test outcome a request queued.
type testView struct {
	Endpoint      string `json:"endpoint"`
	ReservationID string `json:"reservation_id"`
	Type          string `json:"type"`
}

// testEndpoint queues a test delivery on one endpoint: an operator event of
// type endpoint.test, which goes to the endpoint it names and to no other
// whatever the kinds of either, under a reservation id of relay's own
// ("relay." ...), which no producer may take. It is retained and shown as
// any outcome is, and delivered by the stream like any row.
func (a *api) testEndpoint(w http.ResponseWriter, r *http.Request) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	s, err := a.Admin.Endpoint(r.Context(), p, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	switch {
	case s.Endpoint.DisabledReason == outbox.ReasonDeleting:
		a.fail(w, r, outbox.ErrDeleting)
		return
	case !s.Endpoint.Enabled:
		// Queued, it would wait for an enable: a test shows nothing then.
		WriteProblem(w, r, NewProblem(SlugEndpointDisabled, "the endpoint is disabled; enable it to test it"))
		return
	}
	o := schema.NewEvent(schema.Event{Type: schema.EventTest, Endpoint: id}, a.Clock.Now().UnixMilli())
	statuses, err := a.Appender.Append(r.Context(), p, []schema.Outcome{o})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	switch st := statuses[0]; st.Code {
	case outbox.Accepted:
		if a.Ingested != nil {
			var rows []outbox.StreamRef
			if !st.Due {
				rows = append(rows, st.Ref(o.ReservationID))
			}
			a.Ingested(p, rows, st.Due)
		} else {
			a.wake(p)
		}
		a.audit(r, "endpoint tested", "namespace", p.Namespace, "endpoint", id, "reservation_id", o.ReservationID)
	case outbox.Duplicate:
		// A second request within the same millisecond: the same test.
	case outbox.NoEndpoint:
		// Deleted since it was read.
		a.fail(w, r, outbox.ErrNotFound)
		return
	default:
		a.log.ErrorContext(r.Context(), "test outcome refused", "request_id", RequestID(r.Context()), "status", st.Code, "detail", st.Detail)
		WriteProblem(w, r, NewProblem(SlugInternal, ""))
		return
	}
	WriteJSON(w, http.StatusAccepted, testView{Endpoint: id, ReservationID: o.ReservationID, Type: string(schema.EventTest)})
}
