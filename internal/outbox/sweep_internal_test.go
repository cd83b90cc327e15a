package outbox

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

func FuzzDecodeSweepState(f *testing.F) {
	f.Add([]byte{})
	f.Add(encodeSweepState(sweepState{earliestMs: 5, cursor: []byte("sr-1")}))
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := decodeSweepState(v)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("error does not wrap store.ErrCorrupt: %v", err)
		}
		if err != nil || len(v) == 0 {
			return
		}
		if again := encodeSweepState(s); !bytes.Equal(again, v) {
			t.Fatalf("sweep state not canonical: % x", v)
		}
	})
}
