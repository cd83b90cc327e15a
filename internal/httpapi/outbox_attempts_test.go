package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func TestOutboxShowsEachRowsAttemptsAndTheirCount(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-0", "committed")), http.StatusAccepted, "")
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		// 37 failures, the last 10 kept: a timeout, then refusals whose
		// answers carried a text.
		var hist schema.Attempts
		for i := range 37 {
			a := schema.Attempt{AtMs: outboxtest.T0 + int64(i)*1000 + 7, DurationMs: 5000, ErrorClass: "timeout"}
			if i >= 30 {
				a = schema.Attempt{AtMs: outboxtest.T0 + int64(i)*1000 + 7, DurationMs: 12, Status: 503, ErrorClass: "status",
					Excerpt: schema.Excerpt([]byte("{\"error\":\"busy\"}\n\x1b[0m"))}
			}
			if i == 28 {
				a.DurationMs = 0 // refused at once: still shown
			}
			hist = hist.With(a)
		}
		v, err := schema.EncodeAttempts(hist)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := schema.AttemptKey("billing", "r-0")
		var b store.Batch
		b.Put(key, v)
		if _, err := h.st.Apply(t.Context(), store.Partition{Namespace: "acme"}, b); err != nil {
			t.Fatal(err)
		}

		rec := h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing", h.token("acme", httpapi.ScopeOutboxRead), "")
		if rec.Code != http.StatusOK {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		var page struct {
			Rows []struct {
				ReservationID string `json:"reservation_id"`
				AttemptCount  int    `json:"attempt_count"`
				Attempts      []struct {
					At              string `json:"at"`
					DurationMs      int    `json:"duration_ms"`
					Status          int    `json:"status"`
					Error           string `json:"error"`
					ResponseExcerpt string `json:"response_excerpt"`
				} `json:"attempts"`
				LastAttempt *struct {
					Count int `json:"count"`
				} `json:"last_attempt"`
			} `json:"rows"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 2 {
			t.Fatalf("rows %s", rec.Body)
		}
		r0, r1 := page.Rows[0], page.Rows[1]
		if r0.AttemptCount != 37 || len(r0.Attempts) != schema.MaxAttempts || r0.LastAttempt == nil || r0.LastAttempt.Count != 37 {
			t.Fatalf("r-0: %s", rec.Body)
		}
		first, last := r0.Attempts[0], r0.Attempts[9]
		if first.At != "2025-11-30T00:00:27.007Z" || first.Error != "timeout" || first.Status != 0 || first.DurationMs != 5000 || first.ResponseExcerpt != "" {
			t.Fatalf("oldest kept: %+v", first)
		}
		if last.At != "2025-11-30T00:00:36.007Z" || last.Status != 503 || last.Error != "status" || last.DurationMs != 12 ||
			last.ResponseExcerpt != `{"error":"busy"} `+"\uFFFD[0m" {
			t.Fatalf("newest: %+v", last)
		}
		if strings.Contains(rec.Body.String(), `\u001b`) {
			t.Fatalf("a control character reached the view: %s", rec.Body)
		}
		if r1.AttemptCount != 0 || r1.Attempts == nil || len(r1.Attempts) != 0 || r1.LastAttempt != nil {
			t.Fatalf("r-1: %s", rec.Body)
		}

		// A token bound to another namespace sees none of it.
		other := h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=billing", h.token("globex", httpapi.ScopeOutboxRead), "")
		if other.Code != http.StatusForbidden || strings.Contains(other.Body.String(), "busy") {
			t.Fatalf("token of globex: %d %s", other.Code, other.Body)
		}
	})
}
