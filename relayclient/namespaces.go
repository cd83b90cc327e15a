package relayclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// NamespaceQuery pages the namespace list.
type NamespaceQuery struct {
	// Cursor is the previous page's NextCursor; empty for the first page.
	Cursor string
	// Limit is the namespaces per page, 1 to 1000; 0 is relay's default
	// (100).
	Limit int
	// Failing lists only the namespaces with a failing endpoint, from the
	// set relay keeps of them: a page costs what it lists.
	Failing bool
	// Disabled lists only the namespaces with an endpoint an operator
	// disabled; not with Failing.
	Disabled bool
	// Prefix lists only the namespaces whose name starts with it.
	Prefix string
}

// NamespacePage is one page of the namespace list.
type NamespacePage struct {
	Namespaces []NamespaceSummary `json:"namespaces"`
	// NextCursor is the next page's cursor; nil on the last page. A page
	// may hold fewer than Limit namespaces, even none, and still have one.
	NextCursor *string `json:"next_cursor"`
}

// NamespaceSummary is a namespace with its endpoint count and its backlog
// over all its streams.
type NamespaceSummary struct {
	Namespace string `json:"namespace"`
	Endpoints int    `json:"endpoints"`
	// Failing counts its endpoints that need an operator: disabled by
	// relay (a 410, failing too long) or being deleted, backing off, or
	// stored in a state that does not decode.
	Failing int `json:"failing"`
	// Disabled counts its endpoints an operator disabled, on purpose: they
	// are not failing.
	Disabled int     `json:"disabled"`
	Backlog  Backlog `json:"backlog"`
}

// Namespaces returns a page of every namespace that has an endpoint (scope
// admin, on a token bound to no namespace). Page on with q.Cursor set to
// NextCursor until it is nil.
func (c *Client) Namespaces(ctx context.Context, q NamespaceQuery) (NamespacePage, error) {
	var out NamespacePage
	v := url.Values{}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Failing {
		v.Set("failing", "true")
	}
	if q.Disabled {
		v.Set("disabled", "true")
	}
	if q.Prefix != "" {
		v.Set("prefix", q.Prefix)
	}
	a, err := c.do(ctx, call{op: "namespaces", method: http.MethodGet, path: "/v1/namespaces", query: v, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("namespaces", a, &out)
}

// Fleet is what every namespace holds, as relay keeps it per bucket.
type Fleet struct {
	// FailingNamespaces counts the namespaces with a failing endpoint.
	FailingNamespaces int64 `json:"failing_namespaces"`
	// DisabledNamespaces counts those with an endpoint an operator
	// disabled, failing or not.
	DisabledNamespaces int64   `json:"disabled_namespaces"`
	Backlog            Backlog `json:"backlog"`
	// OldestPending is the backlog sampler's last complete pass; nil
	// before the first, or where no sampler runs.
	OldestPending *OldestPending `json:"oldest_pending"`
}

// OldestPending dates the oldest pending row over every namespace.
type OldestPending struct {
	// AcceptedAt is when it was accepted; nil when none was pending.
	AcceptedAt *time.Time `json:"accepted_at"`
	// SampledAt is when the pass ended.
	SampledAt time.Time `json:"sampled_at"`
}

// Fleet returns the fleet's figures (scope admin, on a token bound to no
// namespace): one read per bucket on relay's side, whatever the number of
// namespaces.
func (c *Client) Fleet(ctx context.Context) (Fleet, error) {
	var out Fleet
	a, err := c.do(ctx, call{op: "fleet", method: http.MethodGet, path: "/v1/fleet", auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("fleet", a, &out)
}
