package relayclient

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
)

// NamespaceQuery pages the namespace list.
type NamespaceQuery struct {
	// Cursor is the previous page's NextCursor; empty for the first page.
	Cursor string
	// Limit is the namespaces per page, 1 to 1000; 0 is relay's default
	// (100). With Failing, it is the namespaces examined.
	Limit int
	// Failing keeps, of the namespaces a page examines, only those with a
	// failing endpoint: a page may hold none and still have a NextCursor.
	Failing bool
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
	a, err := c.do(ctx, call{op: "namespaces", method: http.MethodGet, path: "/v1/namespaces", query: v, auth: true, retry: true})
	if err != nil {
		return out, err
	}
	return out, decode("namespaces", a, &out)
}
