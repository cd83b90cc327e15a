package httpapi

import (
	"net/http"
)

// OldestPending is the backlog sampler's last complete pass: when the
// oldest pending row was accepted (0 when none was pending) and when the
// pass ended; ok false before the first pass, or where no sampler runs.
type OldestPending func() (acceptedMs, sampledMs int64, ok bool)

type oldestView struct {
	// AcceptedAt is null when no row was pending.
	AcceptedAt *string `json:"accepted_at"`
	SampledAt  string  `json:"sampled_at"`
}

type fleetView struct {
	FailingNamespaces  int64       `json:"failing_namespaces"`
	DisabledNamespaces int64       `json:"disabled_namespaces"`
	Backlog            backlogView `json:"backlog"`
	OldestPending      *oldestView `json:"oldest_pending"`
}

// getFleet answers what every namespace holds, from the store's bucket
// totals: its cost does not grow with the number of namespaces. It spans
// namespaces, so a token bound to one may not call it, admin or not.
func (a *api) getFleet(w http.ResponseWriter, r *http.Request) {
	if pr, ok := PrincipalFrom(r.Context()); !ok || pr.Namespace != "" {
		WriteProblem(w, r, NewProblem(SlugForbidden, "the token is bound to a namespace; the fleet's figures take a token bound to none"))
		return
	}
	if _, prob := readQuery(r); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	f, err := a.Admin.Fleet(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := fleetView{FailingNamespaces: f.FailingNamespaces, DisabledNamespaces: f.DisabledNamespaces,
		Backlog: backlogView{Rows: f.Backlog.Rows, Bytes: f.Backlog.Bytes}}
	if a.Oldest != nil {
		if acceptedMs, sampledMs, ok := a.Oldest(); ok {
			v.OldestPending = &oldestView{SampledAt: rfc3339(sampledMs)}
			if acceptedMs != 0 {
				at := rfc3339(acceptedMs)
				v.OldestPending.AcceptedAt = &at
			}
		}
	}
	WriteJSON(w, http.StatusOK, v)
}
