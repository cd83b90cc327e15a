package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// The retained history of outcomes: one outcome's story on every endpoint,
// a filtered list of them, a resend, an erasure and the recovery of a
// time range.

const defaultOutcomesPage = 50

// outcomeStreamView is an outcome on one endpoint.
type outcomeStreamView struct {
	Endpoint    string             `json:"endpoint"`
	State       string             `json:"state"`
	DeliveredAt string             `json:"delivered_at,omitempty"`
	DroppedAt   string             `json:"dropped_at,omitempty"`
	Attempts    []attemptEntryView `json:"attempts"`
	// AttemptCount counts every attempt, those no longer listed included.
	AttemptCount uint32 `json:"attempt_count"`
	Corrupt      bool   `json:"corrupt,omitempty"`
}

type outcomeView struct {
	ReservationID string              `json:"reservation_id"`
	Seq           uint64              `json:"seq"`
	AcceptedAt    string              `json:"accepted_at"`
	Outcome       schema.Outcome      `json:"outcome"`
	Endpoints     []outcomeStreamView `json:"endpoints"`
}

// outcomeSummaryStream is an outcome's state on one endpoint, in a list.
type outcomeSummaryStream struct {
	Endpoint string `json:"endpoint"`
	State    string `json:"state"`
	// At is when it was delivered or dropped.
	At string `json:"at,omitempty"`
}

type outcomeSummaryView struct {
	ReservationID string                 `json:"reservation_id"`
	Seq           uint64                 `json:"seq"`
	AcceptedAt    string                 `json:"accepted_at"`
	Kind          schema.Kind            `json:"kind,omitempty"`
	Endpoints     []outcomeSummaryStream `json:"endpoints"`
}

type outcomesPageView struct {
	Outcomes   []outcomeSummaryView `json:"outcomes"`
	NextCursor string               `json:"next_cursor,omitempty"`
	PrevCursor string               `json:"prev_cursor,omitempty"`
}

// outcomeParams are the request's namespace and reservation id, or the
// problem of a bad one.
func outcomeParams(r *http.Request) (store.Partition, string, *Problem) {
	p, prob := partition(r)
	if prob != nil {
		return p, "", prob
	}
	rid := chi.URLParam(r, "rid")
	if err := outbox.ValidateClientReservationID(rid); err != nil {
		return p, rid, NewProblem(SlugInvalidRequest, err.Error())
	}
	return p, rid, nil
}

// stateAt is when an outcome reached its state on an endpoint, for the
// states that have one.
func stateAt(s outbox.OutcomeStream) string {
	if s.AtMs <= 0 || (s.State != "delivered" && s.State != "dropped") {
		return ""
	}
	return rfc3339(s.AtMs)
}

// getOutcome shows one retained outcome as accepted and its story on every
// endpoint that existed when it was.
func (a *api) getOutcome(w http.ResponseWriter, r *http.Request) {
	p, rid, prob := outcomeParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	v, err := a.Admin.Outcome(r.Context(), p, rid)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := outcomeView{
		ReservationID: rid, Seq: v.Seq, AcceptedAt: rfc3339(v.AcceptedMs), Outcome: v.Outcome,
		Endpoints: make([]outcomeStreamView, len(v.Streams)),
	}
	for i, s := range v.Streams {
		sv := outcomeStreamView{Endpoint: s.Endpoint, State: s.State, AttemptCount: s.Attempts.Total, Corrupt: s.Corrupt}
		switch at := stateAt(s); s.State {
		case "delivered":
			sv.DeliveredAt = at
		case "dropped":
			sv.DroppedAt = at
		}
		sv.Attempts, _ = attemptsView(s.Attempts)
		out.Endpoints[i] = sv
	}
	WriteJSON(w, http.StatusOK, out)
}

// queryTime reads the RFC 3339 query value name, as Unix milliseconds;
// absent is 0.
func queryTime(q map[string][]string, name string) (int64, *Problem) {
	vs, ok := q[name]
	if !ok {
		return 0, nil
	}
	if len(vs) != 1 {
		return 0, NewProblem(SlugInvalidRequest, name+" must be given once")
	}
	return parseTime(name, vs[0])
}

// parseTime reads an RFC 3339 time after the Unix epoch as Unix
// milliseconds. 0 means "unbounded" to the outbox, so the epoch itself and
// earlier are refused rather than silently widening a range.
func parseTime(name, s string) (int64, *Problem) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, NewProblem(SlugInvalidRequest, name+" must be an RFC 3339 time, such as 2025-11-30T00:00:00Z")
	}
	ms := t.UnixMilli()
	if ms < 1 {
		return 0, NewProblem(SlugInvalidRequest, name+" must be after 1970-01-01T00:00:00Z")
	}
	return ms, nil
}

// listOutcomes pages through a namespace's retained outcomes in acceptance
// order or newest first, both ways, filtered by endpoint, state, kind,
// acceptance time and reservation id prefix.
func (a *api) listOutcomes(w http.ResponseWriter, r *http.Request) {
	p, prob := partition(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	q, prob := readQuery(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var f outbox.OutcomeFilter
	if q.Has("endpoint") {
		f.Endpoint = q.Get("endpoint")
		if err := schema.ValidateEndpointID(f.Endpoint); err != nil {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "endpoint: "+err.Error()))
			return
		}
	}
	if q.Has("state") {
		f.State = q.Get("state")
		switch f.State {
		case "pending", "delivered", "dropped":
		case outbox.StateFiltered:
			if f.Endpoint == "" {
				WriteProblem(w, r, NewProblem(SlugInvalidRequest, "state filtered needs an endpoint"))
				return
			}
		default:
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "state must be pending, delivered, dropped or filtered"))
			return
		}
	}
	if q.Has("kind") {
		f.Kind = schema.Kind(q.Get("kind"))
		if !f.Kind.Valid() {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "kind must be committed, aborted, expired or read_served"))
			return
		}
	}
	if q.Has("rid_prefix") {
		f.RIDPrefix = q.Get("rid_prefix")
		if schema.ValidateReservationID(f.RIDPrefix) != nil {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "rid_prefix must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'"))
			return
		}
	}
	if q.Has("order") {
		switch q.Get("order") {
		case "asc":
		case "desc":
			f.NewestFirst = true
		default:
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "order must be asc (oldest first) or desc (newest first)"))
			return
		}
	}
	if f.SinceMs, prob = queryTime(q, "since"); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	if f.UntilMs, prob = queryTime(q, "until"); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	if f.UntilMs > 0 && f.UntilMs <= f.SinceMs {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, "until must be after since"))
		return
	}
	limit := defaultOutcomesPage
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > outbox.MaxOutcomesPage {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "limit must be a whole number from 1 to 100"))
			return
		}
		limit = n
	}
	var next []byte
	if q.Has("cursor") {
		// An empty cursor is a client's bug, not the first page.
		b, err := base64.RawURLEncoding.DecodeString(q.Get("cursor"))
		if err != nil || len(b) != 8 && len(b) != 9 {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "cursor must be a next_cursor or prev_cursor this API returned"))
			return
		}
		next = b
	}
	page, err := a.Admin.Outcomes(r.Context(), p, f, next, limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := outcomesPageView{Outcomes: make([]outcomeSummaryView, len(page.Outcomes))}
	for i, o := range page.Outcomes {
		sv := outcomeSummaryView{ReservationID: o.RID, Seq: o.Seq, AcceptedAt: rfc3339(o.AcceptedMs), Kind: o.Kind,
			Endpoints: make([]outcomeSummaryStream, len(o.Streams))}
		for j, s := range o.Streams {
			sv.Endpoints[j] = outcomeSummaryStream{Endpoint: s.Endpoint, State: s.State, At: stateAt(s)}
		}
		out.Outcomes[i] = sv
	}
	if page.Next != nil {
		out.NextCursor = base64.RawURLEncoding.EncodeToString(page.Next)
	}
	if page.Prev != nil {
		out.PrevCursor = base64.RawURLEncoding.EncodeToString(page.Prev)
	}
	WriteJSON(w, http.StatusOK, out)
}

// resend queues a retained, delivered outcome on an endpoint's stream again.
func (a *api) resend(w http.ResponseWriter, r *http.Request) {
	p, id, rid, prob := streamRowParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.Resend(r.Context(), p, id, rid)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, "outcome resent", "namespace", p.Namespace, "endpoint", id, "reservation_id", rid, "seq", res.Seq)
	// A disabled endpoint's stream is parked: the outcome waits for the
	// enable, with no due time to show.
	var due *string
	if res.DueAtMs != timers.NeverMs {
		s := rfc3339(res.DueAtMs)
		due = &s
		a.wake(p)
	}
	WriteJSON(w, http.StatusAccepted, struct {
		Seq   uint64  `json:"seq"`
		DueAt *string `json:"due_at"`
	}{res.Seq, due})
}

// eraseOutcome removes a retained outcome from the namespace at once.
func (a *api) eraseOutcome(w http.ResponseWriter, r *http.Request) {
	p, rid, prob := outcomeParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.Erase(r.Context(), p, rid)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, "outcome erased", "namespace", p.Namespace, "reservation_id", rid)
	dropped := res.Dropped
	if dropped == nil {
		dropped = []string{}
	}
	WriteJSON(w, http.StatusOK, struct {
		ReservationID string   `json:"reservation_id"`
		Dropped       []string `json:"dropped"`
	}{rid, dropped})
}

type recoveryView struct {
	ID         string  `json:"id"`
	Endpoint   string  `json:"endpoint"`
	State      string  `json:"state"`
	Since      string  `json:"since"`
	Until      string  `json:"until"`
	Examined   uint64  `json:"examined"`
	Queued     uint64  `json:"queued"`
	Total      uint64  `json:"total"`
	CreatedAt  string  `json:"created_at"`
	FinishedAt *string `json:"finished_at,omitempty"`
}

func viewRecovery(j schema.Recovery) recoveryView {
	v := recoveryView{
		ID: j.ID, Endpoint: j.Endpoint, State: j.State.String(), Since: rfc3339(j.SinceMs), Until: rfc3339(j.UntilMs),
		Examined: j.Examined, Queued: j.Queued, CreatedAt: rfc3339(j.CreatedMs),
	}
	if j.EndSeq > j.StartSeq {
		v.Total = j.EndSeq - j.StartSeq
	}
	if j.FinishedMs > 0 {
		s := rfc3339(j.FinishedMs)
		v.FinishedAt = &s
	}
	return v
}

func recoveryPath(ns, id, job string) string {
	return "/v1/namespaces/" + ns + "/endpoints/" + id + "/recoveries/" + job
}

// startRecovery starts a recovery of an endpoint: every retained outcome it had
// delivered that was accepted in [since, until) is queued again.
func (a *api) startRecovery(w http.ResponseWriter, r *http.Request) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var body struct {
		Since *string `json:"since"`
		Until *string `json:"until"`
	}
	if prob := readJSON(r, &body); prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	var times [2]int64
	for i, f := range []struct {
		name string
		v    *string
	}{{"since", body.Since}, {"until", body.Until}} {
		if f.v == nil {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, f.name+" is required"))
			return
		}
		if times[i], prob = parseTime(f.name, *f.v); prob != nil {
			WriteProblem(w, r, prob)
			return
		}
	}
	job, err := a.Admin.Recover(r.Context(), p, id, times[0], times[1])
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, "recovery started", "namespace", p.Namespace, "endpoint", id, "recovery", job.ID)
	a.wake(p)
	w.Header().Set("Location", recoveryPath(p.Namespace, id, job.ID))
	WriteJSON(w, http.StatusAccepted, viewRecovery(job))
}

// validJobID reports whether s is a recovery id: 32 lowercase hex.
func validJobID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// getRecovery shows a recovery job of an endpoint: the last one started.
func (a *api) getRecovery(w http.ResponseWriter, r *http.Request) {
	p, id, prob := streamParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	job := chi.URLParam(r, "job")
	if !validJobID(job) {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, "recovery id must be the 32 lowercase hex a recovery was started with"))
		return
	}
	j, err := a.Admin.Recovery(r.Context(), p, id, job)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	WriteJSON(w, http.StatusOK, viewRecovery(j))
}
