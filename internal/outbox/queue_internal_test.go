package outbox

import (
	"math"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// A cursor is a key of the stream's pending range, so a caller can hand
// any: one before a sequence number resumes at it, one after a row past
// it, the last sequence number does not wrap to the first, and one of
// another stream or class is no position at all.
func TestQueuePosReadsEveryCursorOfTheRange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cursor *store.Cursor
		pos    uint64
		ok     bool
	}{
		{"before seq 7", store.CursorAfter(schema.PendingKeyOf("billing", 7, "")), 7, true},
		{"after a row at 7", store.CursorAfter(schema.PendingKeyOf("billing", 7, "r-1")), 8, true},
		{"after the mark of 7", store.CursorAfter(queueMark("billing", 7)), 8, true},
		{"after the last seq", store.CursorAfter(queueMark("billing", math.MaxUint64)), math.MaxUint64, true},
		{"another stream", store.CursorAfter(schema.PendingKeyOf("audit", 7, "r-1")), 0, false},
		{"a prefix of the stream's", store.CursorAfter(schema.PendingKeyOf("bill", 7, "r-1")), 0, false},
		{"short", store.CursorAfter(store.Key("pbilling/\x00\x01")), 0, false},
		{"none", nil, 0, false},
	} {
		pos, ok := queuePos("billing", tc.cursor)
		if pos != tc.pos || ok != tc.ok {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, pos, ok, tc.pos, tc.ok)
		}
	}
}
