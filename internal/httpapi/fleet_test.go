package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

type fleetBody struct {
	FailingNamespaces  int64 `json:"failing_namespaces"`
	DisabledNamespaces int64 `json:"disabled_namespaces"`
	Backlog            struct {
		Rows  uint64 `json:"rows"`
		Bytes uint64 `json:"bytes"`
	} `json:"backlog"`
	OldestPending *struct {
		AcceptedAt *string `json:"accepted_at"`
		SampledAt  string  `json:"sampled_at"`
	} `json:"oldest_pending"`
}

func (h *harness) fleet() fleetBody {
	h.t.Helper()
	rec := h.do(http.MethodGet, "/v1/fleet", h.admin(), "")
	want(h.t, rec, http.StatusOK, "")
	var f fleetBody
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil {
		h.t.Fatal(err)
	}
	return f
}

func (h *harness) namespaces(query string) []string {
	h.t.Helper()
	var out []string
	cursor := ""
	for range 1000 {
		path := "/v1/namespaces?limit=1000&" + query
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		rec := h.do(http.MethodGet, path, h.admin(), "")
		want(h.t, rec, http.StatusOK, "")
		var page namespacePage
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			h.t.Fatal(err)
		}
		for _, n := range page.Namespaces {
			out = append(out, n.Namespace)
		}
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
	h.t.Fatal("the walk does not end")
	return nil
}

// fleetOf puts n namespaces, each with an enabled endpoint, on a fresh
// miniredis, and returns the harness and the server.
func fleetOf(t *testing.T, n int) (*harness, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := newHarness(t, c, "relay:")
	for i := range n {
		outboxtest.PutEndpoint(t, h.st, store.Partition{Namespace: fmt.Sprintf("ns-%04d", i)}, "hook", schema.Endpoint{Enabled: true})
	}
	return h, m
}

// With 2,000 namespaces, 3 of them failing beyond the first 1,000 in list
// order and one endpoint disabled by hand, the fleet's figures count the
// true 3 failing and the disabled one apart, and the failing and disabled
// lists hold exactly those, each in one page.
func TestTheFleetCountsEveryFailingNamespaceAtScale(t *testing.T) {
	h, _ := fleetOf(t, 2000)
	order := h.namespaces("")
	if len(order) != 2000 {
		t.Fatalf("%d namespaces listed, want 2000", len(order))
	}
	failing := []string{order[1000], order[1500], order[1999]}
	for _, ns := range failing {
		outboxtest.PutEndpoint(t, h.st, store.Partition{Namespace: ns}, "hook",
			schema.Endpoint{DisabledReason: "failing", DisabledMs: outboxtest.T0})
	}
	// Disabled by hand, through the API, in a namespace listed first.
	rec := h.do(http.MethodPost, "/v1/namespaces/"+order[3]+"/endpoints/hook/disable", h.admin(), "")
	if rec.Code != http.StatusOK {
		t.Fatalf("disable: %d %s", rec.Code, rec.Body)
	}
	f := h.fleet()
	if f.FailingNamespaces != 3 || f.DisabledNamespaces != 1 {
		t.Fatalf("fleet %+v, want 3 failing and 1 disabled", f)
	}
	got := h.namespaces("failing=true")
	slices.Sort(got)
	slices.Sort(failing)
	if !slices.Equal(got, failing) {
		t.Fatalf("%d failing namespaces listed (%v...), want %v", len(got), got[:min(len(got), 5)], failing)
	}
	if got := h.namespaces("disabled=true"); !slices.Equal(got, []string{order[3]}) {
		t.Fatalf("disabled namespaces %v, want %v", got, order[3])
	}
	if got := h.namespaces("prefix=ns-19"); len(got) != 100 {
		t.Fatalf("%d namespaces under ns-19, want 100", len(got))
	}
}

// The fleet's figures cost the same number of Redis commands beside 20
// namespaces as beside 2,000.
func TestTheFleetCostsTheSameWhateverTheNamespaces(t *testing.T) {
	cost := func(n int) int {
		h, m := fleetOf(t, n)
		before := m.CommandCount()
		h.fleet()
		return m.CommandCount() - before
	}
	small, large := cost(20), cost(2000)
	if small != large {
		t.Fatalf("GET /v1/fleet cost %d commands beside 20 namespaces, %d beside 2,000", small, large)
	}
	t.Logf("GET /v1/fleet: %d commands", small)
}

// GET /v1/fleet spans namespaces: a token bound to one is refused; and the
// namespace list refuses a prefix no name could start and failing with
// disabled.
func TestFleetRefusals(t *testing.T) {
	h, _ := fleetOf(t, 1)
	want(t, h.do(http.MethodGet, "/v1/fleet", h.token("ns-0000", httpapi.ScopeAdmin), ""), http.StatusForbidden, httpapi.SlugForbidden)
	want(t, h.do(http.MethodGet, "/v1/fleet", h.token("", httpapi.ScopeOutboxRead), ""), http.StatusForbidden, httpapi.SlugForbidden)
	for _, q := range []string{"prefix=Ab", "prefix=-a", "prefix=", "failing=true&disabled=true", "disabled=yes"} {
		want(t, h.do(http.MethodGet, "/v1/namespaces?"+q, h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
	}
}
