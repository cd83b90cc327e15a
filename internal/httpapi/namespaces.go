package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"

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
	// failing=true filters what the page examines, so a page costs the
	// same whatever it keeps.
	failingOnly := q.Get("failing") == "true"
	if f := q.Get("failing"); q.Has("failing") && f != "true" && f != "false" {
		WriteProblem(w, r, NewProblem(SlugInvalidRequest, "failing must be true or false"))
		return
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
	page, err := a.Admin.Namespaces(r.Context(), cursor, limit)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v := namespacePageView{Namespaces: make([]namespaceView, 0, len(page.Namespaces))}
	for _, s := range page.Namespaces {
		if failingOnly && s.Failing == 0 {
			continue
		}
		v.Namespaces = append(v.Namespaces, namespaceView{Namespace: s.Partition.Namespace, Endpoints: s.Endpoints, Failing: s.Failing, Disabled: s.Disabled,
			Backlog: backlogView{Rows: s.Backlog.Rows, Bytes: s.Backlog.Bytes}})
	}
	if page.Next != nil {
		c := base64.RawURLEncoding.EncodeToString(page.Next)
		v.NextCursor = &c
	}
	WriteJSON(w, http.StatusOK, v)
}
