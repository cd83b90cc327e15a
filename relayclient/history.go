package relayclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// OutcomeState is an outcome's state on one endpoint.
type OutcomeState string

// The outcome states.
const (
	OutcomePending   OutcomeState = "pending"
	OutcomeDelivered OutcomeState = "delivered"
	// OutcomeDropped: dropped by a forced delete or an erasure.
	OutcomeDropped OutcomeState = "dropped"
	// OutcomeFiltered: the endpoint's kinds did not take it.
	OutcomeFiltered OutcomeState = "filtered"
)

// OutcomeStory is a retained outcome as it was accepted, and what became
// of it on each endpoint that existed then.
type OutcomeStory struct {
	ReservationID string `json:"reservation_id"`
	// Seq is its place in the namespace's order.
	Seq        uint64    `json:"seq"`
	AcceptedAt time.Time `json:"accepted_at"`
	Outcome    Outcome   `json:"outcome"`
	// Endpoints are in endpoint id order.
	Endpoints []OutcomeOnEndpoint `json:"endpoints"`
}

// OutcomeOnEndpoint is an outcome on one endpoint, with its last attempts.
type OutcomeOnEndpoint struct {
	Endpoint string       `json:"endpoint"`
	State    OutcomeState `json:"state"`
	// DeliveredAt is set when State is delivered; DroppedAt when dropped.
	DeliveredAt *time.Time `json:"delivered_at,omitempty"`
	DroppedAt   *time.Time `json:"dropped_at,omitempty"`
	// Attempts are the last attempts, oldest first, the delivering one
	// last.
	Attempts     []AttemptRecord `json:"attempts"`
	AttemptCount uint32          `json:"attempt_count"`
	Corrupt      bool            `json:"corrupt,omitempty"`
}

// OutcomesQuery filters and pages the outcome list. Zero fields select all.
type OutcomesQuery struct {
	// Endpoint keeps the outcomes that endpoint had.
	Endpoint string
	// State keeps the outcomes in that state, on Endpoint or on any
	// endpoint; OutcomeFiltered needs Endpoint.
	State OutcomeState
	// Kind keeps the outcomes of that kind: KindCommitted, KindAborted,
	// KindExpired or KindReadServed.
	Kind Kind
	// Since and Until keep the outcomes accepted in [Since, Until).
	Since, Until time.Time
	// RIDPrefix keeps the outcomes whose reservation id starts with it.
	RIDPrefix string
	// NewestFirst lists them newest first instead of in acceptance order.
	NewestFirst bool
	// Cursor is a page's NextCursor, or its PrevCursor to go back, with
	// the same filter and order; empty for the first page.
	Cursor string
	// Limit is the outcomes per page, 1 to 100; 0 is relay's default (50).
	Limit int
}

// OutcomesPage is one page of the outcome list.
type OutcomesPage struct {
	Outcomes []OutcomeSummary `json:"outcomes"`
	// NextCursor is the next page's cursor; empty on the last page. A page
	// may hold fewer than Limit outcomes, even none, and still have one.
	NextCursor string `json:"next_cursor,omitempty"`
	// PrevCursor reads the page before, in the same order; empty on a
	// first page.
	PrevCursor string `json:"prev_cursor,omitempty"`
}

// OutcomeSummary is one outcome of a list: its kind (empty when its record
// does not decode) and its state on each endpoint.
type OutcomeSummary struct {
	ReservationID string                 `json:"reservation_id"`
	Seq           uint64                 `json:"seq"`
	AcceptedAt    time.Time              `json:"accepted_at"`
	Kind          Kind                   `json:"kind,omitempty"`
	Endpoints     []OutcomeEndpointState `json:"endpoints"`
}

// OutcomeEndpointState is an outcome's state on one endpoint; At is when
// it was delivered or dropped.
type OutcomeEndpointState struct {
	Endpoint string       `json:"endpoint"`
	State    OutcomeState `json:"state"`
	At       *time.Time   `json:"at,omitempty"`
}

// ResendResult is the answer to Resend.
type ResendResult struct {
	// Seq is the outcome's own place in the namespace's order.
	Seq uint64 `json:"seq"`
	// DueAt is when the stream is next delivered; nil while the endpoint
	// is disabled.
	DueAt *time.Time `json:"due_at"`
}

// ErasedOutcome is the answer to EraseOutcome.
type ErasedOutcome struct {
	ReservationID string `json:"reservation_id"`
	// Dropped names the endpoints on which it was still pending.
	Dropped []string `json:"dropped"`
}

// RecoveryState is where a recovery is.
type RecoveryState string

// The recovery states.
const (
	RecoveryRunning RecoveryState = "running"
	RecoveryDone    RecoveryState = "done"
	// RecoveryAborted: the endpoint is being deleted.
	RecoveryAborted RecoveryState = "aborted"
)

// Recovery is a recovery job of an endpoint.
type Recovery struct {
	ID       string        `json:"id"`
	Endpoint string        `json:"endpoint"`
	State    RecoveryState `json:"state"`
	// Since and Until are the range of acceptance times, [Since, Until).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Examined counts the outcomes looked at, of at most Total; Queued
	// those queued again.
	Examined   uint64     `json:"examined"`
	Queued     uint64     `json:"queued"`
	Total      uint64     `json:"total"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

func checkRID(op, rid string) error {
	if !validClientRID(rid) {
		return fmt.Errorf("%w: %s: reservation id must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', not starting \"s:\"", ErrInvalid, op)
	}
	return nil
}

func outcomePath(ns, rid string) string { return "/v1/namespaces/" + ns + "/outcomes/" + rid }

// Outcome returns the retained outcome of reservation rid in namespace ns
// and its story on every endpoint (scope outbox:read); a *Problem of
// TypeNotFound when none is retained.
func (c *Client) Outcome(ctx context.Context, ns, rid string) (OutcomeStory, error) {
	var out OutcomeStory
	if err := checkNamespace("get outcome", ns); err != nil {
		return out, err
	}
	if err := checkRID("get outcome", rid); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: "get outcome", method: http.MethodGet, path: outcomePath(ns, rid), auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("get outcome", a, &out)
}

// Outcomes returns a page of the retained outcomes of namespace ns in
// acceptance order, or newest first, filtered by q (scope outbox:read).
// Page on with q.Cursor set to NextCursor until it is empty, and back
// with PrevCursor.
func (c *Client) Outcomes(ctx context.Context, ns string, q OutcomesQuery) (OutcomesPage, error) {
	var out OutcomesPage
	if err := checkNamespace("list outcomes", ns); err != nil {
		return out, err
	}
	v := url.Values{}
	if q.Endpoint != "" {
		if !validName(q.Endpoint) {
			return out, fmt.Errorf("%w: list outcomes: endpoint id must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrInvalid)
		}
		v.Set("endpoint", q.Endpoint)
	}
	if q.State != "" {
		v.Set("state", string(q.State))
	}
	if q.Kind != "" {
		v.Set("kind", string(q.Kind))
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.RIDPrefix != "" {
		if !validRID(q.RIDPrefix) {
			return out, fmt.Errorf("%w: list outcomes: rid prefix must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'", ErrInvalid)
		}
		v.Set("rid_prefix", q.RIDPrefix)
	}
	if q.NewestFirst {
		v.Set("order", "desc")
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	a, err := c.do(ctx, call{op: "list outcomes", method: http.MethodGet, path: "/v1/namespaces/" + ns + "/outcomes", query: v, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("list outcomes", a, &out)
}

// Resend queues the retained outcome of reservation rid, which endpoint
// delivered, on its stream again at its own place (scope admin). One
// still pending there is a *Problem of TypeStillPending (Replay hurries
// it); one the endpoint never delivered is TypeNotDelivered.
func (c *Client) Resend(ctx context.Context, ns, endpoint, rid string) (ResendResult, error) {
	var out ResendResult
	if err := checkEndpoint("resend", ns, endpoint); err != nil {
		return out, err
	}
	if err := checkRID("resend", rid); err != nil {
		return out, err
	}
	path := endpointPath(ns, endpoint) + "/outcomes/" + rid + "/resend"
	a, err := c.do(ctx, call{op: "resend", method: http.MethodPost, path: path, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("resend", a, &out)
}

// EraseOutcome removes the retained outcome of reservation rid from
// namespace ns at once (scope admin), dropping it where it is pending. The
// reservation id still answers duplicate at ingest for its window.
func (c *Client) EraseOutcome(ctx context.Context, ns, rid string) (ErasedOutcome, error) {
	var out ErasedOutcome
	if err := checkNamespace("erase outcome", ns); err != nil {
		return out, err
	}
	if err := checkRID("erase outcome", rid); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: "erase outcome", method: http.MethodDelete, path: outcomePath(ns, rid), auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("erase outcome", a, &out)
}

// Recover starts a recovery of endpoint (scope admin): every retained
// outcome it delivered that was accepted in [since, until) is queued
// again, by a background job; follow it with Recovery. One running
// already is a *Problem of TypeRecoveryRunning.
func (c *Client) Recover(ctx context.Context, ns, endpoint string, since, until time.Time) (Recovery, error) {
	var out Recovery
	if err := checkEndpoint("recover", ns, endpoint); err != nil {
		return out, err
	}
	body := struct {
		Since string `json:"since"`
		Until string `json:"until"`
	}{since.UTC().Format(time.RFC3339Nano), until.UTC().Format(time.RFC3339Nano)}
	a, err := c.do(ctx, call{op: "recover", method: http.MethodPost, path: endpointPath(ns, endpoint) + "/recover", body: body, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("recover", a, &out)
}

// Recovery returns the recovery job of endpoint (scope outbox:read); a
// *Problem of TypeNotFound when it is not the endpoint's last.
func (c *Client) Recovery(ctx context.Context, ns, endpoint, job string) (Recovery, error) {
	var out Recovery
	if err := checkEndpoint("get recovery", ns, endpoint); err != nil {
		return out, err
	}
	if !validJobID(job) {
		return out, fmt.Errorf("%w: get recovery: recovery id must be 32 lowercase hex", ErrInvalid)
	}
	a, err := c.do(ctx, call{op: "get recovery", method: http.MethodGet, path: endpointPath(ns, endpoint) + "/recoveries/" + job, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("get recovery", a, &out)
}

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

// RecoveryPreview is the answer to PreviewRecovery.
type RecoveryPreview struct {
	Endpoint string    `json:"endpoint"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	// Delivered counts the outcomes of the range the endpoint delivered:
	// those a recovery would queue again. Pending counts those still
	// pending on it, which a recovery leaves.
	Delivered uint64 `json:"delivered"`
	Pending   uint64 `json:"pending"`
	// Examined is how many outcomes of the namespace the count read.
	Examined uint64 `json:"examined"`
	// Partial: the count stopped at its bound, so the range holds at
	// least as many.
	Partial bool `json:"partial"`
}

// PreviewRecovery counts, writing nothing, what a recovery of endpoint over
// outcomes accepted in [since, until) would find (scope outbox:read).
func (c *Client) PreviewRecovery(ctx context.Context, ns, endpoint string, since, until time.Time) (RecoveryPreview, error) {
	var out RecoveryPreview
	if err := checkEndpoint("preview recovery", ns, endpoint); err != nil {
		return out, err
	}
	q := url.Values{"since": {since.UTC().Format(time.RFC3339Nano)}, "until": {until.UTC().Format(time.RFC3339Nano)}}
	a, err := c.do(ctx, call{op: "preview recovery", method: http.MethodGet, path: endpointPath(ns, endpoint) + "/recover", query: q, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("preview recovery", a, &out)
}
