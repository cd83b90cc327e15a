package httpapi_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// An endpoint shows since when its calls fail and how the last failed,
// and, disabled, why and since when; a healthy, enabled one shows
// neither. An operator endpoint names the events it takes.
func TestTheEndpointShowsItsHealth(t *testing.T) {
	h, _ := newLoggedHarness(t)
	path := "/v1/namespaces/acme/endpoints/billing"
	want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusCreated, "")
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	for _, field := range []string{"failing", "disabled_at", "disabled_reason"} {
		if v, ok := got[field]; ok {
			t.Errorf("a healthy endpoint shows %s: %v", field, v)
		}
	}
	p := store.Partition{Namespace: "acme"}
	v, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 3, Health: &schema.Health{
		FailingSinceMs: outboxtest.T0 - 60_000, NotifiedMs: outboxtest.T0 - 60_000, LastStatus: 503, LastError: "status"}})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(timers.Key(outboxtest.T0+1000, timers.KindOutcomeDelivery, "billing"), timers.EncodeIdle(v))
	if res, err := h.st.Apply(context.Background(), p, b); err != nil || !res.Committed {
		t.Fatalf("put timer: %+v %v", res, err)
	}
	got = want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	wantFailing := map[string]any{"since": "2025-11-29T23:59:00.000Z", "last_status": 503.0, "last_error": "status"}
	if !reflect.DeepEqual(got["failing"], wantFailing) {
		t.Errorf("failing %v, want %v", got["failing"], wantFailing)
	}
	// Disabled by relay: why, and since when.
	key, _ := schema.EndpointKey("billing")
	row, _, err := h.st.Get(context.Background(), p, key)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := schema.DecodeEndpoint(row)
	if err != nil {
		t.Fatal(err)
	}
	ep.Enabled, ep.DisabledReason, ep.DisabledMs = false, "failing", outboxtest.T0+500
	ep.UpdatedMs = ep.DisabledMs
	nv, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	b = store.Batch{}
	b.Put(key, nv)
	if res, err := h.st.Apply(context.Background(), p, b); err != nil || !res.Committed {
		t.Fatalf("put endpoint: %+v %v", res, err)
	}
	got = want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if got["disabled_reason"] != "failing" || got["disabled_at"] != "2025-11-30T00:00:00.500Z" || got["enabled"] != false {
		t.Errorf("disabled endpoint shows %v", got)
	}
	// Enabled again: neither reason nor time stays.
	got = want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusOK, "")
	if _, ok := got["disabled_at"]; ok || got["disabled_reason"] != nil {
		t.Errorf("enabled endpoint shows %v", got)
	}
	// The operator's endpoint takes every event.
	got = want(t, h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/ops", h.admin(),
		`{"url": "https://ops.example.com/relay", "kinds": ["relay.*"]}`), http.StatusCreated, "")
	if !reflect.DeepEqual(got["kinds"], []any{"relay.*"}) {
		t.Errorf("operator endpoint kinds %v", got["kinds"])
	}
}

// A stream due now only to append its events shows as next tried when the
// fire that decided them chose, not now.
func TestTheNextAttemptOfAStreamWithEventsToAppendIsItsOwn(t *testing.T) {
	h, _ := newLoggedHarness(t)
	path := "/v1/namespaces/acme/endpoints/billing"
	want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusCreated, "")
	resume := outboxtest.T0 + 10*60_000
	v, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 1, Health: &schema.Health{
		FailingSinceMs: outboxtest.T0, NotifiedMs: outboxtest.T0, LastStatus: 503, LastError: "status", ResumeMs: resume,
		Pending: []schema.PendingEvent{{AtMs: outboxtest.T0, Event: schema.Event{Type: schema.EventFailing, Endpoint: "billing", FailingSinceMs: outboxtest.T0}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(timers.Key(outboxtest.T0, timers.KindOutcomeDelivery, "billing"), timers.EncodeIdle(v))
	if res, err := h.st.Apply(context.Background(), store.Partition{Namespace: "acme"}, b); err != nil || !res.Committed {
		t.Fatalf("put timer: %+v %v", res, err)
	}
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if got["next_attempt_at"] != "2025-11-30T00:10:00.000Z" {
		t.Errorf("next attempt %v, want the resume time", got["next_attempt_at"])
	}
}

// A timer left idle after its stream ended, with nothing to deliver, is no
// next attempt; once a row is pending, its due time is.
func TestAStreamWithNothingToDeliverHasNoNextAttempt(t *testing.T) {
	h, _ := newLoggedHarness(t)
	path := "/v1/namespaces/acme/endpoints/billing"
	want(t, h.do(http.MethodPut, path, h.admin(), `{"url": "https://billing.example.com/hooks"}`), http.StatusCreated, "")
	p := store.Partition{Namespace: "acme"}
	bkey, _ := schema.BacklogKey("billing")
	var b store.Batch
	b.Put(timers.Key(outboxtest.T0+30_000, timers.KindOutcomeDelivery, "billing"), timers.EncodeIdle(nil))
	b.Put(bkey, schema.EncodeBacklog(schema.Backlog{}))
	if res, err := h.st.Apply(context.Background(), p, b); err != nil || !res.Committed {
		t.Fatalf("put timer: %+v %v", res, err)
	}
	got := want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if got["next_attempt_at"] != nil {
		t.Errorf("next attempt %v with nothing to deliver, want null", got["next_attempt_at"])
	}
	b = store.Batch{}
	b.Put(bkey, schema.EncodeBacklog(schema.Backlog{Rows: 1, Bytes: 10}))
	if res, err := h.st.Apply(context.Background(), p, b); err != nil || !res.Committed {
		t.Fatalf("put backlog: %+v %v", res, err)
	}
	got = want(t, h.do(http.MethodGet, path, h.admin(), ""), http.StatusOK, "")
	if got["next_attempt_at"] != "2025-11-30T00:00:30.000Z" {
		t.Errorf("next attempt %v with a row pending, want the timer's due time", got["next_attempt_at"])
	}
}
