package outbox

import (
	"encoding/binary"

	"github.com/hookrelay/relay/internal/store"
)

// MaxCursorBytes bounds the resume cursor a delivery timer carries.
const MaxCursorBytes = 4096

// DeliveryState is the state of a stream's delivery timer: how many fires in
// a row failed (the backoff exponent) and where the next fire resumes its
// scan of pending rows.
type DeliveryState struct {
	Attempt uint32
	// Cursor is nil to start at the head of the stream.
	Cursor *store.Cursor
}

// EncodeDeliveryState is attempt u32, cursor length u16, cursor bytes (at
// most 4096). It has no version byte: an empty state is a fresh timer, and
// the length must match exactly.
func EncodeDeliveryState(s DeliveryState) ([]byte, error) {
	var cur []byte
	if s.Cursor != nil {
		cur = s.Cursor.Bytes()
	}
	if len(cur) > MaxCursorBytes {
		return nil, invalidf("delivery timer: cursor of %d bytes exceeds %d", len(cur), MaxCursorBytes)
	}
	v := make([]byte, 0, 6+len(cur))
	v = binary.BigEndian.AppendUint32(v, s.Attempt)
	v = binary.BigEndian.AppendUint16(v, uint16(len(cur)))
	return append(v, cur...), nil
}

// DecodeDeliveryState decodes a delivery timer's state. An empty state (a
// timer ingest just created) is attempt 0 at the head of the stream.
func DecodeDeliveryState(state []byte) (DeliveryState, error) {
	if len(state) == 0 {
		return DeliveryState{}, nil
	}
	if len(state) < 6 {
		return DeliveryState{}, corruptf("delivery timer: short state")
	}
	n := int(binary.BigEndian.Uint16(state[4:6]))
	if n > MaxCursorBytes || len(state) != 6+n {
		return DeliveryState{}, corruptf("delivery timer: bad cursor length")
	}
	s := DeliveryState{Attempt: binary.BigEndian.Uint32(state[:4])}
	if n > 0 {
		s.Cursor = store.NewCursor(append([]byte(nil), state[6:]...))
	}
	return s, nil
}
