package outbox_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"testing"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// The fixtures, under their short local names.
const t0 = outboxtest.T0

var (
	hexA      = outboxtest.HexA
	committed = outboxtest.Committed
	aborted   = outboxtest.Aborted
)

// env is one namespace on a real store with a manual clock.
type env struct {
	t   *testing.T
	ctx context.Context
	st  store.NamespaceStore
	clk *clock.Manual
	p   store.Partition
	app *outbox.Appender
}

// forEachBackend runs f on every store backend; backends that are not
// configured skip.
func forEachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	t.Helper()
	for _, b := range redistest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			f(t, newEnv(t, b.New(t)))
		})
	}
}

func newEnv(t *testing.T, st store.NamespaceStore) *env {
	clk := clock.NewManual(t0)
	return &env{
		t: t, ctx: context.Background(), st: st, clk: clk,
		p:   store.Partition{Namespace: "acme"},
		app: &outbox.Appender{Store: st, Clock: clk},
	}
}

func (e *env) nowMs() int64 { return e.clk.Now().UnixMilli() }

func (e *env) apply(b store.Batch) store.Result {
	e.t.Helper()
	res, err := e.st.Apply(e.ctx, e.p, b)
	if err != nil {
		e.t.Fatalf("apply: %v", err)
	}
	return res
}

func (e *env) putEndpoint(id string, ep outbox.Endpoint) {
	e.t.Helper()
	outboxtest.PutEndpoint(e.t, e.st, e.p, id, ep)
}

func (e *env) append(outcomes ...outbox.Outcome) []outbox.Status {
	e.t.Helper()
	st, err := e.app.Append(e.ctx, e.p, outcomes)
	if err != nil {
		e.t.Fatalf("append: %v", err)
	}
	return st
}

func (e *env) get(key store.Key) (store.Value, bool) {
	e.t.Helper()
	v, found, err := e.st.Get(e.ctx, e.p, key)
	if err != nil {
		e.t.Fatalf("get: %v", err)
	}
	return v, found
}

func (e *env) scan(start, end store.Key) []store.Entry {
	e.t.Helper()
	var out []store.Entry
	var after *store.Cursor
	for {
		page, err := e.st.Scan(e.ctx, e.p, start, end, after, 100)
		if err != nil {
			e.t.Fatalf("scan: %v", err)
		}
		out = append(out, page.Entries...)
		if page.Next == nil {
			return out
		}
		after = page.Next
	}
}

// all is every row of the partition.
func (e *env) all() []store.Entry { return e.scan(store.Key([]byte{0}), store.Key([]byte{0xff})) }

func (e *env) backlog(endpoint string) (outbox.Backlog, bool) {
	e.t.Helper()
	key, _ := outbox.BacklogKey(endpoint)
	v, found := e.get(key)
	if !found {
		return outbox.Backlog{}, false
	}
	b, err := outbox.DecodeBacklog(v)
	if err != nil {
		e.t.Fatalf("backlog: %v", err)
	}
	return b, true
}

func (e *env) sequence() uint64 {
	e.t.Helper()
	v, found := e.get(outbox.SequenceKey())
	if !found {
		return 0
	}
	n, err := outbox.DecodeSequence(v)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) pending(endpoint string) []outbox.ParsedKey {
	e.t.Helper()
	start, end, err := outbox.PendingRange(endpoint)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []outbox.ParsedKey
	for _, row := range e.scan(start, end) {
		pk, ok := outbox.Parse(row.Key)
		if !ok || pk.Class != outbox.ClassPending || len(row.Value) != 0 {
			e.t.Fatalf("bad pending row %q", row.Key)
		}
		out = append(out, pk)
	}
	return out
}

func (e *env) record(endpoint, rid string) (store.Value, bool) {
	e.t.Helper()
	key, err := outbox.RecordKey(endpoint, rid)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.get(key)
}

func (e *env) timers(kind timers.Kind, reference string) []timers.Row {
	e.t.Helper()
	rows, err := timers.All(e.ctx, e.st, e.p)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []timers.Row
	for _, r := range rows {
		if r.Kind == kind && r.Reference == reference {
			out = append(out, r)
		}
	}
	return out
}

func (e *env) deliveryTimer(endpoint string) (timers.Row, bool) {
	e.t.Helper()
	rows := e.timers(timers.KindOutcomeDelivery, endpoint)
	if len(rows) > 1 {
		e.t.Fatalf("%d delivery timers for %s", len(rows), endpoint)
	}
	if len(rows) == 0 {
		return timers.Row{}, false
	}
	return rows[0], true
}

func (e *env) putTimer(dueAtMs int64, kind timers.Kind, ref string, value store.Value) store.Key {
	e.t.Helper()
	key := timers.Key(dueAtMs, kind, ref)
	var b store.Batch
	b.Put(key, value)
	e.apply(b)
	return key
}

// leasedValue builds a leased timer value as package timers lays it out.
func leasedValue(priorDueMs int64, state []byte) store.Value {
	v := []byte{0x01}
	v = append(v, bytes.Repeat([]byte{7}, 16)...)
	v = binary.BigEndian.AppendUint64(v, uint64(priorDueMs))
	return append(v, state...)
}

func deliveryState(t *testing.T, attempt uint32) []byte {
	t.Helper()
	s, err := outbox.EncodeDeliveryState(outbox.DeliveryState{Attempt: attempt})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func codes(st []outbox.Status) []outbox.Code {
	out := make([]outbox.Code, len(st))
	for i, s := range st {
		out[i] = s.Code
	}
	return out
}

func mustRecord(t *testing.T, o outbox.Outcome) store.Value {
	t.Helper()
	v, err := outbox.EncodeRecord(&o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
