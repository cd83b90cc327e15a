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
