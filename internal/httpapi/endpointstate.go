package httpapi

import (
	"errors"
	"net/http"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/timers"
)

// The repairs of a stream that need no endpoint body: enable, disable,
// and retry every pending row now.

func (a *api) enableEndpoint(w http.ResponseWriter, r *http.Request)  { a.setEnabled(w, r, true) }
func (a *api) disableEndpoint(w http.ResponseWriter, r *http.Request) { a.setEnabled(w, r, false) }

// setEnabled changes only the endpoint's enabled flag, whatever its other
// settings (a redacted header included), and answers it as GET does.
func (a *api) setEnabled(w http.ResponseWriter, r *http.Request, enabled bool) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.SetEnabled(r.Context(), p, id, enabled)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if res.Changed {
		msg := "endpoint disabled"
		if enabled {
			msg = "endpoint enabled"
			a.wake(p)
		}
		a.audit(r, msg, "namespace", p.Namespace, "endpoint", id)
	}
	a.writeEndpoint(w, r, p, id)
}

// retryView is what a retry did to a stream.
type retryView struct {
	Endpoint string `json:"endpoint"`
	// PendingRows is how many rows the stream had pending.
	PendingRows uint64 `json:"pending_rows"`
	// NextAttemptAt is when they are tried; null when none is pending.
	NextAttemptAt *string `json:"next_attempt_at"`
	// Enabled: this request enabled the endpoint (enable=true).
	Enabled bool `json:"enabled"`
}

// retryStream makes every pending row of an endpoint's stream go at the
// next fire, now, with its backoff reset; with enable=true it enables a
// disabled endpoint in the same step.
func (a *api) retryStream(w http.ResponseWriter, r *http.Request) {
	p, id, q, prob := streamQuery(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	enable, prob := queryBool(q, "enable")
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.Retry(r.Context(), p, id, enable)
	if errors.Is(err, outbox.ErrDisabled) {
		WriteProblem(w, r, NewProblem(SlugEndpointDisabled, "the endpoint is disabled; enable it, or retry with enable=true to enable it and deliver in one step"))
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := retryView{Endpoint: id, PendingRows: res.Rows, Enabled: res.Enabled}
	status := http.StatusOK
	if res.DueAtMs != timers.NeverMs {
		at := rfc3339(res.DueAtMs)
		out.NextAttemptAt, status = &at, http.StatusAccepted
	}
	if res.Enabled || res.DueAtMs != timers.NeverMs {
		a.audit(r, "stream retried", "namespace", p.Namespace, "endpoint", id, "pending_rows", res.Rows, "enabled", res.Enabled)
		a.wake(p)
	}
	WriteJSON(w, status, out)
}

// recoveryPreviewView counts what a recovery of a range would find.
type recoveryPreviewView struct {
	Endpoint  string `json:"endpoint"`
	Since     string `json:"since"`
	Until     string `json:"until"`
	Delivered uint64 `json:"delivered"`
	Pending   uint64 `json:"pending"`
	Examined  uint64 `json:"examined"`
	// Partial: the count stopped at its bound; the range holds at least
	// as many.
	Partial bool `json:"partial"`
}

// previewRecovery counts, writing nothing, the outcomes a recovery of
// [since, until) would queue again on the endpoint.
func (a *api) previewRecovery(w http.ResponseWriter, r *http.Request) {
	p, id, q, prob := streamQuery(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var times [2]int64
	for i, name := range []string{"since", "until"} {
		if !q.Has(name) {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, name+" is required"))
			return
		}
		if times[i], prob = queryTime(q, name); prob != nil {
			WriteProblem(w, r, prob)
			return
		}
	}
	res, err := a.Admin.PreviewRecovery(r.Context(), p, id, times[0], times[1])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, recoveryPreviewView{
		Endpoint: id, Since: rfc3339(times[0]), Until: rfc3339(times[1]),
		Delivered: res.Delivered, Pending: res.Pending, Examined: res.Examined, Partial: res.Partial,
	})
}
