package outbox_test

import (
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func readBacklog(t *testing.T, e *env) outbox.NamespaceBacklog {
	t.Helper()
	r := &outbox.BacklogReader{Store: e.St}
	b, err := r.Read(e.Ctx, e.P, e.NowMs())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ack acknowledges the first n pending rows of a stream.
func ack(t *testing.T, e *env, endpoint string, n int) {
	t.Helper()
	_, b := ackFirst(t, e, endpoint, n)
	if res := e.Apply(b); !res.Committed {
		t.Fatalf("ack: precondition %d failed", res.Failed)
	}
}

// The backlog of a namespace sums its streams, and its oldest row is the
// earliest accepted head of a stream, as its seen row dates it.
func TestBacklogSumsStreamsAndDatesTheOldestHead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		if b := readBacklog(t, e); b != (outbox.NamespaceBacklog{}) {
			t.Fatalf("an empty namespace: %+v", b)
		}
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.Append(committed("a"))
		e.Clk.Advance(time.Second)
		e.Append(aborted("b"))
		e.Clk.Advance(time.Second)
		e.Append(committed("c"))
		e.Clk.Advance(time.Minute)

		var rows, bytes uint64
		for _, id := range []string{"billing", "audit"} {
			bl, _ := e.backlog(id)
			rows, bytes = rows+bl.Rows, bytes+bl.Bytes
		}
		if rows != 4 {
			t.Fatalf("fixture: %d rows, want 4", rows)
		}
		want := outbox.NamespaceBacklog{Rows: rows, Bytes: bytes, OldestAcceptedMs: t0}
		if b := readBacklog(t, e); b != want {
			t.Fatalf("backlog %+v, want %+v", b, want)
		}
		// Once billing's head "a" is delivered, the oldest head is "b",
		// a second younger, on both streams.
		ack(t, e, "billing", 1)
		b := readBacklog(t, e)
		if b.Rows != 3 || b.OldestAcceptedMs != t0+1000 {
			t.Fatalf("after acknowledging a: %+v, want 3 rows, oldest %d", b, t0+1000)
		}
		ack(t, e, "billing", 2)
		ack(t, e, "audit", 1)
		if b := readBacklog(t, e); b != (outbox.NamespaceBacklog{}) {
			t.Fatalf("everything acknowledged: %+v", b)
		}
	})
}

// A head is dated by its log row, whatever became of its seen row.
func TestAHeadIsDatedByItsLogRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("a"))
		accepted := e.NowMs()
		e.Clk.Advance(outbox.DefaultWindow + time.Hour)
		seen, _ := schema.SeenKey("a")

		var b store.Batch
		b.Delete(seen)
		e.Apply(b)
		if got := readBacklog(t, e).OldestAcceptedMs; got != accepted {
			t.Fatalf("swept seen row: oldest accepted %d, want %d from the log row", got, accepted)
		}
	})
}
