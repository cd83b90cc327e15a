package schema

import "encoding/binary"

// SweepState is the state of a sweep timer (timers.KindSeenSweep,
// timers.KindLogSweep), a pass in progress: the earliest expiry of the rows
// kept so far (0 for none) and the cursor after the last page examined, of
// an ordered Scan or, when unordered, of a ScanUnordered. An empty state
// starts a pass.
type SweepState struct {
	EarliestMs int64
	Cursor     []byte
	Unordered  bool
}

// sweepUnordered is the version of a state whose cursor is a
// ScanUnordered's; it has version 1's layout.
const sweepUnordered = 0x02

// EncodeSweepState is version 1 (2 when unordered), earliest ms u64, cursor
// length u16, cursor.
func EncodeSweepState(s SweepState) []byte {
	v := make([]byte, 0, 1+8+2+len(s.Cursor))
	v = append(v, codecV1)
	if s.Unordered {
		v[0] = sweepUnordered
	}
	v = binary.BigEndian.AppendUint64(v, uint64(s.EarliestMs))
	v = binary.BigEndian.AppendUint16(v, uint16(len(s.Cursor)))
	return append(v, s.Cursor...)
}

// DecodeSweepState decodes a sweep timer's state.
func DecodeSweepState(state []byte) (SweepState, error) {
	if len(state) == 0 {
		return SweepState{}, nil
	}
	unordered := state[0] == sweepUnordered
	if unordered {
		state = append([]byte{codecV1}, state[1:]...)
	}
	r := newReader("sweep state", state)
	s := SweepState{EarliestMs: r.ms(), Unordered: unordered}
	n := r.u16()
	if n > MaxCursorBytes {
		r.fail("cursor of %d bytes", n)
	}
	s.Cursor = append([]byte(nil), r.take(uint64(n))...)
	if err := r.end(); err != nil {
		return SweepState{}, err
	}
	return s, nil
}
