package outboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// T0 is the tests' usual now: 2025-11-30T00:00:00Z in Unix milliseconds.
const T0 = int64(1_764_460_800_000)

// HexA is a valid 32-byte id in lowercase hex.
var HexA = strings.Repeat("ab", 32)

// Committed is a valid committed outcome under rid, occurred at T0.
func Committed(rid string) schema.Outcome {
	return schema.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: T0,
		Committed: &schema.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256,
			Refs: []schema.Ref{{Name: "refs/heads/main", New: HexA}}},
	}
}

// Aborted is a valid aborted outcome under rid, occurred at T0.
func Aborted(rid string) schema.Outcome {
	return schema.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: T0,
		Aborted: &schema.Aborted{Reason: "ref_conflict", Detail: "main moved"},
	}
}

// PutEndpoint stores endpoint id in p: cfg with its defaults, and a URL
// under https://hooks.example.com/ when it has none.
func PutEndpoint(t testing.TB, st store.NamespaceStore, p store.Partition, id string, cfg schema.Endpoint) {
	t.Helper()
	cfg = cfg.WithDefaults()
	if cfg.URL == "" {
		cfg.URL = "https://hooks.example.com/" + id
	}
	v, err := schema.EncodeEndpoint(&cfg)
	if err != nil {
		t.Fatalf("encode endpoint: %v", err)
	}
	key, err := schema.EndpointKey(id)
	if err != nil {
		t.Fatal(err)
	}
	old, found, err := st.Get(context.Background(), p, key)
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(key, v)
	outbox.MarkEndpoint(&b, id, outbox.ClassOf(old, found), outbox.ClassOf(v, true), false)
	if res, err := st.Apply(context.Background(), p, b); err != nil || !res.Committed {
		t.Fatalf("put endpoint %s: %+v %v", id, res, err)
	}
}

// Env is one namespace ("acme") on a store, with a manual clock at T0 and
// an Appender on both: the common ground of tests that build on the outbox.
type Env struct {
	T   *testing.T
	Ctx context.Context
	St  store.NamespaceStore
	Clk *clock.Manual
	P   store.Partition
	App *outbox.Appender
}

// NewEnv is the Env of t on st.
func NewEnv(t *testing.T, st store.NamespaceStore) *Env {
	clk := clock.NewManual(T0)
	return &Env{
		T: t, Ctx: context.Background(), St: st, Clk: clk,
		P:   store.Partition{Namespace: "acme"},
		App: &outbox.Appender{Store: st, Clock: clk},
	}
}

// NowMs is the clock's time in Unix milliseconds.
func (e *Env) NowMs() int64 { return e.Clk.Now().UnixMilli() }

// Apply applies b, failing the test on an error (not on a failed guard).
func (e *Env) Apply(b store.Batch) store.Result {
	e.T.Helper()
	res, err := e.St.Apply(e.Ctx, e.P, b)
	if err != nil {
		e.T.Fatalf("apply: %v", err)
	}
	return res
}

// Append appends outcomes, failing the test on an error.
func (e *Env) Append(outcomes ...schema.Outcome) []outbox.Status {
	e.T.Helper()
	st, err := e.App.Append(e.Ctx, e.P, outcomes)
	if err != nil {
		e.T.Fatalf("append: %v", err)
	}
	return st
}

// Get reads one row, failing the test on an error.
func (e *Env) Get(key store.Key) (store.Value, bool) {
	e.T.Helper()
	v, found, err := e.St.Get(e.Ctx, e.P, key)
	if err != nil {
		e.T.Fatalf("get: %v", err)
	}
	return v, found
}

// Unordered is every row of the partition the store keeps unordered
// (store.UnorderedTag: the seen rows) with a key in [start, end), sorted
// by key, each once.
func Unordered(t testing.TB, st store.NamespaceStore, p store.Partition, start, end store.Key) []store.Entry {
	t.Helper()
	rows := map[store.Key]store.Value{}
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("unordered scan does not end")
		}
		page, err := st.ScanUnordered(context.Background(), p, after, 100)
		if err != nil {
			t.Fatalf("unordered scan of %s: %v", p, err)
		}
		for _, e := range page.Entries {
			if e.Key >= start && e.Key < end {
				rows[e.Key] = e.Value
			}
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	out := make([]store.Entry, 0, len(rows))
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		out = append(out, store.Entry{Key: k, Value: rows[k]})
	}
	return out
}

// Head is the stream's head as stored (schema.Head).
func Head(t testing.TB, st store.NamespaceStore, p store.Partition, endpoint string) schema.Head {
	t.Helper()
	key, err := schema.HeadKey(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	v, found, err := st.Get(context.Background(), p, key)
	if err != nil {
		t.Fatalf("read head of %s/%s: %v", p, endpoint, err)
	}
	h, err := schema.HeadOf(store.Row{Value: v, Found: found})
	if err != nil {
		t.Fatalf("head of %s/%s: %v", p, endpoint, err)
	}
	return h
}

// Queue is the whole queue of the stream of endpoint, in sequence order, as
// delivery reads it: its pending rows and the log's pending entries from
// its head.
func Queue(t testing.TB, st store.NamespaceStore, p store.Partition, endpoint string) []outbox.QueueRow {
	t.Helper()
	head := Head(t, st, p, endpoint)
	var out []outbox.QueueRow
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("queue does not end")
		}
		page, err := outbox.ReadQueue(context.Background(), st, p, endpoint, head, after, 100)
		if err != nil {
			t.Fatalf("read queue of %s/%s: %v", p, endpoint, err)
		}
		out = append(out, page.Rows...)
		if page.Next == nil {
			return out
		}
		after = page.Next
	}
}

// AckPage acknowledges the first n rows of the stream's queue as a
// delivery fire does: it reads the queue from its start, the rows' records,
// then the backlog afresh, plans the acknowledgements (keeping the rows'
// history when retain) and the head's move past the leading rows it
// finished, and applies them. It returns the rids acknowledged, none when
// a guard lost to a concurrent writer or the queue is empty.
func AckPage(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, n int, retain bool, done outbox.Done) ([]string, error) {
	hkey, err := schema.HeadKey(endpoint)
	if err != nil {
		return nil, err
	}
	hv, found, err := st.Get(ctx, p, hkey)
	if err != nil {
		return nil, err
	}
	head, err := schema.HeadOf(store.Row{Value: hv, Found: found})
	if err != nil {
		return nil, err
	}
	prefix, err := outbox.ReadQueuePrefix(ctx, st, p, endpoint, head, n)
	if err != nil || len(prefix.Rows) == 0 {
		return nil, err
	}
	moves, to := prefix.FromHead, prefix.End
	queue := prefix.Rows
	page := outbox.QueuePage{Rows: queue}
	refs := make([]outbox.StreamRef, len(page.Rows))
	for i, q := range page.Rows {
		if q.Corrupt {
			return nil, fmt.Errorf("corrupt queue row %q", q.Key)
		}
		refs[i] = outbox.StreamRef{Seq: q.Seq, RID: q.RID, Logged: q.Logged}
	}
	rows, err := outbox.ReadStreamRows(ctx, st, p, endpoint, refs)
	if err != nil {
		return nil, err
	}
	bkey, _ := schema.BacklogKey(endpoint)
	bv, bfound, err := st.Get(ctx, p, bkey)
	if err != nil {
		return nil, err
	}
	acks, err := outbox.NewAcks(endpoint, bv, bfound)
	if err != nil {
		return nil, err
	}
	acks.Retain = retain
	var acked []string
	for i, q := range page.Rows {
		if !rows[i].Found || rows[i].Err != nil {
			return nil, fmt.Errorf("queue row %s/%s has no record: %v", endpoint, q.RID, rows[i].Err)
		}
		if err := acks.Add(q.RID, q.Seq, rows[i].Record, done); err != nil {
			return nil, err
		}
		acked = append(acked, q.RID)
	}
	if moves && to > head.Seq {
		acks.MoveHead(to)
	}
	var b store.Batch
	acks.Plan(&b)
	res, err := st.Apply(ctx, p, b)
	if err != nil || !res.Committed {
		return nil, err
	}
	return acked, nil
}
