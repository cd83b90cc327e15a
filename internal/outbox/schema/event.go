package schema

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// EventType names an operator event: what relay did to an endpoint, or saw
// it do. Events are outcomes relay appends itself, delivered through the
// outbox like any other, to the endpoints whose kinds name them.
type EventType string

// Operator events.
const (
	// EventDisabled: relay disabled the endpoint after it delivered nothing
	// for the disable-after period while its calls failed.
	EventDisabled EventType = "endpoint.disabled"
	// EventFailing: a call failed after a period of health; at most once
	// an hour per endpoint.
	EventFailing EventType = "endpoint.failing"
	// EventRecovered: the endpoint delivered again after an event said it
	// was failing, disabled or gone.
	EventRecovered EventType = "endpoint.recovered"
	// EventGone: the endpoint answered 410 and relay disabled it.
	EventGone EventType = "endpoint.gone"
	// EventTest: an operator asked for a test delivery. It goes to the
	// endpoint it names and to no other, whatever the kinds of either
	// (Routes), so no filter names it.
	EventTest EventType = "endpoint.test"
)

// EventTypes lists every event type an endpoint's kinds can name, in a
// stable order: all but EventTest.
func EventTypes() []EventType {
	return []EventType{EventDisabled, EventFailing, EventRecovered, EventGone}
}

// Kind is the kind an endpoint's filter names the event by,
// "relay.<type>".
func (t EventType) Kind() Kind { return Kind(EventPrefix + string(t)) }

func (t EventType) valid() bool { return eventCode(t) != 0 }

// Routes reports whether the event goes to the endpoint it names alone
// rather than to the endpoints whose kinds take it.
func (t EventType) Routes() bool { return t == EventTest }

// KindEvents in an endpoint's kinds takes every operator event; an endpoint
// without it, or without an event's own kind, takes none, whatever else
// its filter says.
const KindEvents Kind = "relay.*"

// EventPrefix starts the kind of every operator event and, in EventID,
// its reservation id.
const EventPrefix = "relay."

// IsEvent reports whether k names operator events, KindEvents included.
func (k Kind) IsEvent() bool { return strings.HasPrefix(string(k), EventPrefix) }

// MaxEventErrorBytes bounds an event's error class.
const MaxEventErrorBytes = 32

// ValidEventError reports whether class may be an event's LastError: a
// token of at most MaxEventErrorBytes.
func ValidEventError(class string) bool { return validToken(class, MaxEventErrorBytes) }

// Event is an operator event about one endpoint of the namespace. The
// outcome carrying it has no repository; its occurred time is the event's.
type Event struct {
	Type     EventType `json:"type"`
	Endpoint string    `json:"endpoint"`
	// Reason is why a disabled endpoint is: "failing" or "gone".
	Reason string `json:"reason,omitempty"`
	// FailingSinceMs is when the endpoint's calls began failing, for
	// failing, disabled and recovered; 0 when not known.
	FailingSinceMs int64 `json:"failing_since_unix_ms,omitempty"`
	// LastStatus and LastError are the last failed call's HTTP status and
	// error class (status, timeout, connect, ...), when there was one.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
}

func (e *Event) validate() error {
	switch {
	case !e.Type.valid():
		return invalidf("event.type must be one of endpoint.disabled, endpoint.failing, endpoint.recovered, endpoint.gone, endpoint.test")
	case !validEndpointID(e.Endpoint):
		return invalidf("event.endpoint must be an endpoint id")
	case e.Reason != "" && !validToken(e.Reason, MaxDisabledReason):
		return invalidf("event.reason must be a token of at most %d bytes", MaxDisabledReason)
	case e.FailingSinceMs < 0:
		return invalidf("event.failing_since_unix_ms must not be negative")
	case e.LastStatus != 0 && (e.LastStatus < 100 || e.LastStatus > 599):
		return invalidf("event.last_status must be an HTTP status")
	case e.LastError != "" && !ValidEventError(e.LastError):
		return invalidf("event.last_error must be a token of at most %d bytes", MaxEventErrorBytes)
	}
	return nil
}

// EventID is the reservation id of the event of type t about endpoint at
// atMs: derived, so appending one event twice (a fire that emitted it and
// did not live to record so) answers a duplicate, never a second event.
func EventID(t EventType, endpoint string, atMs int64) string {
	return fmt.Sprintf("%s%s.%s.%d", EventPrefix, t, endpoint, atMs)
}

// NewEvent is the outcome carrying e, at atMs.
func NewEvent(e Event, atMs int64) Outcome {
	return Outcome{ReservationID: EventID(e.Type, e.Endpoint, atMs), OccurredUnixMs: atMs, Event: &e}
}

// Event codes in a record.
func eventCode(t EventType) byte {
	switch t {
	case EventDisabled:
		return 1
	case EventFailing:
		return 2
	case EventRecovered:
		return 3
	case EventGone:
		return 4
	case EventTest:
		return 5
	}
	return 0
}

func eventOfCode(c byte) EventType {
	for _, t := range append(EventTypes(), EventTest) {
		if eventCode(t) == c {
			return t
		}
	}
	return ""
}

// appendEvent is an event's record body: type (1), endpoint, reason
// (len, bytes), failing since ms, last status (uvarints), last error (len,
// bytes).
func appendEvent(v []byte, e *Event) []byte {
	v = append(v, eventCode(e.Type))
	v = appendStr(v, e.Endpoint)
	v = appendStr(v, e.Reason)
	v = binary.AppendUvarint(v, uint64(e.FailingSinceMs))
	v = binary.AppendUvarint(v, uint64(e.LastStatus))
	return appendStr(v, e.LastError)
}

func readEvent(r *reader) *Event {
	e := &Event{Type: eventOfCode(r.u8()), Endpoint: r.str(MaxEndpointIDBytes), Reason: r.str(MaxDisabledReason)}
	since, status := r.uvarint(), r.uvarint()
	if since > 1<<62 || status > 599 {
		r.fail("event field out of range")
	}
	e.FailingSinceMs, e.LastStatus = int64(since), int(status)
	e.LastError = r.str(MaxEventErrorBytes)
	return e
}

// validEvent reports whether k is KindEvents or the kind of an event type
// that kinds route.
func (k Kind) validEvent() bool {
	t, ok := strings.CutPrefix(string(k), EventPrefix)
	return ok && (k == KindEvents || EventType(t).valid() && !EventType(t).Routes())
}
