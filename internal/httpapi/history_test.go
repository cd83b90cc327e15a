package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// deliver acknowledges the first n pending rows of the stream of endpoint in
// namespace ns as delivery does with a retention: their history is kept.
func (h *harness) deliver(ns, endpoint string, n int, done outbox.Done) {
	h.t.Helper()
	ctx, p := h.t.Context(), store.Partition{Namespace: ns}
	rids, err := outboxtest.AckPage(ctx, h.st, p, endpoint, n, true, done)
	if err != nil || len(rids) != n {
		h.t.Fatalf("acknowledged %v of %s, want %d rows: %v", rids, endpoint, n, err)
	}
}

// failedAttempt records one failed attempt of rid on the stream of endpoint.
func (h *harness) failedAttempt(endpoint, rid string, atMs int64) {
	h.t.Helper()
	key, _ := schema.AttemptKey(endpoint, rid)
	v, err := schema.EncodeAttempts(schema.Attempts{}.With(schema.Attempt{AtMs: atMs, DurationMs: 30, Status: 503, ErrorClass: "status", Excerpt: "busy"}))
	if err != nil {
		h.t.Fatal(err)
	}
	var b store.Batch
	b.Put(key, v)
	if _, err := h.st.Apply(h.t.Context(), store.Partition{Namespace: "acme"}, b); err != nil {
		h.t.Fatal(err)
	}
}

// runRecovery fires the recovery timer of endpoint until its job is done.
func (h *harness) runRecovery(endpoint string) {
	h.t.Helper()
	r := &outbox.RecoveryRunner{Clock: h.clk}
	p := store.Partition{Namespace: "acme"}
	for range 100 {
		f, err := r.Fire(h.t.Context(), timers.FireContext{Store: h.st, Partition: p, NowMs: h.clk.Now().UnixMilli()},
			timers.DueTimer{Kind: timers.KindRecovery, Reference: endpoint})
		if err != nil {
			h.t.Fatal(err)
		}
		if res, err := h.st.Apply(h.t.Context(), p, f.Batch); err != nil || !res.Committed {
			h.t.Fatalf("recovery batch: %+v %v", res, err)
		}
		if f.Done {
			return
		}
	}
	h.t.Fatal("the recovery does not end")
}

// pendingSeq is the sequence number the outbox view shows for rid pending
// on the stream of endpoint in acme.
func (h *harness) pendingSeq(endpoint, rid string) float64 {
	h.t.Helper()
	page := want(h.t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint="+endpoint, h.admin(), ""), http.StatusOK, "")
	for _, r := range page["rows"].([]any) {
		if m := r.(map[string]any); m["reservation_id"] == rid {
			return m["sequence"].(float64)
		}
	}
	h.t.Fatalf("%s is not pending on %s", rid, endpoint)
	return 0
}

func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func at(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00") }

func TestAnOutcomesStoryShowsItAsAcceptedAndOnEveryEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks", "kinds": ["aborted"]}`)
		h.putEndpoint("acme", "ops", `{"url": "https://ops.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), committedJSON), http.StatusAccepted, "")
		h.failedAttempt("billing", "r-7f3a", outboxtest.T0+10)
		seq := h.pendingSeq("billing", "r-7f3a")
		h.deliver("acme", "billing", 1, outbox.Done{AtMs: outboxtest.T0 + 70, DurationMs: 12, Status: 200})
		h.clk.Advance(time.Minute)
		h.putEndpoint("acme", "later", `{"url": "https://later.example.com/hooks"}`)

		reader := h.token("acme", httpapi.ScopeOutboxRead)
		got := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r-7f3a", reader, ""), http.StatusOK, "")
		if got["reservation_id"] != "r-7f3a" || got["seq"] != seq || got["accepted_at"] != "2025-11-30T00:00:00.000Z" {
			t.Fatalf("story %v", got)
		}
		if !reflect.DeepEqual(got["outcome"], decodeJSON(t, committedJSON)) {
			t.Fatalf("outcome %v, want it as ingested: %s", got["outcome"], committedJSON)
		}
		wantEndpoints := decodeJSON(t, `[
			{"endpoint": "audit", "state": "filtered", "attempts": [], "attempt_count": 0},
			{"endpoint": "billing", "state": "delivered", "delivered_at": "`+at(outboxtest.T0+70)+`", "attempt_count": 2, "attempts": [
				{"at": "`+at(outboxtest.T0+10)+`", "duration_ms": 30, "status": 503, "error": "status", "response_excerpt": "busy"},
				{"at": "`+at(outboxtest.T0+70)+`", "duration_ms": 12, "status": 200}]},
			{"endpoint": "ops", "state": "pending", "attempts": [], "attempt_count": 0}]`)
		if !reflect.DeepEqual(got["endpoints"], wantEndpoints) {
			t.Fatalf("endpoints %v\nwant %v (an endpoint created after is not listed)", got["endpoints"], wantEndpoints)
		}

		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r-none", reader, ""), http.StatusNotFound, httpapi.SlugNotFound)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/s:local", reader, ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r%20x", reader, ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		want(t, h.do(http.MethodGet, "/v1/namespaces/Acme/outcomes/r-7f3a", h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
	})
}

// outcomesList pages through the list at query and returns the
// reservation ids with, per outcome, its endpoints' states.
func (h *harness) outcomesList(query url.Values, limit int) ([]string, []any) {
	h.t.Helper()
	var rids []string
	var eps []any
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", strconv.Itoa(limit))
	for pages := 0; ; pages++ {
		if pages > 20 {
			h.t.Fatal("paging does not end")
		}
		page := want(h.t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes?"+q.Encode(), h.token("acme", httpapi.ScopeOutboxRead), ""), http.StatusOK, "")
		list := page["outcomes"].([]any)
		if len(list) > limit {
			h.t.Fatalf("%d outcomes on a page of %d", len(list), limit)
		}
		for _, o := range list {
			m := o.(map[string]any)
			rids = append(rids, m["reservation_id"].(string))
			eps = append(eps, m["endpoints"])
		}
		next, ok := page["next_cursor"].(string)
		if !ok {
			if _, present := page["next_cursor"]; present {
				h.t.Fatalf("next_cursor %v on the last page, want it absent", page["next_cursor"])
			}
			return rids, eps
		}
		q.Set("cursor", next)
	}
}

func TestTheOutcomesListFiltersAndPages(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks", "kinds": ["aborted"]}`)
		for _, rid := range []string{"a-0", "a-1", "a-2"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("x"+rid, "aborted")), http.StatusAccepted, "")
			h.clk.Advance(time.Minute)
		}
		deliveredAt := h.clk.Now().UnixMilli()
		seq := h.pendingSeq("billing", "a-0")
		h.deliver("acme", "billing", 2, outbox.Done{AtMs: deliveredAt, DurationMs: 3, Status: 204})

		all, eps := h.outcomesList(nil, 4)
		if want := []string{"a-0", "xa-0", "a-1", "xa-1", "a-2", "xa-2"}; !reflect.DeepEqual(all, want) {
			t.Fatalf("all %v, want %v in acceptance order", all, want)
		}
		first := decodeJSON(t, `[{"endpoint": "audit", "state": "filtered"}, {"endpoint": "billing", "state": "delivered", "at": "`+at(deliveredAt)+`"}]`)
		if !reflect.DeepEqual(eps[0], first) {
			t.Fatalf("a-0 on its endpoints %v, want %v", eps[0], first)
		}
		page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes?limit=1", h.admin(), ""), http.StatusOK, "")
		if o := page["outcomes"].([]any)[0].(map[string]any); o["kind"] != "committed" || o["accepted_at"] != at(outboxtest.T0) || o["seq"] != seq {
			t.Fatalf("first outcome %v", o)
		}
		if got, _ := h.outcomesList(url.Values{"endpoint": {"billing"}, "state": {"delivered"}}, 9); !reflect.DeepEqual(got, []string{"a-0", "xa-0"}) {
			t.Fatalf("delivered on billing %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"endpoint": {"audit"}, "state": {"filtered"}}, 9); !reflect.DeepEqual(got, []string{"a-0", "a-1", "a-2"}) {
			t.Fatalf("filtered on audit %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"state": {"pending"}}, 9); !reflect.DeepEqual(got, []string{"xa-0", "a-1", "xa-1", "a-2", "xa-2"}) {
			t.Fatalf("pending anywhere %v", got)
		}
		ranged := url.Values{"since": {"2025-11-30T00:01:00Z"}, "until": {"2025-11-30T00:02:00.000+00:00"}}
		if got, _ := h.outcomesList(ranged, 9); !reflect.DeepEqual(got, []string{"a-1", "xa-1"}) {
			t.Fatalf("accepted in [1m, 2m) %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"since": {"2025-11-30T01:00:01+01:00"}}, 9); !reflect.DeepEqual(got, []string{"a-1", "xa-1", "a-2", "xa-2"}) {
			t.Fatalf("accepted since 00:00:01Z %v: the offset is honoured", got)
		}
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes?endpoint=nobody", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
	})
}

func TestTheOutcomesListReadsNewestFirstBothWaysByKindAndPrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		for _, rid := range []string{"a-0", "a-1", "a-2"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("x"+rid, "aborted")), http.StatusAccepted, "")
			h.clk.Advance(time.Minute)
		}
		if got, _ := h.outcomesList(url.Values{"order": {"desc"}}, 4); !reflect.DeepEqual(got, []string{"xa-2", "a-2", "xa-1", "a-1", "xa-0", "a-0"}) {
			t.Fatalf("newest first %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"order": {"asc"}}, 4); !reflect.DeepEqual(got, []string{"a-0", "xa-0", "a-1", "xa-1", "a-2", "xa-2"}) {
			t.Fatalf("oldest first %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"order": {"desc"}, "kind": {"aborted"}}, 9); !reflect.DeepEqual(got, []string{"xa-2", "xa-1", "xa-0"}) {
			t.Fatalf("aborted, newest first %v", got)
		}
		if got, _ := h.outcomesList(url.Values{"order": {"desc"}, "rid_prefix": {"a-"}}, 9); !reflect.DeepEqual(got, []string{"a-2", "a-1", "a-0"}) {
			t.Fatalf("prefix a-, newest first %v", got)
		}
		ranged := url.Values{"order": {"desc"}, "since": {"2025-11-30T00:01:00Z"}, "until": {"2025-11-30T00:02:00Z"}}
		if got, _ := h.outcomesList(ranged, 9); !reflect.DeepEqual(got, []string{"xa-1", "a-1"}) {
			t.Fatalf("accepted in [1m, 2m), newest first %v", got)
		}
		// Older, then Newer: the page before is the first again.
		path := "/v1/namespaces/acme/outcomes?order=desc&limit=2"
		first := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
		if _, ok := first["prev_cursor"]; ok {
			t.Fatalf("the first page has a prev_cursor: %v", first)
		}
		second := want(t, h.do(http.MethodGet, path+"&cursor="+first["next_cursor"].(string), h.admin(), ""), http.StatusOK, "")
		back := want(t, h.do(http.MethodGet, path+"&cursor="+second["prev_cursor"].(string), h.admin(), ""), http.StatusOK, "")
		rids := func(page map[string]any) (out []string) {
			for _, o := range page["outcomes"].([]any) {
				out = append(out, o.(map[string]any)["reservation_id"].(string))
			}
			return out
		}
		if got := rids(second); !reflect.DeepEqual(got, []string{"xa-1", "a-1"}) {
			t.Fatalf("second page %v", got)
		}
		if got := rids(back); !reflect.DeepEqual(got, rids(first)) {
			t.Fatalf("back from the second page %v, want %v", got, rids(first))
		}
	})
}

func TestAnOutboxPageStartsAtTheRowOfASequenceNumber(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		for _, rid := range []string{"a-0", "a-1", "a-2", "a-3"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
		}
		seq := h.pendingSeq("billing", "a-2")
		page := want(t, h.do(http.MethodGet, fmt.Sprintf("/v1/namespaces/acme/outbox?endpoint=billing&limit=1&from_sequence=%d", int(seq)), h.admin(), ""), http.StatusOK, "")
		rows := page["rows"].([]any)
		if len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "a-2" {
			t.Fatalf("the page from a-2's sequence holds %v", rows)
		}
		next := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing&limit=1&cursor="+page["next_cursor"].(string), h.admin(), ""), http.StatusOK, "")
		if rows := next["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "a-3" {
			t.Fatalf("the page after it holds %v", rows)
		}
		for _, q := range []string{"from_sequence=-1", "from_sequence=x", "from_sequence=", "from_sequence=1&cursor=" + page["next_cursor"].(string)} {
			body := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing&"+q, h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
			if detail, _ := body["detail"].(string); !strings.Contains(detail, "from_sequence") {
				t.Fatalf("%s: detail %q does not name from_sequence", q, detail)
			}
		}
	})
}

func TestMalformedOutcomeQueriesAreRefusedNamingTheField(t *testing.T) {
	h, _ := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
	before := h.dump()
	for query, field := range map[string]string{
		"since=yesterday":            "since",
		"since=2025-11-30":           "since",
		"since=2025-11-30T00:00:00":  "since",
		"since=1970-01-01T00:00:00Z": "since",
		"since=1969-12-31T23:59:59Z": "since",
		"until=2025-13-01T00:00:00Z": "until",
		"until=":                     "until",
		"since=2025-11-30T00:00:00Z&since=2025-11-30T00:00:00Z": "since",
		"since=2025-11-30T01:00:00Z&until=2025-11-30T00:00:00Z": "until",
		"since=2025-11-30T01:00:00Z&until=2025-11-30T01:00:00Z": "until",
		"limit=0":             "limit",
		"limit=101":           "limit",
		"limit=ten":           "limit",
		"limit=":              "limit",
		"cursor=!!":           "cursor",
		"cursor=ZQ":           "cursor",
		"cursor=":             "cursor",
		"state=lost":          "state",
		"state=":              "state",
		"state=filtered":      "filtered",
		"endpoint=Bad":        "endpoint",
		"endpoint=":           "endpoint",
		"kind=lost":           "kind",
		"kind=":               "kind",
		"rid_prefix=a%20b":    "rid_prefix",
		"rid_prefix=":         "rid_prefix",
		"order=newest":        "order",
		"order=":              "order",
		"cursor=eAAAAAAAAAAB": "cursor",
	} {
		t.Run(query, func(t *testing.T) {
			body := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes?"+query, h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
			if detail, _ := body["detail"].(string); !strings.Contains(detail, field) {
				t.Fatalf("detail %q does not name %s", detail, field)
			}
			if !reflect.DeepEqual(before, h.dump()) {
				t.Fatal("a refused query changed Redis")
			}
		})
	}
}

func TestAResendQueuesADeliveredOutcomeAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks"}`)
		h.putEndpoint("acme", "expired-only", `{"url": "https://e.example.com/hooks", "kinds": ["expired"]}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-0", "committed")), http.StatusAccepted, "")
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		seq0, seq1 := h.pendingSeq("billing", "r-0"), h.pendingSeq("billing", "r-1")
		h.deliver("acme", "billing", 2, outbox.Done{AtMs: outboxtest.T0 + 5, Status: 200})
		h.clk.Advance(time.Minute)
		resend := func(endpoint, rid string) string {
			return "/v1/namespaces/acme/endpoints/" + endpoint + "/outcomes/" + rid + "/resend"
		}
		woken := h.woken.Load()
		got := want(t, h.do(http.MethodPost, resend("billing", "r-1"), h.token("acme", httpapi.ScopeAdmin), ""), http.StatusAccepted, "")
		if got["seq"] != seq1 || got["due_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("resent %v", got)
		}
		if h.woken.Load() == woken {
			t.Fatal("a resend must wake the delivery driver")
		}
		page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing", h.admin(), ""), http.StatusOK, "")
		if rows := page["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "r-1" || rows[0].(map[string]any)["sequence"] != seq1 {
			t.Fatalf("billing's outbox %v: want r-1 pending at its own sequence number", page["rows"])
		}
		story := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r-1", h.admin(), ""), http.StatusOK, "")
		if s := story["endpoints"].([]any)[1].(map[string]any); s["endpoint"] != "billing" || s["state"] != "pending" {
			t.Fatalf("billing after the resend %v", s)
		}

		before := h.dump()
		for _, c := range []struct {
			name, path string
			status     int
			slug       httpapi.Slug
			detail     string
		}{
			{"pending again", resend("billing", "r-1"), 409, httpapi.SlugStillPending, "replay"},
			{"pending elsewhere", resend("audit", "r-0"), 409, httpapi.SlugStillPending, "replay"},
			{"not its kind", resend("expired-only", "r-0"), 409, httpapi.SlugNotDelivered, "kinds"},
			{"unknown endpoint", resend("nobody", "r-0"), 404, httpapi.SlugNotFound, "endpoint"},
			{"unknown outcome", resend("billing", "r-none"), 404, httpapi.SlugNotFound, "outcome"},
			{"bad rid", resend("billing", "r%20x"), 400, httpapi.SlugInvalidRequest, "reservation"},
			{"synthetic rid", resend("billing", "s:x"), 400, httpapi.SlugInvalidRequest, "reservation"},
			{"bad endpoint", resend("Billing", "r-0"), 400, httpapi.SlugInvalidRequest, "endpoint"},
		} {
			t.Run(c.name, func(t *testing.T) {
				body := want(t, h.do(http.MethodPost, c.path, h.admin(), ""), c.status, c.slug)
				if d, _ := body["detail"].(string); !strings.Contains(d, c.detail) {
					t.Fatalf("detail %q, want it to mention %q", d, c.detail)
				}
				if !reflect.DeepEqual(before, h.dump()) {
					t.Fatal("a refused resend changed Redis")
				}
			})
		}

		// An endpoint created after the outcome never had it.
		h.putEndpoint("acme", "later", `{"url": "https://later.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, resend("later", "r-0"), h.admin(), ""), http.StatusConflict, httpapi.SlugNotDelivered)

		// A disabled endpoint's stream waits for the enable: no due time.
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "enabled": false}`)
		got = want(t, h.do(http.MethodPost, resend("billing", "r-0"), h.admin(), ""), http.StatusAccepted, "")
		if due, ok := got["due_at"]; !ok || due != nil || got["seq"] != seq0 {
			t.Fatalf("resent to a disabled endpoint %v: want due_at null", got)
		}
	})
}

func TestAnErasureRemovesTheOutcomeAndIsLoggedWithoutItsBody(t *testing.T) {
	h, logs := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks"}`)
	want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-0", "aborted")), http.StatusAccepted, "")
	want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
	h.deliver("acme", "billing", 1, outbox.Done{AtMs: outboxtest.T0, Status: 200})

	got := want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/outcomes/r-0", h.token("acme", httpapi.ScopeAdmin), ""), http.StatusOK, "")
	if !reflect.DeepEqual(got, decodeJSON(t, `{"reservation_id": "r-0", "dropped": ["audit"]}`)) {
		t.Fatalf("erased %v", got)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "outcome erased") {
			line = l
		}
	}
	for _, part := range []string{"subject=tester", "namespace=acme", "reservation_id=r-0", "level=INFO"} {
		if !strings.Contains(line, part) {
			t.Fatalf("log line %q lacks %s", line, part)
		}
	}
	if strings.Contains(logs.String(), "main moved") || strings.Contains(logs.String(), "acme/widgets") {
		t.Fatalf("the log holds the outcome's body: %s", logs)
	}
	want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r-0", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
	page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=audit", h.admin(), ""), http.StatusOK, "")
	if rows := page["rows"].([]any); len(rows) != 1 || rows[0].(map[string]any)["reservation_id"] != "r-1" {
		t.Fatalf("audit's outbox %v", page["rows"])
	}
	// Nothing left to drop: an empty list, not null.
	h.deliver("acme", "audit", 1, outbox.Done{AtMs: outboxtest.T0, Status: 200})
	h.deliver("acme", "billing", 1, outbox.Done{AtMs: outboxtest.T0, Status: 200})
	got = want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/outcomes/r-1", h.admin(), ""), http.StatusOK, "")
	if d, ok := got["dropped"].([]any); !ok || len(d) != 0 {
		t.Fatalf("erased a delivered outcome %v", got)
	}
	before := h.dump()
	want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/outcomes/r-0", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
	want(t, h.do(http.MethodDelete, "/v1/namespaces/acme/outcomes/s:x", h.admin(), ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
	if !reflect.DeepEqual(before, h.dump()) {
		t.Fatal("a refused erasure changed Redis")
	}
	// The reservation id still answers duplicate for its window.
	body := want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-0", "aborted")), http.StatusAccepted, "")
	if got := results(t, body); !reflect.DeepEqual(got, []string{"r-0=duplicate"}) {
		t.Fatalf("ingest after the erasure %v", got)
	}
}

func TestARecoveryIsStartedAndFollowed(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		for _, rid := range []string{"r-0", "r-1", "r-2"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
			h.clk.Advance(time.Minute)
		}
		h.deliver("acme", "billing", 3, outbox.Done{AtMs: h.clk.Now().UnixMilli(), Status: 200})
		h.clk.Advance(time.Hour)
		created := h.clk.Now().UnixMilli()
		body := `{"since": "2025-11-30T00:01:00Z", "until": "2025-11-30T00:03:00Z"}`
		woken := h.woken.Load()
		rec := h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/billing/recover", h.token("acme", httpapi.ScopeAdmin), body)
		job := want(t, rec, http.StatusAccepted, "")
		id, _ := job["id"].(string)
		if loc := rec.Header().Get("Location"); loc != "/v1/namespaces/acme/endpoints/billing/recoveries/"+id || len(id) != 32 {
			t.Fatalf("Location %q for job %v", loc, job)
		}
		wantJob := map[string]any{"id": id, "endpoint": "billing", "state": "running", "since": "2025-11-30T00:01:00.000Z",
			"until": "2025-11-30T00:03:00.000Z", "examined": 0.0, "queued": 0.0, "total": 2.0, "created_at": at(created)}
		if !reflect.DeepEqual(job, wantJob) {
			t.Fatalf("job %v\nwant %v", job, wantJob)
		}
		if h.woken.Load() == woken {
			t.Fatal("a recovery must wake the driver, which runs it")
		}
		reader := h.token("acme", httpapi.ScopeOutboxRead)
		if got := want(t, h.do(http.MethodGet, rec.Header().Get("Location"), reader, ""), http.StatusOK, ""); !reflect.DeepEqual(got, wantJob) {
			t.Fatalf("job read %v", got)
		}
		before := h.dump()
		want(t, h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/billing/recover", h.admin(), body), http.StatusConflict, httpapi.SlugRecoveryRunning)
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a refused recovery changed Redis")
		}

		h.clk.Advance(time.Second)
		h.runRecovery("billing")
		done := want(t, h.do(http.MethodGet, rec.Header().Get("Location"), reader, ""), http.StatusOK, "")
		if done["state"] != "done" || done["queued"] != 2.0 || done["finished_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("job done %v", done)
		}
		page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing", h.admin(), ""), http.StatusOK, "")
		var rids []string
		for _, r := range page["rows"].([]any) {
			rids = append(rids, r.(map[string]any)["reservation_id"].(string))
		}
		if !reflect.DeepEqual(rids, []string{"r-1", "r-2"}) {
			t.Fatalf("pending after the recovery %v", rids)
		}
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing/recoveries/0123456789abcdef0123456789abcdef", reader, ""), http.StatusNotFound, httpapi.SlugNotFound)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/audit/recoveries/"+id, reader, ""), http.StatusNotFound, httpapi.SlugNotFound)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing/recoveries/"+strings.ToUpper(id), reader, ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/endpoints/billing/recoveries/abc", reader, ""), http.StatusBadRequest, httpapi.SlugInvalidRequest)
	})
}

func TestBadRecoveriesAreRefusedAndChangeNothing(t *testing.T) {
	h, _ := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	h.clk.Advance(48 * time.Hour)
	now := h.clk.Now()
	ts := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339Nano) }
	valid := `{"since": "` + ts(-time.Hour) + `", "until": "` + ts(0) + `"}`
	path := "/v1/namespaces/acme/endpoints/billing/recover"
	before := h.dump()
	for _, c := range []struct {
		name, path, ctype, body string
		status                  int
		slug                    httpapi.Slug
		detail                  string
	}{
		{"unknown field", path, "application/json", strings.Replace(valid, `"since"`, `"endpoint": "x", "since"`, 1), 400, httpapi.SlugInvalidRequest, "endpoint"},
		{"duplicate key", path, "application/json", strings.Replace(valid, `"since"`, `"since": "x", "since"`, 1), 400, httpapi.SlugInvalidRequest, "since"},
		{"trailing data", path, "application/json", valid + ` {}`, 400, httpapi.SlugInvalidRequest, "nothing after it"},
		{"null", path, "application/json", `{"since": null, "until": "` + ts(0) + `"}`, 400, httpapi.SlugInvalidRequest, "null"},
		{"number", path, "application/json", `{"since": 1764460800000, "until": "` + ts(0) + `"}`, 400, httpapi.SlugInvalidRequest, "since"},
		{"no since", path, "application/json", `{"until": "` + ts(0) + `"}`, 400, httpapi.SlugInvalidRequest, "since"},
		{"no until", path, "application/json", `{"since": "` + ts(-time.Hour) + `"}`, 400, httpapi.SlugInvalidRequest, "until"},
		{"malformed since", path, "application/json", strings.Replace(valid, ts(-time.Hour), "last tuesday", 1), 400, httpapi.SlugInvalidRequest, "since"},
		{"since without a zone", path, "application/json", strings.Replace(valid, ts(-time.Hour), now.Format("2006-01-02T15:04:05"), 1), 400, httpapi.SlugInvalidRequest, "since"},
		{"malformed until", path, "application/json", strings.Replace(valid, ts(0), "2025-02-30T00:00:00Z", 1), 400, httpapi.SlugInvalidRequest, "until"},
		{"reversed", path, "application/json", `{"since": "` + ts(0) + `", "until": "` + ts(-time.Hour) + `"}`, 400, httpapi.SlugInvalidRequest, "until"},
		{"empty", path, "application/json", `{"since": "` + ts(0) + `", "until": "` + ts(0) + `"}`, 400, httpapi.SlugInvalidRequest, "until"},
		{"before the retention", path, "application/json", `{"since": "` + ts(-25*time.Hour) + `", "until": "` + ts(0) + `"}`, 400, httpapi.SlugInvalidRequest, "since"},
		{"10 MB body", path, "application/json", `{"since": "` + strings.Repeat("x", 10<<20) + `"}`, 413, httpapi.SlugBodyTooLarge, "1 MiB"},
		{"no content type", path, "", valid, 415, httpapi.SlugUnsupportedMediaType, "application/json"},
		{"no body", path, "application/json", "", 415, httpapi.SlugUnsupportedMediaType, "application/json"},
		{"array", path, "application/json", `[` + valid + `]`, 400, httpapi.SlugInvalidRequest, "object"},
		{"unknown endpoint", "/v1/namespaces/acme/endpoints/nobody/recover", "application/json", valid, 404, httpapi.SlugNotFound, "endpoint"},
		{"bad endpoint", "/v1/namespaces/acme/endpoints/-x/recover", "application/json", valid, 400, httpapi.SlugInvalidRequest, "endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := want(t, h.doType(http.MethodPost, c.path, h.admin(), c.ctype, c.body), c.status, c.slug)
			if d, _ := body["detail"].(string); !strings.Contains(d, c.detail) {
				t.Fatalf("detail %q, want it to mention %q", d, c.detail)
			}
			if !reflect.DeepEqual(before, h.dump()) {
				t.Fatal("a refused recovery changed Redis")
			}
		})
	}
}

// A token bound to another namespace is refused before anything is read:
// the answer is the same whether the outcome or job exists or not.
func TestANamespaceBoundTokenSeesNoOtherNamespacesHistory(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		h.deliver("acme", "billing", 1, outbox.Done{AtMs: outboxtest.T0, Status: 200})
		job := want(t, h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/billing/recover", h.admin(),
			`{"since": "2025-11-29T12:00:00Z", "until": "2025-11-30T00:00:01Z"}`), http.StatusAccepted, "")
		jobPath := "/v1/namespaces/acme/endpoints/billing/recoveries/" + job["id"].(string)
		before := h.dump()

		answer := func(method, path, token, body string) string {
			rec := h.do(method, path, token, body)
			var p map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			delete(p, "request_id")
			b, _ := json.Marshal(p)
			return http.StatusText(rec.Code) + " " + string(b)
		}
		for _, scope := range []httpapi.Scope{httpapi.ScopeAdmin, httpapi.ScopeOutboxRead} {
			globex := h.token("globex", scope)
			for _, pair := range [][2][3]string{
				{{"GET", "/v1/namespaces/acme/outcomes/r-1", ""}, {"GET", "/v1/namespaces/acme/outcomes/r-none", ""}},
				{{"GET", jobPath, ""}, {"GET", "/v1/namespaces/acme/endpoints/billing/recoveries/0123456789abcdef0123456789abcdef", ""}},
				{{"GET", "/v1/namespaces/acme/outcomes", ""}, {"GET", "/v1/namespaces/acme/outcomes?endpoint=nobody", ""}},
				{{"DELETE", "/v1/namespaces/acme/outcomes/r-1", ""}, {"DELETE", "/v1/namespaces/acme/outcomes/r-none", ""}},
				{{"POST", "/v1/namespaces/acme/endpoints/billing/outcomes/r-1/resend", ""}, {"POST", "/v1/namespaces/acme/endpoints/nobody/outcomes/r-none/resend", ""}},
				{{"POST", "/v1/namespaces/acme/endpoints/billing/recover", `{"since": "2025-11-29T12:00:00Z", "until": "2025-11-30T00:00:01Z"}`},
					{"POST", "/v1/namespaces/acme/endpoints/nobody/recover", `{"since": "2025-11-29T12:00:00Z", "until": "2025-11-30T00:00:01Z"}`}},
			} {
				existing := answer(pair[0][0], pair[0][1], globex, pair[0][2])
				missing := answer(pair[1][0], pair[1][1], globex, pair[1][2])
				if !strings.HasPrefix(existing, "Forbidden ") || existing != missing {
					t.Fatalf("%s %s with a %s token of globex: %s; for a missing one: %s", pair[0][0], pair[0][1], scope, existing, missing)
				}
				if strings.Contains(existing, "r-1") || strings.Contains(existing, "acme/widgets") {
					t.Fatalf("the refusal tells of acme's outcome: %s", existing)
				}
			}
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a token of another namespace changed Redis")
		}
		// Bound to acme, the same token reads it.
		want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/r-1", h.token("acme", httpapi.ScopeOutboxRead), ""), http.StatusOK, "")
	})
}

func TestTheHistoryRoutesNeedTheirScopes(t *testing.T) {
	h, _ := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
	h.deliver("acme", "billing", 1, outbox.Done{AtMs: outboxtest.T0, Status: 200})
	before := h.dump()
	recoverBody := `{"since": "2025-11-29T12:00:00Z", "until": "2025-11-30T00:00:01Z"}`
	reads := [][3]string{
		{"GET", "/v1/namespaces/acme/outcomes/r-1", ""},
		{"GET", "/v1/namespaces/acme/outcomes", ""},
		{"GET", "/v1/namespaces/acme/endpoints/billing/recoveries/0123456789abcdef0123456789abcdef", ""},
	}
	writes := [][3]string{
		{"DELETE", "/v1/namespaces/acme/outcomes/r-1", ""},
		{"POST", "/v1/namespaces/acme/endpoints/billing/outcomes/r-1/resend", ""},
		{"POST", "/v1/namespaces/acme/endpoints/billing/recover", recoverBody},
	}
	for _, scope := range []httpapi.Scope{httpapi.ScopeOutcomesWrite, httpapi.ScopeEndpointsWrite, httpapi.ScopeOutboxRead} {
		routes := writes
		if scope != httpapi.ScopeOutboxRead {
			routes = append(routes, reads...)
		}
		for _, r := range routes {
			body := want(t, h.do(r[0], r[1], h.token("", scope), r[2]), http.StatusForbidden, httpapi.SlugForbidden)
			if d, _ := body["detail"].(string); !strings.Contains(d, "scope") {
				t.Fatalf("%s %s with %s: %q", r[0], r[1], scope, d)
			}
		}
	}
	for _, r := range append(reads, writes...) {
		want(t, h.do(r[0], r[1], "", r[2]), http.StatusUnauthorized, httpapi.SlugUnauthorized)
	}
	if !reflect.DeepEqual(before, h.dump()) {
		t.Fatal("a refused token changed Redis")
	}
}
