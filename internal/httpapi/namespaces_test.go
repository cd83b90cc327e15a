package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/store"
)

type namespaceEntry struct {
	Namespace string `json:"namespace"`
	Endpoints int    `json:"endpoints"`
	Failing   int    `json:"failing"`
	Disabled  int    `json:"disabled"`
	Backlog   struct {
		Rows  uint64 `json:"rows"`
		Bytes uint64 `json:"bytes"`
	} `json:"backlog"`
}

type namespacePage struct {
	Namespaces []namespaceEntry `json:"namespaces"`
	NextCursor *string          `json:"next_cursor"`
}

// listPage asks for one page of namespaces.
func (h *harness) listPage(cursor string, limit int) namespacePage {
	h.t.Helper()
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
	}
	path := "/v1/namespaces"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	rec := h.do(http.MethodGet, path, h.admin(), "")
	want(h.t, rec, http.StatusOK, "")
	var page namespacePage
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		h.t.Fatal(err)
	}
	if limit > 0 && len(page.Namespaces) > limit {
		h.t.Fatalf("page of %d namespaces exceeds limit %d", len(page.Namespaces), limit)
	}
	return page
}

// listAll walks every page, with between called after each but the last.
func (h *harness) listAll(limit int, between func(page int)) []namespaceEntry {
	h.t.Helper()
	var all []namespaceEntry
	cursor := ""
	for i := 0; ; i++ {
		if i > 100_000 {
			h.t.Fatal("the walk does not end")
		}
		page := h.listPage(cursor, limit)
		all = append(all, page.Namespaces...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
		if between != nil {
			between(i)
		}
	}
}

func TestNamespacesListsEachWithItsEndpointsAndBacklog(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		if got := h.listAll(0, nil); len(got) != 0 {
			t.Fatalf("a fresh relay lists %v", got)
		}
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks", "kinds": ["aborted"]}`)
		h.putEndpoint("globex", "ops", `{"url": "https://ops.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), committedJSON), http.StatusAccepted, "")
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-2", "aborted")), http.StatusAccepted, "")

		before := h.dump()
		got := map[string]namespaceEntry{}
		for _, e := range h.listAll(1, nil) {
			if _, dup := got[e.Namespace]; dup {
				t.Fatalf("%s listed twice", e.Namespace)
			}
			got[e.Namespace] = e
		}
		if after := h.dump(); !maps.Equal(before, after) {
			t.Fatal("listing namespaces changed the store")
		}
		acme, globex := got["acme"], got["globex"]
		if len(got) != 2 || acme.Endpoints != 2 || globex.Endpoints != 1 {
			t.Fatalf("listed %+v, want acme with 2 endpoints and globex with 1", got)
		}
		// billing takes both outcomes, audit the aborted one.
		if acme.Backlog.Rows != 3 || acme.Backlog.Bytes == 0 || globex.Backlog.Rows != 0 {
			t.Fatalf("backlogs: acme %+v, globex %+v", acme.Backlog, globex.Backlog)
		}
		if acme.Failing != 0 || globex.Failing != 0 {
			t.Fatalf("healthy namespaces failing: acme %d, globex %d", acme.Failing, globex.Failing)
		}
		// Disabled by an operator: on purpose, so not failing.
		h.putEndpoint("globex", "ops", `{"url": "https://ops.example.com/hooks", "enabled": false}`)
		for _, e := range h.listAll(0, nil) {
			if w := map[string]int{"acme": 0, "globex": 1}[e.Namespace]; e.Failing != 0 || e.Disabled != w {
				t.Fatalf("%s: %d failing and %d disabled, want 0 and %d", e.Namespace, e.Failing, e.Disabled, w)
			}
		}
		// Disabled by relay, after a 410: failing.
		outboxtest.PutEndpoint(t, h.st, store.Partition{Namespace: "globex"}, "ops", schema.Endpoint{URL: "https://ops.example.com/hooks", DisabledReason: "gone"})
		for _, e := range h.listAll(0, nil) {
			if w := map[string]int{"acme": 0, "globex": 1}[e.Namespace]; e.Failing != w || e.Disabled != 0 {
				t.Fatalf("%s: %d failing and %d disabled, want %d and 0", e.Namespace, e.Failing, e.Disabled, w)
			}
		}
		// failing=true keeps, of what each page examines, the failing ones:
		// walked one namespace a page, it finds globex alone.
		var failing []string
		for cursor := ""; ; {
			q := "/v1/namespaces?failing=true&limit=1"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			var page namespacePage
			body := h.do(http.MethodGet, q, h.admin(), "")
			if body.Code != http.StatusOK || json.Unmarshal(body.Body.Bytes(), &page) != nil {
				t.Fatalf("failing=true: %d %s", body.Code, body.Body)
			}
			for _, e := range page.Namespaces {
				failing = append(failing, e.Namespace)
			}
			if page.NextCursor == nil {
				break
			}
			cursor = *page.NextCursor
		}
		if !slices.Equal(failing, []string{"globex"}) {
			t.Fatalf("failing=true walks to %v, want globex alone", failing)
		}

		want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/endpoints/audit?force=true", h.admin(), ""), http.StatusOK, "")
		if got := h.listAll(0, nil); len(got) != 2 || got[0].Namespace == got[1].Namespace {
			t.Fatalf("after deleting one of acme's endpoints: %+v", got)
		}
		want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/endpoints/billing?force=true", h.admin(), ""), http.StatusOK, "")
		if got := h.listAll(0, nil); len(got) != 1 || got[0].Namespace != "globex" {
			t.Fatalf("after deleting acme's last endpoint: %+v, want globex alone", got)
		}
	})
}

// Bad limits and forged cursors are problems naming the field, and change
// nothing.
func TestNamespacesRefusesBadLimitsAndCursors(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		var other string
		for i := 0; ; i++ {
			other = fmt.Sprintf("ns-%d", i)
			if h.st.BucketOf(store.Partition{Namespace: other}) != h.st.BucketOf(store.Partition{Namespace: "acme"}) {
				break
			}
		}
		enc := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
		bucketOfAcme := h.st.BucketOf(store.Partition{Namespace: "acme"})
		for _, tc := range []struct{ name, query, field string }{
			{"limit 0", "limit=0", "limit"},
			{"limit -1", "limit=-1", "limit"},
			{"limit over the max", "limit=1001", "limit"},
			{"huge limit", "limit=99999999999999999999999", "limit"},
			{"limit abc", "limit=abc", "limit"},
			{"empty limit", "limit=", "limit"},
			{"limit with a fraction", "limit=1.5", "limit"},
			{"limit in hex", "limit=0x10", "limit"},
			{"empty cursor", "cursor=", "cursor"},
			{"cursor not base64", "cursor=%21%21%21", "cursor"},
			{"padded cursor", "cursor=" + enc([]byte{0}) + "%3D%3D", "cursor"},
			{"cursor too long", "cursor=" + strings.Repeat("A", 200), "cursor"},
			{"cursor of a bucket out of range", "cursor=" + enc(store.RegistryCursor{Bucket: h.st.Buckets()}.Bytes()), "cursor"},
			{"cursor of a huge bucket", "cursor=" + enc([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}), "cursor"},
			{"cursor naming another bucket's namespace", "cursor=" + enc(store.RegistryCursor{Bucket: bucketOfAcme, After: other}.Bytes()), "cursor"},
			{"cursor naming no namespace", "cursor=" + enc(append(store.RegistryCursor{Bucket: bucketOfAcme}.Bytes(), "AC/ME"...)), "cursor"},
			{"cursor with a NUL", "cursor=" + enc([]byte{0, 0}), "cursor"},
			{"failing yes", "failing=yes", "failing"},
			{"failing 1", "failing=1", "failing"},
			{"failing empty", "failing=", "failing"},
		} {
			rec := h.do(http.MethodGet, "/v1/namespaces?"+tc.query, h.admin(), "")
			body := want(t, rec, http.StatusBadRequest, httpapi.SlugInvalidRequest)
			if d, _ := body["detail"].(string); !strings.HasPrefix(d, tc.field+" ") {
				t.Fatalf("%s: detail %q does not name %s", tc.name, d, tc.field)
			}
		}
		// A cursor this API gave resumes; its neighbours do not panic.
		page := h.listPage("", 0)
		if len(page.Namespaces) != 1 {
			t.Fatalf("page %+v", page)
		}
		if after := h.dump(); !maps.Equal(before, after) {
			t.Fatal("refused requests changed the store")
		}
	})
}

func TestNamespacesWantsAnAdminTokenBoundToNoNamespace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("globex", "ops", `{"url": "https://ops.example.com/hooks"}`)
		want(t, h.do(http.MethodGet, "/v1/namespaces", "", ""), http.StatusUnauthorized, httpapi.SlugUnauthorized)
		for _, tok := range []string{
			h.token("", httpapi.ScopeOutboxRead, httpapi.ScopeEndpointsWrite, httpapi.ScopeOutcomesWrite),
			h.token("acme", httpapi.ScopeAdmin),
			h.token("acme", httpapi.ScopeOutboxRead),
		} {
			body := want(t, h.do(http.MethodGet, "/v1/namespaces", tok, ""), http.StatusForbidden, httpapi.SlugForbidden)
			if strings.Contains(fmt.Sprint(body), "globex") {
				t.Fatalf("a refusal names another namespace: %v", body)
			}
		}
		want(t, h.do(http.MethodGet, "/v1/namespaces", h.admin(), ""), http.StatusOK, "")
		rec := h.do(http.MethodPost, "/v1/namespaces", h.admin(), "")
		want(t, rec, http.StatusMethodNotAllowed, httpapi.SlugMethodNotAllowed)
	})
}

// seedNamespaces registers an endpoint in each of n namespaces, in
// pipelined batches, as PutEndpoint would store it.
func seedNamespaces(t *testing.T, st *redisstore.Store, names []string) {
	t.Helper()
	ep := schema.Endpoint{URL: "https://hooks.example.com/ep", Enabled: true}.WithDefaults()
	v, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := schema.EndpointKey("ep")
	for start := 0; start < len(names); start += 500 {
		var items []redisstore.Item
		for _, n := range names[start:min(start+500, len(names))] {
			var b store.Batch
			b.Put(key, v)
			items = append(items, redisstore.Item{Partition: store.Partition{Namespace: n}, Batch: b})
		}
		if _, err := st.ApplyAll(t.Context(), items); err != nil {
			t.Fatal(err)
		}
	}
}

// Ten thousand namespaces page completely, each once.
func TestNamespacesPagesTenThousandWithoutLossOrRepetition(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := newHarness(t, c, redisstore.DefaultPrefix)
	h.check = nil // the contract is checked by the other tests; here it would dominate
	names := make([]string, 10_000)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%05d", i)
	}
	seedNamespaces(t, h.st, names)

	{
		const limit = 1000
		seen := map[string]int{}
		for _, e := range h.listAll(limit, nil) {
			seen[e.Namespace]++
			if e.Endpoints != 1 {
				t.Fatalf("%s lists %d endpoints, want 1", e.Namespace, e.Endpoints)
			}
		}
		if len(seen) != len(names) {
			t.Fatalf("pages of %d listed %d namespaces, want %d", limit, len(seen), len(names))
		}
		for n, k := range seen {
			if k != 1 {
				t.Fatalf("%s listed %d times", n, k)
			}
		}
	}

}

// Namespaces created and deleted between pages never make the walk lose or
// repeat one that stayed.
func TestNamespacesChangingBetweenPagesLoseAndRepeatNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		names := make([]string, 300)
		for i := range names {
			names[i] = fmt.Sprintf("tenant-%03d", i)
		}
		seedNamespaces(t, h.st, names)
		// Between pages: delete a namespace, create one, every time.
		seen := map[string]int{}
		deleted := map[string]bool{}
		created := 0
		walk := h.listAll(17, func(page int) {
			gone := names[(page*37)%len(names)]
			want(t, h.do(http.MethodDelete, "/v1/namespaces/"+gone+"/endpoints/ep", h.admin(), ""), http.StatusOK, "")
			deleted[gone] = true
			h.putEndpoint(fmt.Sprintf("late-%03d", page), "ep", `{"url": "https://hooks.example.com/ep"}`)
			created++
		})
		for _, e := range walk {
			seen[e.Namespace]++
		}
		for n, k := range seen {
			if k != 1 {
				t.Fatalf("%s listed %d times during changes", n, k)
			}
		}
		for _, n := range names {
			if !deleted[n] && seen[n] != 1 {
				t.Fatalf("%s, there throughout, was listed %d times", n, seen[n])
			}
		}
		if created == 0 || len(deleted) == 0 {
			t.Fatal("no change happened between pages")
		}
	})
}
