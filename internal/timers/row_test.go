package timers

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

func TestRowRoundTripsIdleAndLeased(t *testing.T) {
	key := Key(1_764_460_800_000, KindOutcomeDelivery, "billing")
	due, kind, ref, ok := ParseKey(key)
	if !ok || due != 1_764_460_800_000 || kind != KindOutcomeDelivery || ref != "billing" {
		t.Fatalf("ParseKey = %d %d %q %v", due, kind, ref, ok)
	}
	row, err := DecodeRow(key, EncodeIdle([]byte("state")))
	if err != nil || row.Lease != nil || string(row.State) != "state" {
		t.Fatalf("idle row %+v %v", row, err)
	}
	l := Lease{Token: [16]byte{1, 2, 3}, DueAtMs: 42}
	row, err = DecodeRow(key, encodeLeased(l, []byte("state")))
	if err != nil || row.Lease == nil || *row.Lease != l || string(row.State) != "state" {
		t.Fatalf("leased row %+v %v", row, err)
	}
}

func TestMalformedRowsAreCorruptNotPanics(t *testing.T) {
	key := Key(1, KindOutcomeDelivery, "x")
	for name, v := range map[string]store.Value{
		"empty":         nil,
		"unknown state": {0x7f},
		"short lease":   {stateLeased, 1, 2, 3},
		"due overflow":  append(append([]byte{stateLeased}, make([]byte, tokenBytes)...), 0xff, 0, 0, 0, 0, 0, 0, 0),
	} {
		if _, err := DecodeRow(key, v); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if _, err := DecodeRow("not a timer", EncodeIdle(nil)); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("foreign key: %v, want ErrCorrupt", err)
	}
}

// FuzzDecodeRow: any key and value decode to a row or an ErrCorrupt, and a
// row that decodes re-encodes to the same bytes.
func FuzzDecodeRow(f *testing.F) {
	f.Add([]byte(Key(100, KindOutcomeDelivery, "billing")), []byte(EncodeIdle([]byte{0, 0, 0, 1, 0, 0})))
	f.Add([]byte(Key(0, KindSeenSweep, "")), []byte(encodeLeased(Lease{DueAtMs: 7}, nil)))
	f.Add([]byte{store.TimerTag}, []byte{0})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		row, err := DecodeRow(store.Key(key), value)
		if err != nil {
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if got := Key(row.DueAtMs, row.Kind, row.Reference); got != store.Key(key) {
			t.Fatalf("key re-encodes to %x, was %x", got, key)
		}
		again := EncodeIdle(row.State)
		if row.Lease != nil {
			again = encodeLeased(*row.Lease, row.State)
		}
		if !bytes.Equal(again, value) {
			t.Fatalf("value re-encodes to %x, was %x", again, value)
		}
	})
}
