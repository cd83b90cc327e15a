package schema_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// The fixtures outbox's tests use: t0 is the tests' usual now, hexA a valid
// 32-byte id in hex, committed and aborted valid outcomes occurred at t0.
const t0 = outboxtest.T0

var (
	hexA      = outboxtest.HexA
	committed = outboxtest.Committed
	aborted   = outboxtest.Aborted
)

func mustRecord(t *testing.T, o schema.Outcome) store.Value {
	t.Helper()
	v, err := schema.EncodeRecord(&o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
