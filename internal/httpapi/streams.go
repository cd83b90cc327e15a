package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/timers"
)

const defaultPendingPage = 50

type attemptView struct {
	At     string `json:"at"`
	Status int    `json:"status,omitempty"`
	Error  string `json:"error"`
	Count  uint32 `json:"count"`
}

// attemptEntryView is one of a row's recorded attempts.
type attemptEntryView struct {
	At         string `json:"at"`
	DurationMs uint32 `json:"duration_ms"`
	Status     int    `json:"status,omitempty"`
	// Error is absent for an attempt that delivered.
	Error           string `json:"error,omitempty"`
	ResponseExcerpt string `json:"response_excerpt,omitempty"`
}

type pendingRowView struct {
	ReservationID  string             `json:"reservation_id,omitempty"`
	Sequence       uint64             `json:"sequence"`
	Kind           schema.Kind        `json:"kind,omitempty"`
	OccurredUnixMs int64              `json:"occurred_unix_ms,omitempty"`
	LastAttempt    *attemptView       `json:"last_attempt"`
	Attempts       []attemptEntryView `json:"attempts"`
	AttemptCount   uint32             `json:"attempt_count"`
	Corrupt        bool               `json:"corrupt,omitempty"`
}

// attemptsView shows a row's attempts, oldest first, and its last failed
// one with the count of all, as last_attempt always did.
func attemptsView(h schema.Attempts) ([]attemptEntryView, *attemptView) {
	out := make([]attemptEntryView, len(h.Last))
	var last *attemptView
	for i, a := range h.Last {
		out[i] = attemptEntryView{At: rfc3339(a.AtMs), DurationMs: a.DurationMs, Status: a.Status, Error: a.ErrorClass, ResponseExcerpt: a.Excerpt}
		if !a.Delivered() {
			last = &attemptView{At: rfc3339(a.AtMs), Status: a.Status, Error: a.ErrorClass, Count: h.Total}
		}
	}
	return out, last
}

type outboxView struct {
	Endpoint      string           `json:"endpoint"`
	Backlog       backlogView      `json:"backlog"`
	State         string           `json:"state"`
	NextAttemptAt *string          `json:"next_attempt_at"`
	FailedFires   uint32           `json:"failed_fires"`
	Rows          []pendingRowView `json:"rows"`
	NextCursor    *string          `json:"next_cursor"`
}

// streamState names what the stream's timer is doing.
func streamState(t *outbox.StreamTimer, nowMs int64) string {
	switch {
	case t == nil:
		return "none"
	case t.Corrupt:
		return "corrupt"
	case t.Leased:
		return "delivering"
	case t.DueAtMs == timers.NeverMs:
		return "parked"
	case t.FailedFires > 0:
		return "backing_off"
	case t.DueAtMs <= nowMs:
		return "due"
	}
	return "idle"
}

// getOutbox shows a page of one stream's pending rows in sequence order,
// each with its last attempts and their count, and what the stream is doing.
func (a *api) getOutbox(w http.ResponseWriter, r *http.Request) {
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
	id := q.Get("endpoint")
	if err := schema.ValidateEndpointID(id); err != nil {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, "endpoint: "+err.Error()))
		return
	}
	limit := defaultPendingPage
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > outbox.MaxPendingPage {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "limit must be a whole number from 1 to 100"))
			return
		}
		limit = n
	}
	var after []byte
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(b) == 0 {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "cursor must be a next_cursor this API returned"))
			return
		}
		after = b
	}
	if q.Has("from_sequence") {
		// The page that starts at a row, found by its place in the log:
		// an outcome's page links to where it waits.
		seq, err := strconv.ParseUint(q.Get("from_sequence"), 10, 64)
		switch {
		case err != nil:
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "from_sequence must be a sequence number, a whole number from 0"))
			return
		case after != nil:
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "give cursor or from_sequence, not both"))
			return
		}
		if c := outbox.QueueFrom(id, seq); c != nil {
			after = c.Bytes()
		}
	}
	page, err := a.Admin.Pending(r.Context(), p, id, after, limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := outboxView{
		Endpoint:      id,
		Backlog:       backlogView{Rows: page.Backlog.Rows, Bytes: page.Backlog.Bytes},
		State:         streamState(page.Timer, a.Clock.Now().UnixMilli()),
		NextAttemptAt: nextAttempt(page.Timer, page.Backlog),
		Rows:          make([]pendingRowView, len(page.Rows)),
	}
	if page.Timer != nil {
		v.FailedFires = page.Timer.FailedFires
	}
	for i, row := range page.Rows {
		rv := pendingRowView{ReservationID: row.RID, Sequence: row.Seq, Kind: row.Kind, OccurredUnixMs: row.OccurredUnixMs, Corrupt: row.Corrupt}
		rv.Attempts, rv.LastAttempt = attemptsView(row.Attempts)
		rv.AttemptCount = row.Attempts.Total
		v.Rows[i] = rv
	}
	if page.Next != nil {
		c := base64.RawURLEncoding.EncodeToString(page.Next)
		v.NextCursor = &c
	}
	WriteJSON(w, http.StatusOK, v)
}

// replay makes a stuck row the first its stream tries, now.
func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	p, id, rid, prob := streamRowParams(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	res, err := a.Admin.Replay(r.Context(), p, id, rid)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, "outcome replayed", "namespace", p.Namespace, "endpoint", id, "reservation_id", rid, "sequence", res.Seq)
	a.wake(p)
	WriteJSON(w, http.StatusAccepted, struct {
		Endpoint      string `json:"endpoint"`
		ReservationID string `json:"reservation_id"`
		Sequence      uint64 `json:"sequence"`
		NextAttemptAt string `json:"next_attempt_at"`
	}{id, rid, res.Seq, rfc3339(res.DueAtMs)})
}
