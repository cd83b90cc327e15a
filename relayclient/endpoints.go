package relayclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

func endpointPath(ns, id string) string { return "/v1/namespaces/" + ns + "/endpoints/" + id }

// ListEndpoints returns every endpoint of namespace ns (at most 8), in id
// order.
func (c *Client) ListEndpoints(ctx context.Context, ns string) ([]Endpoint, error) {
	if err := checkNamespace("list endpoints", ns); err != nil {
		return nil, err
	}
	a, err := c.do(ctx, call{op: "list endpoints", method: http.MethodGet, path: "/v1/namespaces/" + ns + "/endpoints", auth: true, retry: true})
	if err != nil {
		return nil, err
	}
	var out struct {
		Endpoints []Endpoint `json:"endpoints"`
	}
	if err := decode("list endpoints", a, &out); err != nil {
		return nil, err
	}
	return out.Endpoints, nil
}

// Endpoint returns endpoint id of namespace ns; a *Problem of TypeNotFound
// when none is registered.
func (c *Client) Endpoint(ctx context.Context, ns, id string) (Endpoint, error) {
	var out Endpoint
	if err := checkEndpoint("get endpoint", ns, id); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: "get endpoint", method: http.MethodGet, path: endpointPath(ns, id), auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("get endpoint", a, &out)
}

// PutEndpoint registers endpoint id of namespace ns, or replaces its
// configuration. A Standard Webhooks secret relay generated is in the
// answer's Secret, this once.
func (c *Client) PutEndpoint(ctx context.Context, ns, id string, cfg EndpointConfig) (SavedEndpoint, error) {
	var out SavedEndpoint
	if err := checkEndpoint("put endpoint", ns, id); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: "put endpoint", method: http.MethodPut, path: endpointPath(ns, id), body: cfg, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	if err := decode("put endpoint", a, &out); err != nil {
		return SavedEndpoint{}, err
	}
	out.Created = a.status == http.StatusCreated
	return out, nil
}

// DeleteEndpoint deletes endpoint id of namespace ns. While rows are
// pending it is a *Problem of TypeEndpointHasBacklog, with BacklogRows,
// unless force, which drops them. A forced delete cut short by a 503 is
// retried, which finishes it.
func (c *Client) DeleteEndpoint(ctx context.Context, ns, id string, force bool) (DeletedEndpoint, error) {
	var out DeletedEndpoint
	if err := checkEndpoint("delete endpoint", ns, id); err != nil {
		return out, err
	}
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	a, err := c.do(ctx, call{op: "delete endpoint", method: http.MethodDelete, path: endpointPath(ns, id), query: q, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("delete endpoint", a, &out)
}

// OutboxQuery pages an endpoint's stream.
type OutboxQuery struct {
	// Cursor is the previous page's NextCursor; empty for the first page.
	Cursor string
	// FromSequence starts the page at the row of that sequence number (an
	// outcome's Seq), or the first after it; not with Cursor. 0 is the
	// stream's head.
	FromSequence uint64
	// Limit is the rows per page, 1 to 100; 0 is relay's default (50).
	Limit int
}

// Outbox returns a page of the stream of endpoint of namespace ns: its
// backlog, its state and its pending rows in sequence order. Page on with
// q.Cursor set to NextCursor until it is nil.
func (c *Client) Outbox(ctx context.Context, ns, endpoint string, q OutboxQuery) (OutboxPage, error) {
	var out OutboxPage
	if err := checkEndpoint("outbox", ns, endpoint); err != nil {
		return out, err
	}
	v := url.Values{"endpoint": {endpoint}}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.FromSequence != 0 {
		v.Set("from_sequence", strconv.FormatUint(q.FromSequence, 10))
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	a, err := c.do(ctx, call{op: "outbox", method: http.MethodGet, path: "/v1/namespaces/" + ns + "/outbox", query: v, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("outbox", a, &out)
}

// Replay makes the pending row of reservation rid the first the stream of
// endpoint of namespace ns tries, now (scope admin); the rows after it
// follow, then those before. A row not pending is a *Problem of TypeNotPending; a stream being
// delivered this instant (TypeStreamBusy) is retried after its Retry-After.
func (c *Client) Replay(ctx context.Context, ns, endpoint, rid string) (ReplayResult, error) {
	var out ReplayResult
	if err := checkEndpoint("replay", ns, endpoint); err != nil {
		return out, err
	}
	if !validClientRID(rid) {
		return out, fmt.Errorf("%w: replay: reservation id must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-', not starting \"s:\"", ErrInvalid)
	}
	path := "/v1/admin/namespaces/" + ns + "/endpoints/" + endpoint + "/outcomes/" + rid + "/replay"
	a, err := c.do(ctx, call{op: "replay", method: http.MethodPost, path: path, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("replay", a, &out)
}

// Healthz reports whether relay serves HTTP at all: nil on 200.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, call{op: "healthz", method: http.MethodGet, path: "/healthz"})
	return err
}

// Readyz reports whether relay can serve traffic (Redis reachable and safe
// to use): nil on 200, else a *Problem whose Detail is relay's reason.
func (c *Client) Readyz(ctx context.Context) error {
	a, err := c.send(ctx, call{op: "readyz", method: http.MethodGet, path: "/readyz"}, nil)
	if err != nil {
		return err
	}
	if a.status >= 200 && a.status < 300 {
		return nil
	}
	p := problemOf(a, c.now())
	if p.Type == "" {
		// The text carries no secret (the contract says so) and the
		// request had no body to echo.
		p.Detail = printable(strings.TrimSpace(strings.TrimPrefix(string(a.body), "not ready:")), maxErrorDetail)
	}
	return p
}

// HookKeys returns the key list at /.well-known/mkit-hook-keys.json, as
// served: receivers parse and check it with hookverify.ParseKeyList.
func (c *Client) HookKeys(ctx context.Context) ([]byte, error) {
	a, err := c.do(ctx, call{op: "hook keys", method: http.MethodGet, path: "/.well-known/mkit-hook-keys.json"})
	if err != nil {
		return nil, err
	}
	return a.body, nil
}

// EnableEndpoint enables endpoint id of namespace ns and changes nothing
// else of it (its secrets and headers stay as stored, redacted ones too):
// why it was disabled is cleared and its stream is delivered at once, with
// its backoff reset. One already enabled is answered as it is.
func (c *Client) EnableEndpoint(ctx context.Context, ns, id string) (Endpoint, error) {
	return c.setEnabled(ctx, "enable endpoint", ns, id, "/enable")
}

// DisableEndpoint disables endpoint id of namespace ns and changes nothing
// else of it: its stream keeps its rows, and takes new ones, until it is
// enabled. One already disabled is answered as it is.
func (c *Client) DisableEndpoint(ctx context.Context, ns, id string) (Endpoint, error) {
	return c.setEnabled(ctx, "disable endpoint", ns, id, "/disable")
}

func (c *Client) setEnabled(ctx context.Context, op, ns, id, suffix string) (Endpoint, error) {
	var out Endpoint
	if err := checkEndpoint(op, ns, id); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: op, method: http.MethodPost, path: endpointPath(ns, id) + suffix, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode(op, a, &out)
}

// RetryResult is the answer to RetryEndpoint.
type RetryResult struct {
	Endpoint string `json:"endpoint"`
	// PendingRows is how many rows the stream has pending, all tried at
	// the next attempt.
	PendingRows uint64 `json:"pending_rows"`
	// NextAttemptAt is when they are tried; nil when none is pending.
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// Enabled: this call enabled the endpoint.
	Enabled bool `json:"enabled"`
}

// RetryEndpoint makes every pending row of the stream of endpoint of
// namespace ns due now, with its backoff reset (scope admin). A disabled
// endpoint is a *Problem of TypeEndpointDisabled, unless enable, which
// enables it and makes its stream due in one atomic step.
func (c *Client) RetryEndpoint(ctx context.Context, ns, endpoint string, enable bool) (RetryResult, error) {
	var out RetryResult
	if err := checkEndpoint("retry endpoint", ns, endpoint); err != nil {
		return out, err
	}
	var q url.Values
	if enable {
		q = url.Values{"enable": {"true"}}
	}
	a, err := c.do(ctx, call{op: "retry endpoint", method: http.MethodPost, path: endpointPath(ns, endpoint) + "/retry", query: q, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("retry endpoint", a, &out)
}

// TestQueued is the answer to TestEndpoint.
type TestQueued struct {
	Endpoint string `json:"endpoint"`
	// ReservationID is the test outcome's id, relay's own: Outcome shows
	// its attempts.
	ReservationID string `json:"reservation_id"`
	// Type is "endpoint.test".
	Type string `json:"type"`
}

// TestEndpoint queues a test outcome, an operator event of type
// "endpoint.test", on the stream of endpoint id of namespace ns alone,
// whatever its kinds (scope endpoints:write). A disabled endpoint is a
// *Problem of TypeEndpointDisabled. A retried call may queue a second
// test, which the receiver gets as one more delivery.
func (c *Client) TestEndpoint(ctx context.Context, ns, id string) (TestQueued, error) {
	var out TestQueued
	if err := checkEndpoint("test endpoint", ns, id); err != nil {
		return out, err
	}
	a, err := c.do(ctx, call{op: "test endpoint", method: http.MethodPost, path: endpointPath(ns, id) + "/test", auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("test endpoint", a, &out)
}
