package schema

import (
	"encoding/binary"
	"strings"

	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Class is the first byte of a row key. Each class is a contiguous key range,
// so a scan of one class never sees another.
type Class byte

// Row classes of a namespace partition. Keys are the tag followed by the
// parts shown; integers are fixed-width big-endian so that numeric order is
// byte order.
const (
	// ClassPending: 'p' endpoint '/' seq(8) rid -> empty; the stream's queue
	// in sequence order.
	ClassPending Class = 'p'
	// ClassBacklog: 'b' endpoint -> rows and bytes not yet acknowledged.
	// Its tag is the store's sum tag, so each bucket totals the backlogs
	// of its namespaces (fleet.go in package outbox).
	ClassBacklog Class = Class(store.SumTag)
	// ClassSequence: 'q' -> the namespace's next sequence number.
	ClassSequence Class = 'q'
	// ClassTimer: owned by package timers (timers.Key, timers.ParseKey).
	ClassTimer Class = Class(store.TimerTag)
	// ClassEndpoint: 'e' endpoint -> the endpoint's configuration. Its tag
	// is the store's registry tag, so a namespace is registered, and
	// listed by outbox's Admin.Namespaces, while it has an endpoint.
	ClassEndpoint Class = Class(store.RegistryTag)
	// ClassAttempt: 'a' endpoint '/' rid -> the row's last failed attempt.
	ClassAttempt Class = 'a'
	// ClassSeen: 's' rid -> digest and time of the accepted outcome.
	ClassSeen Class = 's'
	// ClassCounters: 'c' endpoint -> the stream's delivered, failed and
	// dropped counts.
	ClassCounters Class = 'c'
	// ClassLog: 'l' seq(8) -> the outcome accepted at seq, once for every
	// stream (log.go).
	ClassLog Class = 'l'
	// ClassJob: 'j' endpoint -> the stream's last recovery job
	// (recovery.go).
	ClassJob Class = 'j'
	// ClassMinute: 'm' minute(4) endpoint -> the stream's delivered and
	// failed counts in that minute since 1970 (minutes.go).
	ClassMinute Class = 'm'
	// ClassHead: 'h' endpoint -> the sequence number from which the
	// stream's queue is read from the log (head.go).
	ClassHead Class = 'h'
	// ClassFailingMark: 'f' endpoint -> empty, present while the endpoint
	// is failing; its tag is the store's first flag tag, so each bucket
	// keeps the set of its namespaces that have a failing endpoint.
	ClassFailingMark Class = Class(store.FlagTagA)
	// ClassDisabledMark: 'o' endpoint -> empty, present while an operator
	// has the endpoint disabled; the store's second flag tag.
	ClassDisabledMark Class = Class(store.FlagTagB)
)

// Id limits.
const (
	MaxEndpointIDBytes    = 63
	MaxReservationIDBytes = 128
	// SyntheticPrefix starts a synthetic reservation id: its rows are
	// acknowledged locally and never sent.
	SyntheticPrefix = "s:"
)

// ValidateEndpointID reports whether id matches [a-z0-9][a-z0-9_-]{0,62}.
func ValidateEndpointID(id string) error {
	if !validEndpointID(id) {
		return invalidf("endpoint id must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit")
	}
	return nil
}

// ValidateReservationID reports whether rid is 1 to 128 bytes of
// [A-Za-z0-9._:-].
func ValidateReservationID(rid string) error {
	if !validRID(rid) {
		return invalidf("reservation_id must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'")
	}
	return nil
}

// IsSynthetic reports whether rid names a synthetic outcome.
func IsSynthetic(rid string) bool { return strings.HasPrefix(rid, SyntheticPrefix) }

func validEndpointID(id string) bool {
	if len(id) == 0 || len(id) > MaxEndpointIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validRID(rid string) bool {
	if len(rid) == 0 || len(rid) > MaxReservationIDBytes {
		return false
	}
	for i := 0; i < len(rid); i++ {
		c := rid[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

func checkStream(endpoint, rid string) error {
	if err := ValidateEndpointID(endpoint); err != nil {
		return err
	}
	return ValidateReservationID(rid)
}

// PendingKey is the key of a stream's pending index row at seq.
func PendingKey(endpoint string, seq uint64, rid string) (store.Key, error) {
	if err := checkStream(endpoint, rid); err != nil {
		return "", err
	}
	return pendingKey(endpoint, seq, rid), nil
}

// AttemptKey is the key of a stream row's last failed attempt.
func AttemptKey(endpoint, rid string) (store.Key, error) {
	if err := checkStream(endpoint, rid); err != nil {
		return "", err
	}
	return streamKey(ClassAttempt, endpoint, rid), nil
}

// BacklogKey is the key of a stream's backlog.
func BacklogKey(endpoint string) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	return ClassBacklog.Key(endpoint), nil
}

// EndpointKey is the key of an endpoint's configuration.
func EndpointKey(id string) (store.Key, error) {
	if err := ValidateEndpointID(id); err != nil {
		return "", err
	}
	return ClassEndpoint.Key(id), nil
}

// SeenKey is the key of a reservation id's idempotency row.
func SeenKey(rid string) (store.Key, error) {
	if err := ValidateReservationID(rid); err != nil {
		return "", err
	}
	return ClassSeen.Key(rid), nil
}

// SequenceKey is the key of the namespace's sequence row.
func SequenceKey() store.Key { return store.Key([]byte{byte(ClassSequence)}) }

// DeliveryTimerKey is the key of a stream's delivery timer due at dueAtMs.
func DeliveryTimerKey(dueAtMs int64, endpoint string) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	return timers.Key(dueAtMs, timers.KindOutcomeDelivery, endpoint), nil
}

// ClassRange is the key range [start, end) of every row of a class.
func ClassRange(c Class) (start, end store.Key) {
	return store.Key([]byte{byte(c)}), store.Key([]byte{byte(c) + 1})
}

// EndpointRange is the key range of every endpoint row.
func EndpointRange() (start, end store.Key) { return ClassRange(ClassEndpoint) }

// SeenRange is the key range of every idempotency row.
func SeenRange() (start, end store.Key) { return ClassRange(ClassSeen) }

// PendingRange is the key range of one stream's pending rows, in sequence
// order.
func PendingRange(endpoint string) (start, end store.Key, err error) {
	return streamRange(ClassPending, endpoint)
}

// AttemptRange is the key range of one stream's attempt rows, in rid order.
func AttemptRange(endpoint string) (start, end store.Key, err error) {
	return streamRange(ClassAttempt, endpoint)
}

// streamRange spans tag endpoint '/' ... : ids hold no '/', and '0' is the
// byte after '/', so the range holds exactly this endpoint's rows.
func streamRange(c Class, endpoint string) (start, end store.Key, err error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", "", err
	}
	return c.Key(endpoint + "/"), c.Key(endpoint + "0"), nil
}

// ParsedKey is a typed parse of any row key of a partition. Class says which
// fields are set.
type ParsedKey struct {
	Class Class
	// Endpoint: record, pending, backlog, endpoint, attempt, counters,
	// job, head and minute rows.
	Endpoint string
	// RID: record, pending, attempt and seen rows.
	RID string
	// Seq: pending and log rows.
	Seq uint64
	// Minute: minute rows, in minutes since 1970.
	Minute uint32
	// Timer rows (see package timers). A delivery timer's reference is its
	// endpoint id.
	DueAtMs   int64
	TimerKind timers.Kind
	Reference string
}

// Parse parses a row key. ok is false for any key no builder of this package
// or package timers produces, ids included; Key rebuilds an accepted key
// exactly.
func Parse(key store.Key) (ParsedKey, bool) {
	if len(key) == 0 {
		return ParsedKey{}, false
	}
	c, rest := Class(key[0]), string(key[1:])
	pk := ParsedKey{Class: c}
	switch c {
	case ClassAttempt:
		ep, rid, ok := strings.Cut(rest, "/")
		if !ok || !validEndpointID(ep) || !validRID(rid) {
			return ParsedKey{}, false
		}
		pk.Endpoint, pk.RID = ep, rid
	case ClassPending:
		ep, tail, ok := strings.Cut(rest, "/")
		if !ok || !validEndpointID(ep) || len(tail) < 8 || !validRID(tail[8:]) {
			return ParsedKey{}, false
		}
		pk.Endpoint, pk.Seq, pk.RID = ep, binary.BigEndian.Uint64([]byte(tail[:8])), tail[8:]
	case ClassBacklog, ClassEndpoint, ClassCounters, ClassJob, ClassHead, ClassFailingMark, ClassDisabledMark:
		if !validEndpointID(rest) {
			return ParsedKey{}, false
		}
		pk.Endpoint = rest
	case ClassSequence:
		if rest != "" {
			return ParsedKey{}, false
		}
	case ClassMinute:
		if len(rest) < 4 || !validEndpointID(rest[4:]) {
			return ParsedKey{}, false
		}
		pk.Minute, pk.Endpoint = binary.BigEndian.Uint32([]byte(rest[:4])), rest[4:]
	case ClassLog:
		if len(rest) != 8 {
			return ParsedKey{}, false
		}
		pk.Seq = binary.BigEndian.Uint64([]byte(rest))
	case ClassSeen:
		if !validRID(rest) {
			return ParsedKey{}, false
		}
		pk.RID = rest
	case ClassTimer:
		due, kind, ref, ok := timers.ParseKey(key)
		if !ok {
			return ParsedKey{}, false
		}
		pk.DueAtMs, pk.TimerKind, pk.Reference = due, kind, ref
	default:
		return ParsedKey{}, false
	}
	return pk, true
}

// Key builds the key k was parsed from. For a ParsedKey not produced by
// Parse, it builds from the fields without validating them.
func (k ParsedKey) Key() store.Key {
	switch k.Class {
	case ClassAttempt:
		return streamKey(k.Class, k.Endpoint, k.RID)
	case ClassPending:
		return pendingKey(k.Endpoint, k.Seq, k.RID)
	case ClassBacklog, ClassEndpoint, ClassCounters, ClassJob, ClassHead, ClassFailingMark, ClassDisabledMark:
		return k.Class.Key(k.Endpoint)
	case ClassSequence:
		return SequenceKey()
	case ClassMinute:
		return MinuteKeyOf(k.Minute, k.Endpoint)
	case ClassLog:
		return LogKey(k.Seq)
	case ClassSeen:
		return k.Class.Key(k.RID)
	case ClassTimer:
		return timers.Key(k.DueAtMs, k.TimerKind, k.Reference)
	}
	return ""
}

// The builders below take ids already checked (ValidateEndpointID,
// ValidateReservationID) and check nothing, for the paths that build many
// keys of ids they hold; the exported ones above check first.

// Key is the key of the row of class c named by id alone: an endpoint's
// backlog, endpoint, counters, job or head row, or a reservation id's seen
// row.
func (c Class) Key(id string) store.Key {
	b := make([]byte, 0, 1+len(id))
	b = append(b, byte(c))
	return store.Key(append(b, id...))
}

// ID is the id in k, a key Class.Key built for class c; false when k is of
// another class.
func (c Class) ID(k store.Key) (string, bool) {
	if len(k) == 0 || Class(k[0]) != c {
		return "", false
	}
	return string(k[1:]), true
}

// AttemptKeyOf is AttemptKey of ids already checked.
func AttemptKeyOf(endpoint, rid string) store.Key { return streamKey(ClassAttempt, endpoint, rid) }

// PendingKeyOf is PendingKey of ids already checked.
func PendingKeyOf(endpoint string, seq uint64, rid string) store.Key {
	return pendingKey(endpoint, seq, rid)
}

func streamKey(c Class, endpoint, rid string) store.Key {
	b := make([]byte, 0, 2+len(endpoint)+len(rid))
	b = append(b, byte(c))
	b = append(b, endpoint...)
	b = append(b, '/')
	return store.Key(append(b, rid...))
}

func pendingKey(endpoint string, seq uint64, rid string) store.Key {
	b := make([]byte, 0, 10+len(endpoint)+len(rid))
	b = append(b, byte(ClassPending))
	b = append(b, endpoint...)
	b = append(b, '/')
	b = binary.BigEndian.AppendUint64(b, seq)
	return store.Key(append(b, rid...))
}
