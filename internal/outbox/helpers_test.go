package outbox_test

import (
	"bytes"
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
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
type env struct{ *outboxtest.Env }

// forEachBackend runs f on every store backend; backends that are not
// configured skip.
func forEachBackend(t *testing.T, f func(t *testing.T, e *env)) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) { f(t, newEnv(t, b.New(t))) })
}

func newEnv(t *testing.T, st store.NamespaceStore) *env { return &env{outboxtest.NewEnv(t, st)} }

func (e *env) putEndpoint(id string, ep schema.Endpoint) {
	e.T.Helper()
	outboxtest.PutEndpoint(e.T, e.St, e.P, id, ep)
}

func (e *env) scan(start, end store.Key) []store.Entry {
	e.T.Helper()
	var out []store.Entry
	var after *store.Cursor
	for {
		page, err := e.St.Scan(e.Ctx, e.P, start, end, after, 100)
		if err != nil {
			e.T.Fatalf("scan: %v", err)
		}
		out = append(out, page.Entries...)
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	// The store lists the unordered rows apart; a test sees every row.
	out = append(out, outboxtest.Unordered(e.T, e.St, e.P, start, end)...)
	slices.SortFunc(out, func(a, b store.Entry) int { return strings.Compare(string(a.Key), string(b.Key)) })
	return out
}

// all is every row of the partition.
func (e *env) all() []store.Entry { return e.scan(store.Key([]byte{0}), store.Key([]byte{0xff})) }

func (e *env) backlog(endpoint string) (schema.Backlog, bool) {
	e.T.Helper()
	key, _ := schema.BacklogKey(endpoint)
	v, found := e.Get(key)
	if !found {
		return schema.Backlog{}, false
	}
	b, err := schema.DecodeBacklog(v)
	if err != nil {
		e.T.Fatalf("backlog: %v", err)
	}
	return b, true
}

func (e *env) sequence() uint64 {
	e.T.Helper()
	v, found := e.Get(schema.SequenceKey())
	if !found {
		return 0
	}
	n, err := schema.DecodeSequence(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

// pending is the stream's queue, each row as the key of its pending row,
// whether that row exists or its log entry alone queues it.
func (e *env) pending(endpoint string) []schema.ParsedKey {
	e.T.Helper()
	var out []schema.ParsedKey
	for _, q := range outboxtest.Queue(e.T, e.St, e.P, endpoint) {
		if q.Corrupt {
			e.T.Fatalf("bad queue row %q", q.Key)
		}
		out = append(out, schema.ParsedKey{Class: schema.ClassPending, Endpoint: endpoint, Seq: q.Seq, RID: q.RID})
	}
	return out
}

// unheaded gives the stream a pending row for every row of its queue, and
// no head: the layout of a stream whose rows a resend queued before its
// first ingest.
func (e *env) unheaded(endpoint string) {
	e.T.Helper()
	var b store.Batch
	for _, q := range outboxtest.Queue(e.T, e.St, e.P, endpoint) {
		if q.Logged {
			b.Put(q.Key, store.Value{})
		}
	}
	key, _ := schema.HeadKey(endpoint)
	b.Delete(key)
	if res := e.Apply(b); !res.Committed {
		e.T.Fatalf("unhead %s: precondition %d failed", endpoint, res.Failed)
	}
}

// record is the outcome the stream of endpoint holds pending under rid,
// read as delivery reads it; found is false when it holds none.
func (e *env) record(endpoint, rid string) (outbox.StreamRecord, bool) {
	e.T.Helper()
	for _, q := range outboxtest.Queue(e.T, e.St, e.P, endpoint) {
		if q.RID != rid {
			continue
		}
		rows, err := outbox.ReadStreamRows(e.Ctx, e.St, e.P, endpoint, []outbox.StreamRef{{Seq: q.Seq, RID: rid, Logged: q.Logged}})
		if err != nil {
			e.T.Fatal(err)
		}
		if rows[0].Err != nil {
			e.T.Fatal(rows[0].Err)
		}
		return rows[0].Record, rows[0].Found
	}
	return outbox.StreamRecord{}, false
}

func (e *env) timers(kind timers.Kind, reference string) []timers.Row {
	e.T.Helper()
	rows, err := timers.All(e.Ctx, e.St, e.P)
	if err != nil {
		e.T.Fatal(err)
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
	e.T.Helper()
	rows := e.timers(timers.KindOutcomeDelivery, endpoint)
	if len(rows) > 1 {
		e.T.Fatalf("%d delivery timers for %s", len(rows), endpoint)
	}
	if len(rows) == 0 {
		return timers.Row{}, false
	}
	return rows[0], true
}

func (e *env) putTimer(dueAtMs int64, kind timers.Kind, ref string, value store.Value) store.Key {
	e.T.Helper()
	key := timers.Key(dueAtMs, kind, ref)
	var b store.Batch
	b.Put(key, value)
	e.Apply(b)
	return key
}

// leasedValue builds a leased timer value as package timers lays it out.
func leasedValue(priorDueMs int64, state []byte) store.Value {
	v := []byte{0x01}
	v = append(v, bytes.Repeat([]byte{7}, 16)...)
	v = binary.BigEndian.AppendUint64(v, uint64(priorDueMs))
	return append(v, state...)
}

func deliveryState(t *testing.T, failedFires uint32) []byte {
	t.Helper()
	s, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: failedFires})
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

func mustRecord(t *testing.T, o schema.Outcome) store.Value {
	t.Helper()
	v, err := schema.EncodeRecord(&o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func encodeState(t *testing.T, s schema.DeliveryState) []byte {
	t.Helper()
	v, err := schema.EncodeDeliveryState(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
