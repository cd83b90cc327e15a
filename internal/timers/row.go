package timers

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hookrelay/relay/internal/store"
)

// Kind tells which handler fires a timer.
type Kind uint16

// Timer kinds, allocated here so that no two handlers share one.
const (
	// KindOutcomeDelivery is the outcome-delivery timer of one stream; its
	// reference is the endpoint id.
	KindOutcomeDelivery Kind = 8
	// KindSeenSweep deletes a namespace's idempotency rows once their window
	// has passed; its reference is empty.
	KindSeenSweep Kind = 9
	// KindLogSweep deletes a namespace's log rows once every stream is done
	// with them and their retention is over; reference "".
	KindLogSweep Kind = 10
	// KindRecovery runs one endpoint's recovery job; reference the
	// endpoint id.
	KindRecovery Kind = 11
)

// NeverMs is a due time that never comes: a parked timer waits at it until
// something pulls it forward.
const NeverMs int64 = math.MaxInt64

// Timer row layout.
//
// Key:   TimerTag | due ms (8, big-endian) | kind (2, big-endian) | reference
// Value: 0x00 | handler state                                   (idle)
//
//	0x01 | lease token (16) | due ms before the claim (8) | handler state  (leased)
//
// A leased row's key carries the lease expiry as its due time, so an expired
// lease is simply a due timer that any worker may claim again.
const (
	keyHeader     = 1 + 8 + 2
	stateIdle     = 0x00
	stateLeased   = 0x01
	tokenBytes    = 16
	leasedHeader  = 1 + tokenBytes + 8
	maxReferences = 256 // timers scanned per partition by Find
)

// Key is the row key of a timer.
func Key(dueAtMs int64, kind Kind, reference string) store.Key {
	b := make([]byte, keyHeader, keyHeader+len(reference))
	b[0] = store.TimerTag
	binary.BigEndian.PutUint64(b[1:9], clampDue(dueAtMs))
	binary.BigEndian.PutUint16(b[9:11], uint16(kind))
	return store.Key(append(b, reference...))
}

func clampDue(ms int64) uint64 {
	if ms < 0 {
		return 0
	}
	return uint64(ms)
}

// ParseKey splits a timer row key. ok is false for any other key.
func ParseKey(key store.Key) (dueAtMs int64, kind Kind, reference string, ok bool) {
	if len(key) < keyHeader || key[0] != store.TimerTag {
		return 0, 0, "", false
	}
	due := binary.BigEndian.Uint64([]byte(key[1:9]))
	if due > math.MaxInt64 {
		return 0, 0, "", false
	}
	return int64(due), Kind(binary.BigEndian.Uint16([]byte(key[9:11]))), string(key[keyHeader:]), true
}

// Range is the key range of every timer row.
func Range() (start, end store.Key) {
	return store.Key([]byte{store.TimerTag}), store.Key([]byte{store.TimerTag + 1})
}

// DueRange is the key range of timer rows due at or before nowMs.
func DueRange(nowMs int64) (start, end store.Key) {
	start, _ = Range()
	b := make([]byte, 9)
	b[0] = store.TimerTag
	binary.BigEndian.PutUint64(b[1:], clampDue(nowMs)+1)
	return start, store.Key(b)
}

// Lease is the claim a worker holds on a timer while it fires.
type Lease struct {
	Token [tokenBytes]byte
	// DueAtMs is when the timer was due before it was claimed.
	DueAtMs int64
}

// Row is one decoded timer row.
type Row struct {
	Key store.Key
	// Raw is the stored value, the guard of any change to the row.
	Raw       store.Value
	DueAtMs   int64
	Kind      Kind
	Reference string
	// State is the handler's state.
	State []byte
	// Lease is nil while no worker holds the timer.
	Lease *Lease
	// Err is set when the key parsed but the value did not decode. Such a
	// row is kept for an operator and left alone by planners.
	Err error
}

// EncodeIdle is the stored value of an unleased timer with the given state.
func EncodeIdle(state []byte) store.Value {
	v := make([]byte, 1, 1+len(state))
	v[0] = stateIdle
	return append(v, state...)
}

func encodeLeased(l Lease, state []byte) store.Value {
	v := make([]byte, leasedHeader, leasedHeader+len(state))
	v[0] = stateLeased
	copy(v[1:1+tokenBytes], l.Token[:])
	binary.BigEndian.PutUint64(v[1+tokenBytes:leasedHeader], clampDue(l.DueAtMs))
	return append(v, state...)
}

// DecodeRow decodes a timer row. A row that is not a timer, or whose value is
// malformed, is an error wrapping store.ErrCorrupt.
func DecodeRow(key store.Key, raw store.Value) (Row, error) {
	due, kind, ref, ok := ParseKey(key)
	if !ok {
		return Row{}, fmt.Errorf("%w: not a timer key", store.ErrCorrupt)
	}
	row := Row{Key: key, Raw: raw, DueAtMs: due, Kind: kind, Reference: ref}
	if len(raw) == 0 {
		return Row{}, fmt.Errorf("%w: empty timer value", store.ErrCorrupt)
	}
	switch raw[0] {
	case stateIdle:
		row.State = raw[1:]
	case stateLeased:
		if len(raw) < leasedHeader {
			return Row{}, fmt.Errorf("%w: short leased timer value", store.ErrCorrupt)
		}
		l := &Lease{}
		copy(l.Token[:], raw[1:1+tokenBytes])
		prior := binary.BigEndian.Uint64(raw[1+tokenBytes : leasedHeader])
		if prior > math.MaxInt64 {
			return Row{}, fmt.Errorf("%w: leased timer due out of range", store.ErrCorrupt)
		}
		l.DueAtMs = int64(prior)
		row.Lease = l
		row.State = raw[leasedHeader:]
	default:
		return Row{}, fmt.Errorf("%w: unknown timer state %#x", store.ErrCorrupt, raw[0])
	}
	return row, nil
}

// MoveTo plans moving an idle timer to a new due time, keeping its state,
// guarded by the row as read.
func (r Row) MoveTo(b *store.Batch, dueAtMs int64) {
	b.RequireEquals(r.Key, r.Raw)
	next := Key(dueAtMs, r.Kind, r.Reference)
	if next == r.Key {
		return
	}
	b.Delete(r.Key)
	b.Put(next, EncodeIdle(r.State))
}

// Replace plans moving an idle timer to a new due time with a new state,
// guarded by the row as read.
func (r Row) Replace(b *store.Batch, dueAtMs int64, state []byte) {
	b.RequireEquals(r.Key, r.Raw)
	next := Key(dueAtMs, r.Kind, r.Reference)
	if next != r.Key {
		b.Delete(r.Key)
	}
	b.Put(next, EncodeIdle(state))
}

// Scanner reads ordered rows of a partition.
type Scanner interface {
	Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error)
}

// Find returns the partition's timer of the given kind and reference.
// A partition holds few timers (one per stream and kind), so it reads them all.
func Find(ctx context.Context, s Scanner, p store.Partition, kind Kind, reference string) (Row, bool, error) {
	rows, err := All(ctx, s, p)
	if err != nil {
		return Row{}, false, err
	}
	for _, row := range rows {
		if row.Kind == kind && row.Reference == reference {
			return row, true, nil
		}
	}
	return Row{}, false, nil
}

// All returns every timer row of the partition in due order. A row whose
// value does not decode is returned with Err set, so that one corrupt timer
// neither hides its stream's timer nor blocks the others; a key in the timer
// range that does not parse belongs to no stream and is skipped.
func All(ctx context.Context, s Scanner, p store.Partition) ([]Row, error) {
	start, end := Range()
	var rows []Row
	var after *store.Cursor
	for {
		page, err := s.Scan(ctx, p, start, end, after, 64)
		if err != nil {
			return nil, fmt.Errorf("scan timers of %s: %w", p, err)
		}
		rows = AppendRows(rows, page.Entries)
		if page.Next == nil {
			return rows, nil
		}
		if len(rows) >= maxReferences {
			return nil, fmt.Errorf("%w: partition %s holds more than %d timers", store.ErrCorrupt, p, maxReferences)
		}
		after = page.Next
	}
}

// MaxRows is the most timer rows a partition may hold: one per stream and
// kind. All refuses a partition with more; a caller scanning the timer Range
// itself reads MaxRows+1 rows to tell.
const MaxRows = maxReferences

// AppendRows appends the timer rows of scanned entries to rows, as All
// decodes them: a row whose value does not decode comes with Err set, and an
// entry whose key is not a timer's is skipped.
func AppendRows(rows []Row, entries []store.Entry) []Row {
	for _, e := range entries {
		row, err := DecodeRow(e.Key, e.Value)
		if err != nil {
			due, kind, ref, ok := ParseKey(e.Key)
			if !ok {
				continue
			}
			row = Row{Key: e.Key, Raw: e.Value, DueAtMs: due, Kind: kind, Reference: ref, Err: err}
		}
		rows = append(rows, row)
	}
	return rows
}
