package schema_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// checkCorrupt fails unless a refused value's error wraps store.ErrCorrupt.
func checkCorrupt(t *testing.T, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("error does not wrap store.ErrCorrupt: %v", err)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, k := range []string{"rbilling/r-1", "pbilling/\x00\x00\x00\x00\x00\x00\x00\x2fs:x", "bbilling", "q", "ebilling", "abilling/r", "sr", "x", ""} {
		f.Add([]byte(k))
	}
	f.Add([]byte(timers.Key(42, timers.KindOutcomeDelivery, "billing")))
	f.Add([]byte("m\x01\xc0\x1b\x00billing"))
	f.Fuzz(func(t *testing.T, key []byte) {
		pk, ok := schema.Parse(store.Key(key))
		if !ok {
			return
		}
		if got := pk.Key(); got != store.Key(key) {
			t.Fatalf("Parse(%q).Key() = %q", key, got)
		}
	})
}

func FuzzBuildThenParse(f *testing.F) {
	f.Add("billing", "r-7f3a", uint64(0))
	f.Add("a", "s:local", uint64(0x2f2f2f2f2f2f2f2f))
	f.Add("a/b", "r", uint64(1))
	f.Fuzz(func(t *testing.T, endpoint, rid string, seq uint64) {
		builds := []struct {
			build func() (store.Key, error)
			want  schema.ParsedKey
		}{
			{func() (store.Key, error) { return schema.PendingKey(endpoint, seq, rid) }, schema.ParsedKey{Class: schema.ClassPending, Endpoint: endpoint, Seq: seq, RID: rid}},
			{func() (store.Key, error) { return schema.AttemptKey(endpoint, rid) }, schema.ParsedKey{Class: schema.ClassAttempt, Endpoint: endpoint, RID: rid}},
			{func() (store.Key, error) { return schema.BacklogKey(endpoint) }, schema.ParsedKey{Class: schema.ClassBacklog, Endpoint: endpoint}},
			{func() (store.Key, error) { return schema.EndpointKey(endpoint) }, schema.ParsedKey{Class: schema.ClassEndpoint, Endpoint: endpoint}},
			{func() (store.Key, error) { return schema.SeenKey(rid) }, schema.ParsedKey{Class: schema.ClassSeen, RID: rid}},
			{func() (store.Key, error) { return schema.HeadKey(endpoint) }, schema.ParsedKey{Class: schema.ClassHead, Endpoint: endpoint}},
			{func() (store.Key, error) { return schema.MinuteKey(endpoint, int64(seq>>24)*60_000) }, schema.ParsedKey{Class: schema.ClassMinute, Endpoint: endpoint, Minute: uint32(seq >> 24)}},
		}
		for _, b := range builds {
			key, err := b.build()
			if err != nil {
				if !errors.Is(err, schema.ErrInvalid) {
					t.Fatalf("build error does not match ErrInvalid: %v", err)
				}
				continue
			}
			got, ok := schema.Parse(key)
			if !ok || got != b.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", key, got, ok, b.want)
			}
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	deleted := committed("r")
	deleted.Committed.Refs = append(deleted.Committed.Refs, schema.Ref{Name: "refs/tags/x", Deleted: true})
	for _, o := range []schema.Outcome{committed("r"), deleted, aborted("r"),
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Expired: &schema.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &schema.ReadServed{Object: hexA, BytesServed: 1 << 40}},
		schema.NewEvent(schema.Event{Type: schema.EventDisabled, Endpoint: "billing", Reason: "failing", FailingSinceMs: 7, LastStatus: 503, LastError: "status"}, 9),
	} {
		v, _ := schema.EncodeRecord(&o)
		f.Add([]byte(v))
	}
	f.Add([]byte{1, 1, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, v []byte) {
		o, err := schema.DecodeRecord("r", v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := schema.EncodeRecord(&o)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("re-encode of accepted record: % x, %v; want % x", again, err, v)
		}
	})
}

// Any JSON the API could decode into a valid outcome survives the record
// codec unchanged.
func FuzzOutcomeJSONThroughRecord(f *testing.F) {
	for _, o := range []schema.Outcome{committed("r-1"), aborted("r-2"), {ReservationID: "x", Repository: "y", OccurredUnixMs: 5, Expired: &schema.Expired{}}} {
		b, _ := json.Marshal(&o)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var o schema.Outcome
		if json.Unmarshal(body, &o) != nil || o.Validate() != nil {
			return
		}
		if o.Committed != nil && len(o.Committed.Refs) == 0 {
			o.Committed.Refs = nil // the record does not tell [] from none
		}
		v, err := schema.EncodeRecord(&o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := schema.DecodeRecord(o.ReservationID, v)
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("record round trip: %+v, %v; want %+v", got, err, o)
		}
	})
}

func FuzzDecodeBacklog(f *testing.F) {
	f.Add([]byte(schema.EncodeBacklog(schema.Backlog{Rows: 2, Bytes: 99})))
	f.Fuzz(func(t *testing.T, v []byte) {
		b, err := schema.DecodeBacklog(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(schema.EncodeBacklog(b), v) {
			t.Fatalf("backlog not canonical: % x", v)
		}
	})
}

func FuzzDecodeCounters(f *testing.F) {
	f.Add([]byte(schema.EncodeCounters(schema.Counters{Delivered: 5, FailedAttempts: 2, Dropped: 1})))
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := schema.DecodeCounters(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(schema.EncodeCounters(c), v) {
			t.Fatalf("counters not canonical: % x", v)
		}
	})
}

func FuzzDecodeMinute(f *testing.F) {
	f.Add([]byte(schema.EncodeMinute(schema.Minute{Delivered: 3, Failed: 1})))
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := schema.DecodeMinute(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(schema.EncodeMinute(m), v) {
			t.Fatalf("minute not canonical: % x", v)
		}
	})
}

func FuzzDecodeSequence(f *testing.F) {
	f.Add([]byte(schema.EncodeSequence(12)))
	f.Fuzz(func(t *testing.T, v []byte) {
		n, err := schema.DecodeSequence(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(schema.EncodeSequence(n), v) {
			t.Fatalf("sequence not canonical: % x", v)
		}
	})
}

func FuzzDecodeHead(f *testing.F) {
	f.Add([]byte(schema.EncodeHead(7)))
	f.Fuzz(func(t *testing.T, v []byte) {
		seq, err := schema.DecodeHead(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(schema.EncodeHead(seq), v) {
			t.Fatalf("head not canonical: % x", v)
		}
	})
}

func FuzzDecodeSeen(f *testing.F) {
	v3, _ := schema.EncodeSeen(schema.Seen{Digest: [32]byte{1}, AcceptedMs: t0, Logged: true, Seq: 7})
	v4, _ := schema.EncodeSeen(schema.Seen{Digest: [32]byte{1}, AcceptedMs: t0})
	f.Add([]byte(v3))
	f.Add([]byte(v4))
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := schema.DecodeSeen(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := schema.EncodeSeen(s)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("seen not canonical: % x", v)
		}
	})
}

func FuzzDecodeLog(f *testing.F) {
	rec, _ := schema.EncodeRecord(ptrTo(committed("r")))
	for _, l := range []schema.LogRow{
		{RID: "r", AcceptedMs: t0, Record: rec},
		{RID: "r-1", AcceptedMs: t0, Record: rec, Entries: []schema.LogEntry{
			{Endpoint: "audit", State: schema.EntryPending},
			{Endpoint: "billing", State: schema.EntryDelivered, Attempts: true, AtMs: t0, DurationMs: 3, Status: 204},
		}},
		{RID: "r", AcceptedMs: t0, Record: rec, Trace: schema.TraceParent{TraceID: [16]byte{1}, SpanID: [8]byte{2}, Flags: 1},
			Entries: []schema.LogEntry{{Endpoint: "audit", State: schema.EntryPending}}},
	} {
		v, _ := schema.EncodeLog(l)
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		l, err := schema.DecodeLog(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := schema.EncodeLog(l)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("log row not canonical: % x, %v", v, err)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

func FuzzDecodeAttempts(f *testing.F) {
	v, _ := schema.EncodeAttempts(schema.Attempts{Total: 37, Last: []schema.Attempt{
		{AtMs: t0, DurationMs: 5000, ErrorClass: "timeout"},
		{AtMs: t0 + 1, DurationMs: 12, Status: 503, ErrorClass: "status", Excerpt: "busy \uFFFD é"},
		{AtMs: t0 + 2, DurationMs: 3, Status: 200},
	}})
	f.Add([]byte(v))
	f.Fuzz(func(t *testing.T, v []byte) {
		h, err := schema.DecodeAttempts(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := schema.EncodeAttempts(h)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("attempt not canonical: % x", v)
		}
	})
}

// FuzzExcerpt checks that whatever an endpoint answers, its excerpt is
// valid UTF-8 within the bound, a prefix-faithful rendering of the body,
// and storable.
func FuzzExcerpt(f *testing.F) {
	f.Add([]byte("ok"))
	f.Add([]byte("\x00\x1b[31m\xff\xfe\u202e\xe2\x82"))
	f.Add(bytes.Repeat([]byte("€"), 100))
	f.Fuzz(func(t *testing.T, raw []byte) {
		x := schema.Excerpt(raw)
		if !utf8.ValidString(x) || len(x) > schema.MaxExcerptBytes {
			t.Fatalf("excerpt %q of %q", x, raw)
		}
		if schema.Excerpt([]byte(x)) != x {
			t.Fatalf("excerpt %q is not its own excerpt", x)
		}
		a := schema.Attempt{AtMs: t0, Status: 500, ErrorClass: "status", Excerpt: x}
		if _, err := schema.EncodeAttempts(schema.Attempts{Total: 1, Last: []schema.Attempt{a}}); err != nil {
			t.Fatalf("excerpt %q not storable: %v", x, err)
		}
	})
}

func FuzzDecodeEndpoint(f *testing.F) {
	ep := testEndpoint()
	v, _ := schema.EncodeEndpoint(&ep)
	f.Add([]byte(v))
	plain := schema.Endpoint{URL: "http://127.0.0.1:8080/x"}.WithDefaults()
	v, _ = schema.EncodeEndpoint(&plain)
	f.Add([]byte(v))
	plain.TimeoutMs, plain.Headers = 2000, map[string]schema.HeaderValue{"x-tenant": "acme", "authorization": "Bearer t"}
	v, _ = schema.EncodeEndpoint(&plain)
	f.Add([]byte(v))
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := schema.DecodeEndpoint(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := schema.EncodeEndpoint(&e)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("endpoint not canonical: %q", v)
		}
	})
}

func FuzzDecodeDeliveryState(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 3, 0, 2, 'p', 'x'})
	withHealth, _ := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 2, Health: &schema.Health{
		FailingSinceMs: 5, NotifiedMs: 6, ResumeMs: 7, LastStatus: 503, LastError: "status",
		Pending: []schema.PendingEvent{{AtMs: 8, Event: schema.Event{Type: schema.EventFailing, Endpoint: "e", FailingSinceMs: 5, LastStatus: 503}}},
	}})
	f.Add(withHealth)
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := schema.DecodeDeliveryState(v)
		checkCorrupt(t, err)
		if err != nil || len(v) == 0 {
			return
		}
		again, err := schema.EncodeDeliveryState(s)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("delivery state not canonical: % x", v)
		}
	})
}
