package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

type minuteAnswer struct {
	Start          string `json:"start"`
	Delivered      uint64 `json:"delivered"`
	FailedAttempts uint64 `json:"failed_attempts"`
}

func (h *harness) perMinute(ns, id, token string) []minuteAnswer {
	h.t.Helper()
	rec := h.do(http.MethodGet, "/v1/namespaces/"+ns+"/endpoints/"+id, token, "")
	want(h.t, rec, http.StatusOK, "")
	var v struct {
		PerMinute []minuteAnswer `json:"per_minute"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		h.t.Fatal(err)
	}
	return v.PerMinute
}

// GET of one endpoint shows its last hour, a minute an entry, oldest
// first, with what the acknowledgements and the fires' notes counted;
// the list and the PUT answer do not carry it.
func TestGetEndpointShowsItsLastHourByMinute(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, "/v1/namespaces/acme/outcomes", h.admin(),
			`{"outcomes": [`+outcomeJSON("r-1", "committed")+`, `+outcomeJSON("r-2", "committed")+`]}`), http.StatusAccepted, "")
		deliveredAt := h.clk.Now().UnixMilli() + 1_000
		h.deliver("acme", "billing", 2, outbox.Done{AtMs: deliveredAt, Status: 204})
		h.clk.Advance(5 * time.Minute)
		notes, err := outbox.FailedAttemptsNotes("billing", 3, h.clk.Now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := h.st.Apply(t.Context(), store.Partition{Namespace: "acme"}, store.Batch{Writes: notes}); err != nil || !res.Committed {
			t.Fatalf("note: %+v %v", res, err)
		}
		reader := h.token("acme", httpapi.ScopeOutboxRead)
		ms := h.perMinute("acme", "billing", reader)
		if len(ms) != outbox.MinutesKept {
			t.Fatalf("%d minutes, want %d", len(ms), outbox.MinutesKept)
		}
		now := h.clk.Now().UTC().Truncate(time.Minute)
		for i, m := range ms {
			start, err := time.Parse(time.RFC3339, m.Start)
			if err != nil || !start.Equal(now.Add(time.Duration(i-59)*time.Minute)) {
				t.Fatalf("minute %d starts %s, want %s", i, m.Start, now.Add(time.Duration(i-59)*time.Minute))
			}
			var w minuteAnswer
			switch i {
			case 54:
				w = minuteAnswer{Delivered: 2}
			case 59:
				w = minuteAnswer{FailedAttempts: 3}
			}
			if m.Delivered != w.Delivered || m.FailedAttempts != w.FailedAttempts {
				t.Errorf("minute %d: %+v, want %+v", i, m, w)
			}
		}
		for _, m := range h.perMinute("acme", "audit", reader) {
			if m.Delivered+m.FailedAttempts != 0 {
				t.Errorf("audit counts %+v", m)
			}
		}
		list := h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", reader, "")
		var l struct {
			Endpoints []map[string]any `json:"endpoints"`
		}
		if err := json.Unmarshal(list.Body.Bytes(), &l); err != nil || len(l.Endpoints) != 2 {
			t.Fatalf("list: %v %s", err, list.Body)
		}
		if _, ok := l.Endpoints[0]["per_minute"]; ok {
			t.Error("the list carries per_minute")
		}
		if _, ok := h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)["per_minute"]; ok {
			t.Error("the PUT answer carries per_minute")
		}
	})
}

// Another tenant's token, a missing endpoint and a malformed id get
// problems and no minutes.
func TestGetEndpointMinutesRefuseOthers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		other := h.token("globex", httpapi.ScopeOutboxRead)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing", other, ""), http.StatusForbidden, httpapi.SlugForbidden)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/nobody", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/Bad_Id", h.admin(), ""), http.StatusBadRequest, "")
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing", "forged."+h.admin(), ""), http.StatusUnauthorized, "")
	})
}
