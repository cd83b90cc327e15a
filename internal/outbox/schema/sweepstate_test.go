package schema

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

func FuzzDecodeSweepState(f *testing.F) {
	f.Add([]byte{})
	f.Add(EncodeSweepState(SweepState{EarliestMs: 5, Cursor: []byte("sr-1")}))
	f.Add(EncodeSweepState(SweepState{EarliestMs: 5, Cursor: []byte("1024"), Unordered: true}))
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := DecodeSweepState(v)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("error does not wrap store.ErrCorrupt: %v", err)
		}
		if err != nil || len(v) == 0 {
			return
		}
		if again := EncodeSweepState(s); !bytes.Equal(again, v) {
			t.Fatalf("sweep state not canonical: % x", v)
		}
	})
}

func FuzzDecodeRecovery(f *testing.F) {
	v, _ := EncodeRecovery(Recovery{ID: "00112233445566778899aabbccddeeff", State: RecoveryRunning, SinceMs: 1, UntilMs: 2, NextSeq: 3, EndSeq: 9})
	f.Add([]byte(v))
	f.Fuzz(func(t *testing.T, v []byte) {
		r, err := DecodeRecovery("billing", v)
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("error does not wrap store.ErrCorrupt: %v", err)
		}
		if err != nil {
			return
		}
		if again, err := EncodeRecovery(r); err != nil || !bytes.Equal(again, v) {
			t.Fatalf("recovery not canonical: % x, %v", v, err)
		}
	})
}
