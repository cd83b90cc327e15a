package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

// Bounds of a page of namespaces.
const (
	defaultNamespacePage = 100
	maxNamespacePage     = store.MaxRegistryPage
	// maxNamespaceCursor bounds the cursor read: a real one is a bucket and
	// a namespace name, under 90 characters encoded.
	maxNamespaceCursor = 128
)

type namespaceView struct {
	Namespace string      `json:"namespace"`
	Endpoints int         `json:"endpoints"`
	Failing   int         `json:"failing"`
	Disabled  int         `json:"disabled"`
	Backlog   backlogView `json:"backlog"`
}

type namespacePageView struct {
	Namespaces []namespaceView `json:"namespaces"`
	NextCursor *string         `json:"next_cursor"`
}

// listNamespaces pages through every namespace with an endpoint. It spans
// namespaces, so a token bound to one may not call it, admin or not.
func (a *api) listNamespaces(w http.ResponseWriter, r *http.Request) {
	if pr, ok := PrincipalFrom(r.Context()); !ok || pr.Namespace != "" {
		WriteProblem(w, r, NewProblem(SlugForbidden, "the token is bound to a namespace; listing every namespace takes a token bound to none"))
		return
	}
	q, prob := readQuery(r)
	if prob != nil {
		WriteProblem(w, r, prob)
		return
	}
	limit := defaultNamespacePage
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > maxNamespacePage {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "limit must be a whole number from 1 to 1000"))
			return
		}
		limit = n
	}
	// failing=true and disabled=true walk the store's sets of such
	// namespaces, so a page costs what it lists.
	var filter outbox.NamespaceFilter
	for _, f := range []struct {
		name string
		to   *bool
	}{{"failing", &filter.Failing}, {"disabled", &filter.Disabled}} {
		v := q.Get(f.name)
		if q.Has(f.name) && v != "true" && v != "false" {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, f.name+" must be true or false"))
			return
		}
		*f.to = v == "true"
	}
	if filter.Failing && filter.Disabled {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, "failing=true and disabled=true are not asked together"))
		return
	}
	if q.Has("prefix") {
		filter.Prefix = q.Get("prefix")
		if !validPrefix(filter.Prefix) {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "prefix must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"))
			return
		}
	}
	var cursor []byte
	if q.Has("cursor") {
		c := q.Get("cursor")
		b, err := base64.RawURLEncoding.DecodeString(c)
		if len(c) > maxNamespaceCursor || err != nil || len(b) == 0 {
			WriteProblem(w, r, NewProblem(SlugInvalidRequest, "cursor must be a next_cursor this API returned"))
			return
		}
		cursor = b
	}
	page, err := a.Admin.NamespacesIn(r.Context(), filter, cursor, limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := namespacePageView{Namespaces: make([]namespaceView, 0, len(page.Namespaces))}
	for _, s := range page.Namespaces {
		v.Namespaces = append(v.Namespaces, namespaceView{Namespace: s.Partition.Namespace, Endpoints: s.Endpoints, Failing: s.Failing, Disabled: s.Disabled,
			Backlog: backlogView{Rows: s.Backlog.Rows, Bytes: s.Backlog.Bytes}})
	}
	if page.Next != nil {
		c := base64.RawURLEncoding.EncodeToString(page.Next)
		v.NextCursor = &c
	}
	WriteJSON(w, http.StatusOK, v)
}

// validPrefix reports whether p could start a namespace name.
func validPrefix(p string) bool {
	return store.Partition{Namespace: p}.Validate() == nil
}
