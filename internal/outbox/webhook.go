package outbox

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/store"
	"github.com/zeebo/blake3"
)

// webhook is the delivered body. Struct fields, not a map, so that the keys
// come out in the documented order and the bytes are the same on every
// attempt.
type webhook struct {
	Type      string      `json:"type"`
	Timestamp string      `json:"timestamp"`
	Data      webhookData `json:"data"`
}

// webhookData is the outcome's own JSON with its namespace and relay's
// audience after the reservation id. A valid outcome has exactly one kind
// set, so omitempty leaves exactly that one.
type webhookData struct {
	ReservationID  string      `json:"reservation_id"`
	Namespace      string      `json:"namespace"`
	Audience       string      `json:"audience"`
	Repository     string      `json:"repository"`
	OccurredUnixMs int64       `json:"occurred_unix_ms"`
	Committed      *Committed  `json:"committed,omitempty"`
	Aborted        *Aborted    `json:"aborted,omitempty"`
	Expired        *Expired    `json:"expired,omitempty"`
	ReadServed     *ReadServed `json:"read_served,omitempty"`
}

// EncodeWebhook is the webhook body for o, accepted in namespace.
// data.namespace names the tenant, since one relay delivers for many and
// its mkit-hook key signs for all of them (the signature names it too).
// audience is relay's own public origin (data.audience), not the
// endpoint's. The bytes depend on o, namespace and audience only, so every
// attempt of one delivery sends the same body. An invalid outcome or
// namespace, or an empty audience, is an error matching ErrInvalid.
func EncodeWebhook(o *Outcome, namespace, audience string) ([]byte, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := (store.Partition{Namespace: namespace}).Validate(); err != nil {
		return nil, invalidf("namespace must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
	}
	if audience == "" {
		return nil, invalidf("audience must not be empty")
	}
	if o.Event != nil {
		return encodeEventWebhook(o, namespace, audience)
	}
	body, err := json.Marshal(webhook{
		Type: "outcome." + string(o.Kind()),
		// Milliseconds in, so at most three fractional digits come out.
		Timestamp: time.UnixMilli(o.OccurredUnixMs).UTC().Format(time.RFC3339Nano),
		Data: webhookData{
			ReservationID:  o.ReservationID,
			Namespace:      namespace,
			Audience:       audience,
			Repository:     o.Repository,
			OccurredUnixMs: o.OccurredUnixMs,
			Committed:      o.Committed,
			Aborted:        o.Aborted,
			Expired:        o.Expired,
			ReadServed:     o.ReadServed,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("encode webhook: %w", err)
	}
	return body, nil
}

// eventWebhook is an operator event's body: type is the event's own
// ("endpoint.disabled"), data says which endpoint and why.
type eventWebhook struct {
	Type      string           `json:"type"`
	Timestamp string           `json:"timestamp"`
	Data      eventWebhookData `json:"data"`
}

type eventWebhookData struct {
	EventID        string `json:"event_id"`
	Namespace      string `json:"namespace"`
	Audience       string `json:"audience"`
	OccurredUnixMs int64  `json:"occurred_unix_ms"`
	Event
}

func encodeEventWebhook(o *Outcome, namespace, audience string) ([]byte, error) {
	e := *o.Event
	typ := e.Type
	body, err := json.Marshal(eventWebhook{
		Type:      string(typ),
		Timestamp: time.UnixMilli(o.OccurredUnixMs).UTC().Format(time.RFC3339Nano),
		Data:      eventWebhookData{EventID: o.ReservationID, Namespace: namespace, Audience: audience, OccurredUnixMs: o.OccurredUnixMs, Event: e},
	})
	if err != nil {
		return nil, fmt.Errorf("encode event webhook: %w", err)
	}
	return body, nil
}

// messageIDDomain keeps these digests apart from any other BLAKE3 use of
// the same fields; v1 leaves room for a new encoding without collisions.
const messageIDDomain = "relay:message-id:v1"

// MessageID is the stable id of one outcome's delivery to one endpoint
// (Standard Webhooks' webhook-id, which receivers deduplicate by): "msg_"
// and 32 lowercase hex, the first 16 bytes of BLAKE3 over the domain,
// namespace, endpoint, seq and rid. It is derived, not stored, so every
// attempt carries the same id; the endpoint makes ids differ between
// endpoints, and seq between two acceptances of one reservation id (once
// the idempotency window of the first has ended), which are two messages.
// Each string is length-prefixed, so no two inputs encode alike.
func MessageID(namespace, endpoint string, seq uint64, rid string) string {
	b := make([]byte, 0, 4*binary.MaxVarintLen64+len(messageIDDomain)+len(namespace)+len(endpoint)+8+len(rid))
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(messageIDDomain)
	field(namespace)
	field(endpoint)
	b = binary.BigEndian.AppendUint64(b, seq)
	field(rid)
	sum := blake3.Sum256(b)
	return "msg_" + hex.EncodeToString(sum[:16])
}
