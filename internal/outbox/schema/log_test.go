package schema_test

import (
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func TestLogRowsRoundTripAndRefuseWhatTheyCannotHold(t *testing.T) {
	rec := mustRecord(t, committed("r"))
	l := schema.LogRow{RID: "r", AcceptedMs: t0, Record: rec, Entries: []schema.LogEntry{
		{Endpoint: "audit", State: schema.EntryPending},
		{Endpoint: "billing", State: schema.EntryDelivered, Attempts: true, AtMs: t0 + 1, DurationMs: 9, Status: 200},
	}}
	v, err := schema.EncodeLog(l)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeLog(v)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got.Entries {
		if got.Entries[i].Endpoint != l.Entries[i].Endpoint || got.Entries[i].State != l.Entries[i].State ||
			got.Entries[i].Attempts != l.Entries[i].Attempts || got.Entries[i].AtMs != l.Entries[i].AtMs ||
			got.Entries[i].DurationMs != l.Entries[i].DurationMs || got.Entries[i].Status != l.Entries[i].Status {
			t.Errorf("entry %d: %+v, want %+v", i, got.Entries[i], l.Entries[i])
		}
	}
	if got.RID != "r" || got.AcceptedMs != t0 || string(got.Record) != string(rec) {
		t.Errorf("decoded %+v", got)
	}
	for name, bad := range map[string]schema.LogRow{
		"no record":  {RID: "r", Record: nil},
		"bad rid":    {RID: "a b", Record: rec},
		"bad state":  {RID: "r", Record: rec, Entries: []schema.LogEntry{{Endpoint: "a", State: 9}}},
		"bad id":     {RID: "r", Record: rec, Entries: []schema.LogEntry{{Endpoint: "A", State: schema.EntryPending}}},
		"negative":   {RID: "r", AcceptedMs: -1, Record: rec},
		"eleven eps": {RID: "r", Record: rec, Entries: make([]schema.LogEntry, 11)},
	} {
		if _, err := schema.EncodeLog(bad); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	twice, err := schema.EncodeLog(schema.LogRow{RID: "r", Record: rec, Entries: []schema.LogEntry{
		{Endpoint: "audit", State: schema.EntryPending}, {Endpoint: "audix", State: schema.EntryPending}}})
	if err != nil {
		t.Fatal(err)
	}
	twice[1+1+1+5+15+1+4] = 't' // the second id made "audit" too
	for name, bad := range map[string]store.Value{
		"empty":     {},
		"version":   append(store.Value{9}, v[1:]...),
		"no record": v[:len(v)-len(rec)],
		"state":     func() store.Value { b := append(store.Value(nil), v...); b[8] = 7; return b }(),
		"too many":  func() store.Value { b := append(store.Value(nil), v...); b[1] = 11; return b }(),
		"twice":     twice,
	} {
		if _, err := schema.DecodeLog(bad); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := schema.EncodeLog(schema.LogRow{RID: "r", Record: rec, Entries: []schema.LogEntry{
		{Endpoint: "audit", State: schema.EntryPending}, {Endpoint: "audit", State: schema.EntryPending}}}); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("an endpoint twice: %v", err)
	}
}

func TestSeenRowsOfBothVersionsRead(t *testing.T) {
	s := schema.Seen{AcceptedMs: t0, Logged: true, Seq: 41}
	s.Digest[0], s.Writer[7] = 1, 2
	v, err := schema.EncodeSeen(s)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := schema.DecodeSeen(v); v[0] != 3 || err != nil || got != s {
		t.Errorf("version 3: % x: %+v %v", v, got, err)
	}
	s.Logged, s.Seq = false, 0
	v4, _ := schema.EncodeSeen(s)
	if v4[0] != 4 || len(v4) != 33 {
		t.Errorf("unlogged seen row %x, want version 4 of 33 bytes", v4)
	}
	if got, err := schema.DecodeSeen(v4); err != nil || got != s {
		t.Errorf("version 4: %+v %v", got, err)
	}
	// Versions no release wrote are corrupt.
	for _, old := range []byte{1, 2} {
		if _, err := schema.DecodeSeen(append([]byte{old}, v4[1:]...)); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("version %d: %v", old, err)
		}
	}
	if _, err := schema.DecodeSeen(append(v, 0)); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("trailing byte: %v", err)
	}
}

// A row accepted under a trace keeps its trace parent; one accepted
// untraced is written as before (version 1), and both read. An entry of a
// traced row is written in place where it is, as in any row.
func TestALogRowKeepsTheTraceItWasAcceptedUnder(t *testing.T) {
	rec := mustRecord(t, committed("r"))
	tp := schema.TraceParent{Flags: 1}
	tp.TraceID[0], tp.TraceID[15], tp.SpanID[7] = 0x0a, 0x9c, 0x31
	entries := []schema.LogEntry{{Endpoint: "audit", State: schema.EntryPending}, {Endpoint: "billing", State: schema.EntryPending}}
	traced := schema.LogRow{RID: "r", AcceptedMs: t0, Trace: tp, Record: rec, Entries: entries}
	v, err := schema.EncodeLog(traced)
	if err != nil {
		t.Fatal(err)
	}
	plain := traced
	plain.Trace = schema.TraceParent{}
	v1, err := schema.EncodeLog(plain)
	if err != nil {
		t.Fatal(err)
	}
	if v[0] != 2 || v1[0] != 1 || len(v) != len(v1)+25 {
		t.Fatalf("traced row version %d of %d bytes, untraced version %d of %d", v[0], len(v), v1[0], len(v1))
	}
	got, err := schema.DecodeLog(v)
	if err != nil {
		t.Fatal(err)
	}
	if got.Trace != tp || got.RID != "r" || string(got.Record) != string(rec) || len(got.Entries) != 2 {
		t.Fatalf("decoded %+v", got)
	}
	if got1, err := schema.DecodeLog(v1); err != nil || got1.Trace != (schema.TraceParent{}) {
		t.Fatalf("untraced row: %+v %v", got1, err)
	}
	// The second entry's tail, written as a stream writes it, lands on
	// that entry and nowhere else.
	e, _ := got.Entry("billing")
	e.State, e.AtMs, e.Status = schema.EntryDelivered, t0+5, 204
	var b store.Batch
	schema.PutEntry(&b, 7, e)
	w := b.Writes[0]
	after := append(store.Value(nil), v...)
	copy(after[w.Offset:], w.Value)
	again, err := schema.DecodeLog(after)
	if err != nil {
		t.Fatal(err)
	}
	if en, _ := again.Entry("billing"); en.State != schema.EntryDelivered || en.Status != 204 || again.Trace != tp {
		t.Errorf("after the write: %+v", again)
	}
	if en, _ := again.Entry("audit"); en.State != schema.EntryPending {
		t.Errorf("the other entry changed: %+v", en)
	}
	// Half a trace parent names no span: refused both ways.
	half := traced
	half.Trace.SpanID = [8]byte{}
	if _, err := schema.EncodeLog(half); !errors.Is(err, schema.ErrInvalid) {
		t.Errorf("half a trace parent encoded: %v", err)
	}
	zeroed := append(store.Value(nil), v...)
	at := len(v) - len(rec) - 25
	clear(zeroed[at : at+16])
	if _, err := schema.DecodeLog(zeroed); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("a zero trace id decoded: %v", err)
	}
	if _, err := schema.DecodeLog(v[:at+10]); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("a cut trace parent decoded: %v", err)
	}
}
