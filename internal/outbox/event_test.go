package outbox_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func disabledEvent() schema.Outcome {
	return schema.NewEvent(schema.Event{Type: schema.EventDisabled, Endpoint: "billing", Reason: "failing",
		FailingSinceMs: t0 - 5*24*3600*1000, LastStatus: 503, LastError: "status"}, t0)
}

func TestEventRecordRoundTrips(t *testing.T) {
	t.Parallel()
	for _, typ := range schema.EventTypes() {
		o := schema.NewEvent(schema.Event{Type: typ, Endpoint: "e-1", FailingSinceMs: 3}, t0)
		v, err := schema.EncodeRecord(&o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeRecord(o.ReservationID, v)
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("%s: %+v, %v; want %+v", typ, got, err, o)
		}
		if got.Kind() != schema.Kind("relay."+string(typ)) {
			t.Fatalf("%s: kind %q", typ, got.Kind())
		}
	}
}

// An event's id is derived from what it says, so emitting it again is a
// duplicate of the first, and two events differ.
func TestEventIDIsDerived(t *testing.T) {
	t.Parallel()
	a, b := disabledEvent(), disabledEvent()
	if a.ReservationID != b.ReservationID || schema.ValidateReservationID(a.ReservationID) != nil {
		t.Fatalf("ids %q and %q", a.ReservationID, b.ReservationID)
	}
	long := strings.Repeat("e", schema.MaxEndpointIDBytes)
	for _, typ := range schema.EventTypes() {
		id := schema.EventID(typ, long, 1<<62)
		if err := schema.ValidateReservationID(id); err != nil {
			t.Fatalf("the longest event id %q: %v", id, err)
		}
	}
	if schema.EventID(schema.EventFailing, "billing", t0) == a.ReservationID || schema.EventID(schema.EventDisabled, "billing", t0+1) == a.ReservationID {
		t.Fatal("two events share an id")
	}
}

// A producer cannot send an event: it would be a forged alert to the
// operator.
func TestIngestRefusesEvents(t *testing.T) {
	t.Parallel()
	o := disabledEvent()
	o.ReservationID = "r-forged"
	err := outbox.ValidateIngest(o, time.UnixMilli(t0))
	if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "event") {
		t.Fatalf("ValidateIngest = %v", err)
	}
	// Nor smuggle one beside an outcome.
	c := committed("r-1")
	c.Event = o.Event
	if err := outbox.ValidateIngest(c, time.UnixMilli(t0)); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("an outcome with an event: %v", err)
	}
	if err := c.Validate(); !errors.Is(err, outbox.ErrInvalid) {
		t.Fatalf("Validate of an outcome with an event: %v", err)
	}
	// Nor take an event's id first, which would leave the event a
	// conflict.
	squat := committed(string(o.Event.Type.Kind()) + ".billing.1764460800000")
	if err := outbox.ValidateIngest(squat, time.UnixMilli(t0)); !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "relay.") {
		t.Fatalf("an outcome under an event's id: %v", err)
	}
	if err := outbox.ValidateIngest(committed("relayed-1"), time.UnixMilli(t0)); err != nil {
		t.Fatalf("an ordinary id: %v", err)
	}
}

func TestEventValidation(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*schema.Outcome){
		"unknown type": func(o *schema.Outcome) { o.Event.Type = "endpoint.exploded" },
		"bad endpoint": func(o *schema.Outcome) { o.Event.Endpoint = "Billing!" },
		"bad reason":   func(o *schema.Outcome) { o.Event.Reason = "Not a token" },
		"bad status":   func(o *schema.Outcome) { o.Event.LastStatus = 42 },
		"bad error":    func(o *schema.Outcome) { o.Event.LastError = strings.Repeat("x", schema.MaxEventErrorBytes+1) },
		"repository":   func(o *schema.Outcome) { o.Repository = "acme/widgets" },
		"no time":      func(o *schema.Outcome) { o.OccurredUnixMs = 0 },
	} {
		o := disabledEvent()
		mod(&o)
		if err := o.Validate(); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}

// Events go only to endpoints that name them; an endpoint without a
// filter takes every outcome kind and no event.
func TestEndpointsTakeEventsOnlyByName(t *testing.T) {
	t.Parallel()
	disabled := schema.EventDisabled.Kind()
	for _, c := range []struct {
		kinds            []schema.Kind
		event, committed bool
	}{
		{nil, false, true},
		{[]schema.Kind{schema.KindCommitted}, false, true},
		{[]schema.Kind{schema.KindEvents}, true, false},
		{[]schema.Kind{disabled}, true, false},
		{[]schema.Kind{schema.EventFailing.Kind()}, false, false},
		{[]schema.Kind{schema.KindEvents, schema.KindCommitted}, true, true},
	} {
		e := schema.Endpoint{Kinds: c.kinds}
		if got := e.Accepts(disabled); got != c.event {
			t.Errorf("kinds %v take endpoint.disabled: %v", c.kinds, got)
		}
		if got := e.Accepts(schema.KindCommitted); got != c.committed {
			t.Errorf("kinds %v take committed: %v", c.kinds, got)
		}
		if got := e.TakesEvents(); got != slicesHasEvent(c.kinds) {
			t.Errorf("kinds %v TakesEvents %v", c.kinds, got)
		}
	}
	e := schema.Endpoint{URL: "https://example.com/h", Scheme: schema.SchemeMkitHookV2, MaxInFlight: 1, Enabled: true}
	for _, k := range []schema.Kind{"relay.", "relay.endpoint", "relay.endpoint.exploded", "relay.**"} {
		e.Kinds = []schema.Kind{k}
		if err := e.Validate(); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("kinds [%q]: %v", k, err)
		}
	}
	e.Kinds = []schema.Kind{schema.KindEvents, schema.EventGone.Kind()}
	if err := e.Validate(); err != nil {
		t.Errorf("kinds %v: %v", e.Kinds, err)
	}
}

func slicesHasEvent(ks []schema.Kind) bool {
	for _, k := range ks {
		if k.IsEvent() {
			return true
		}
	}
	return false
}

func TestEventWebhookBody(t *testing.T) {
	t.Parallel()
	o := disabledEvent()
	body, err := outbox.EncodeWebhook(&o, relayNS, relayAudience)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"endpoint.disabled","timestamp":"2025-11-30T00:00:00Z","data":{"event_id":"relay.endpoint.disabled.billing.1764460800000",` +
		`"namespace":"acme","audience":"https://relay.example.com","occurred_unix_ms":1764460800000,"type":"endpoint.disabled",` +
		`"endpoint":"billing","reason":"failing","failing_since_unix_ms":1764028800000,"last_status":503,"last_error":"status"}}`
	if string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
}
