package httpapi

import (
	"net/http"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// minuteView is one minute of a stream: what it delivered and which calls
// failed, counted by every relay process sharing the store.
type minuteView struct {
	Start          string `json:"start"`
	Delivered      uint64 `json:"delivered"`
	FailedAttempts uint64 `json:"failed_attempts"`
}

// endpointDetail is one endpoint's view with its last hour, minute by
// minute: the answer to GET of one endpoint.
type endpointDetail struct {
	endpointView
	PerMinute []minuteView `json:"per_minute"`
}

func viewMinutes(ms []schema.Minute) []minuteView {
	out := make([]minuteView, len(ms))
	for i, m := range ms {
		out[i] = minuteView{Start: rfc3339(m.StartMs), Delivered: m.Delivered, FailedAttempts: m.Failed}
	}
	return out
}

func (a *api) getEndpoint(w http.ResponseWriter, r *http.Request) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	a.writeEndpoint(w, r, p, id)
}

// writeEndpoint answers the endpoint id as GET of it does.
func (a *api) writeEndpoint(w http.ResponseWriter, r *http.Request, p store.Partition, id string) {
	s, err := a.Admin.Endpoint(r.Context(), p, id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// A second read, not at the endpoint's instant: the minutes are a
	// chart, and each row is exact on its own.
	ms, err := a.Admin.PerMinute(r.Context(), p, id, a.Clock.Now().UnixMilli())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, endpointDetail{endpointView: viewEndpoint(s), PerMinute: viewMinutes(ms)})
}
