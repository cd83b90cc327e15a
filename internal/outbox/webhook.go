package outbox

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/digest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// EncodeWebhook is the webhook body for o, accepted in namespace.
// data.namespace names the tenant, since one relay delivers for many and
// its mkit-hook key signs for all of them (the signature names it too).
// audience is relay's own public origin (data.audience), not the
// endpoint's. The bytes depend on o, namespace and audience only, so every
// attempt of one delivery sends the same body. An invalid outcome or
// namespace, or an empty audience, is an error matching ErrInvalid.
func EncodeWebhook(o *schema.Outcome, namespace, audience string) ([]byte, error) {
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
	return appendWebhook(make([]byte, 0, webhookSize(o, namespace, audience)), o, namespace, audience), nil
}

// appendWebhook writes an outcome's body by hand rather than through
// json.Marshal, whose reflection was most of a call's encoding cost: the
// bytes are exactly what json.Marshal gives for the documented shape (keys
// in this order, strings escaped as encoding/json escapes them, exactly the
// kinds set, Committed's nil refs as []), which the tests check against it.
// data is the outcome's own JSON with its namespace and relay's audience
// after the reservation id.
func appendWebhook(b []byte, o *schema.Outcome, namespace, audience string) []byte {
	b = append(b, `{"type":"outcome.`...)
	b = append(b, o.Kind()...)
	b = append(b, `","timestamp":"`...)
	// Milliseconds in, so at most three fractional digits come out; only
	// digits, '-', ':', '.', 'T' and 'Z', none escaped.
	b = time.UnixMilli(o.OccurredUnixMs).UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":{"reservation_id":`...)
	b = appendJSONString(b, o.ReservationID)
	b = append(b, `,"namespace":`...)
	b = appendJSONString(b, namespace)
	b = append(b, `,"audience":`...)
	b = appendJSONString(b, audience)
	b = append(b, `,"repository":`...)
	b = appendJSONString(b, o.Repository)
	b = append(b, `,"occurred_unix_ms":`...)
	b = strconv.AppendInt(b, o.OccurredUnixMs, 10)
	if c := o.Committed; c != nil {
		b = append(b, `,"committed":{"bytes_stored":`...)
		b = strconv.AppendUint(b, c.BytesStored, 10)
		b = append(b, `,"new_to_repo":`...)
		b = strconv.AppendUint(b, c.NewToRepo, 10)
		b = append(b, `,"new_to_store":`...)
		b = strconv.AppendUint(b, c.NewToStore, 10)
		b = append(b, `,"refs":[`...)
		for i, r := range c.Refs {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, r.Name)
			b = append(b, `,"new":`...)
			b = appendJSONString(b, r.New)
			b = append(b, `,"deleted":`...)
			b = strconv.AppendBool(b, r.Deleted)
			b = append(b, '}')
		}
		b = append(b, "]}"...)
	}
	if a := o.Aborted; a != nil {
		b = append(b, `,"aborted":{"reason":`...)
		b = appendJSONString(b, a.Reason)
		b = append(b, `,"detail":`...)
		b = appendJSONString(b, a.Detail)
		b = append(b, '}')
	}
	if o.Expired != nil {
		b = append(b, `,"expired":{}`...)
	}
	if r := o.ReadServed; r != nil {
		b = append(b, `,"read_served":{"object":`...)
		b = appendJSONString(b, r.Object)
		b = append(b, `,"bytes_served":`...)
		b = strconv.AppendUint(b, r.BytesServed, 10)
		b = append(b, '}')
	}
	return append(b, "}}"...)
}

// webhookSize is about the size of appendWebhook's output, so that its
// buffer is allocated once: the fixed text and the strings unescaped.
func webhookSize(o *schema.Outcome, namespace, audience string) int {
	n := 256 + len(o.ReservationID) + len(namespace) + len(audience) + len(o.Repository)
	if c := o.Committed; c != nil {
		for _, r := range c.Refs {
			n += 40 + len(r.Name) + len(r.New)
		}
	}
	if a := o.Aborted; a != nil {
		n += len(a.Reason) + len(a.Detail)
	}
	if r := o.ReadServed; r != nil {
		n += len(r.Object)
	}
	return n
}

// appendJSONString appends s as encoding/json writes a string (json.Marshal
// escapes HTML): '"', '\\' and control characters escaped (\b, \f, \n, \r
// and \t short, others as \u00xx), '<', '>' and '&' as \u003c, \u003e and
// \u0026, U+2028 and U+2029 as \u2028 and \u2029, and each byte of invalid
// UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', digits[c>>4], digits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', digits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
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
	schema.Event
}

func encodeEventWebhook(o *schema.Outcome, namespace, audience string) ([]byte, error) {
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
	sum := digest.Sum256(b)
	return "msg_" + hex.EncodeToString(sum[:16])
}
