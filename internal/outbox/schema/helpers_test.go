package schema_test

import (
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// t0 is the tests' usual now: 2025-11-30T00:00:00Z in Unix milliseconds.
const t0 = int64(1_764_460_800_000)

// hexA is a valid 32-byte id in lowercase hex.
var hexA = strings.Repeat("ab", 32)

// committed is a valid committed outcome under rid, occurred at t0.
func committed(rid string) schema.Outcome {
	return schema.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: t0,
		Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256,
			Refs: []schema.Ref{{Name: "refs/heads/main", New: hexA}}},
	}
}

// aborted is a valid aborted outcome under rid, occurred at t0.
func aborted(rid string) schema.Outcome {
	return schema.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: t0,
		Aborted: &schema.Aborted{Reason: "ref_conflict", Detail: "main moved"},
	}
}

func mustRecord(t *testing.T, o schema.Outcome) store.Value {
	t.Helper()
	v, err := schema.EncodeRecord(&o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
