package outbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox"
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
		pk, ok := outbox.Parse(store.Key(key))
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
			want  outbox.ParsedKey
		}{
			{func() (store.Key, error) { return outbox.PendingKey(endpoint, seq, rid) }, outbox.ParsedKey{Class: outbox.ClassPending, Endpoint: endpoint, Seq: seq, RID: rid}},
			{func() (store.Key, error) { return outbox.AttemptKey(endpoint, rid) }, outbox.ParsedKey{Class: outbox.ClassAttempt, Endpoint: endpoint, RID: rid}},
			{func() (store.Key, error) { return outbox.BacklogKey(endpoint) }, outbox.ParsedKey{Class: outbox.ClassBacklog, Endpoint: endpoint}},
			{func() (store.Key, error) { return outbox.EndpointKey(endpoint) }, outbox.ParsedKey{Class: outbox.ClassEndpoint, Endpoint: endpoint}},
			{func() (store.Key, error) { return outbox.SeenKey(rid) }, outbox.ParsedKey{Class: outbox.ClassSeen, RID: rid}},
			{func() (store.Key, error) { return outbox.HeadKey(endpoint) }, outbox.ParsedKey{Class: outbox.ClassHead, Endpoint: endpoint}},
			{func() (store.Key, error) { return outbox.MinuteKey(endpoint, int64(seq>>24)*60_000) }, outbox.ParsedKey{Class: outbox.ClassMinute, Endpoint: endpoint, Minute: uint32(seq >> 24)}},
		}
		for _, b := range builds {
			key, err := b.build()
			if err != nil {
				if !errors.Is(err, outbox.ErrInvalid) {
					t.Fatalf("build error does not match ErrInvalid: %v", err)
				}
				continue
			}
			got, ok := outbox.Parse(key)
			if !ok || got != b.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", key, got, ok, b.want)
			}
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	deleted := committed("r")
	deleted.Committed.Refs = append(deleted.Committed.Refs, outbox.Ref{Name: "refs/tags/x", Deleted: true})
	for _, o := range []outbox.Outcome{committed("r"), deleted, aborted("r"),
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Expired: &outbox.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &outbox.ReadServed{Object: hexA, BytesServed: 1 << 40}},
		outbox.NewEvent(outbox.Event{Type: outbox.EventDisabled, Endpoint: "billing", Reason: "failing", FailingSinceMs: 7, LastStatus: 503, LastError: "status"}, 9),
	} {
		v, _ := outbox.EncodeRecord(&o)
		f.Add([]byte(v))
	}
	f.Add([]byte{1, 1, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, v []byte) {
		o, err := outbox.DecodeRecord("r", v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := outbox.EncodeRecord(&o)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("re-encode of accepted record: % x, %v; want % x", again, err, v)
		}
	})
}

// Any JSON the API could decode into a valid outcome survives the record
// codec unchanged.
func FuzzOutcomeJSONThroughRecord(f *testing.F) {
	for _, o := range []outbox.Outcome{committed("r-1"), aborted("r-2"), {ReservationID: "x", Repository: "y", OccurredUnixMs: 5, Expired: &outbox.Expired{}}} {
		b, _ := json.Marshal(&o)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var o outbox.Outcome
		if json.Unmarshal(body, &o) != nil || o.Validate() != nil {
			return
		}
		if o.Committed != nil && len(o.Committed.Refs) == 0 {
			o.Committed.Refs = nil // the record does not tell [] from none
		}
		v, err := outbox.EncodeRecord(&o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := outbox.DecodeRecord(o.ReservationID, v)
		if err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("record round trip: %+v, %v; want %+v", got, err, o)
		}
	})
}

func FuzzDecodeBacklog(f *testing.F) {
	f.Add([]byte(outbox.EncodeBacklog(outbox.Backlog{Rows: 2, Bytes: 99})))
	f.Fuzz(func(t *testing.T, v []byte) {
		b, err := outbox.DecodeBacklog(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(outbox.EncodeBacklog(b), v) {
			t.Fatalf("backlog not canonical: % x", v)
		}
	})
}

func FuzzDecodeMinute(f *testing.F) {
	f.Add([]byte(outbox.EncodeMinute(outbox.Minute{Delivered: 3, Failed: 1})))
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := outbox.DecodeMinute(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(outbox.EncodeMinute(m), v) {
			t.Fatalf("minute not canonical: % x", v)
		}
	})
}

func FuzzDecodeSequence(f *testing.F) {
	f.Add([]byte(outbox.EncodeSequence(12)))
	f.Fuzz(func(t *testing.T, v []byte) {
		n, err := outbox.DecodeSequence(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(outbox.EncodeSequence(n), v) {
			t.Fatalf("sequence not canonical: % x", v)
		}
	})
}

func FuzzDecodeHead(f *testing.F) {
	f.Add([]byte(outbox.EncodeHead(7)))
	f.Fuzz(func(t *testing.T, v []byte) {
		seq, err := outbox.DecodeHead(v)
		checkCorrupt(t, err)
		if err == nil && !bytes.Equal(outbox.EncodeHead(seq), v) {
			t.Fatalf("head not canonical: % x", v)
		}
	})
}

func FuzzDecodeSeen(f *testing.F) {
	v3, _ := outbox.EncodeSeen(outbox.Seen{Digest: [32]byte{1}, AcceptedMs: t0, Logged: true, Seq: 7})
	v4, _ := outbox.EncodeSeen(outbox.Seen{Digest: [32]byte{1}, AcceptedMs: t0})
	f.Add([]byte(v3))
	f.Add([]byte(v4))
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := outbox.DecodeSeen(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := outbox.EncodeSeen(s)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("seen not canonical: % x", v)
		}
	})
}

func FuzzDecodeLog(f *testing.F) {
	rec, _ := outbox.EncodeRecord(ptrTo(committed("r")))
	for _, l := range []outbox.LogRow{
		{RID: "r", AcceptedMs: t0, Record: rec},
		{RID: "r-1", AcceptedMs: t0, Record: rec, Entries: []outbox.LogEntry{
			{Endpoint: "audit", State: outbox.EntryPending},
			{Endpoint: "billing", State: outbox.EntryDelivered, Attempts: true, AtMs: t0, DurationMs: 3, Status: 204},
		}},
	} {
		v, _ := outbox.EncodeLog(l)
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		l, err := outbox.DecodeLog(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := outbox.EncodeLog(l)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("log row not canonical: % x, %v", v, err)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

func FuzzDecodeAttempts(f *testing.F) {
	v, _ := outbox.EncodeAttempts(outbox.Attempts{Total: 37, Last: []outbox.Attempt{
		{AtMs: t0, DurationMs: 5000, ErrorClass: "timeout"},
		{AtMs: t0 + 1, DurationMs: 12, Status: 503, ErrorClass: "status", Excerpt: "busy \uFFFD é"},
		{AtMs: t0 + 2, DurationMs: 3, Status: 200},
	}})
	f.Add([]byte(v))
	f.Fuzz(func(t *testing.T, v []byte) {
		h, err := outbox.DecodeAttempts(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := outbox.EncodeAttempts(h)
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
		x := outbox.Excerpt(raw)
		if !utf8.ValidString(x) || len(x) > outbox.MaxExcerptBytes {
			t.Fatalf("excerpt %q of %q", x, raw)
		}
		if outbox.Excerpt([]byte(x)) != x {
			t.Fatalf("excerpt %q is not its own excerpt", x)
		}
		a := outbox.Attempt{AtMs: t0, Status: 500, ErrorClass: "status", Excerpt: x}
		if _, err := outbox.EncodeAttempts(outbox.Attempts{Total: 1, Last: []outbox.Attempt{a}}); err != nil {
			t.Fatalf("excerpt %q not storable: %v", x, err)
		}
	})
}

func FuzzDecodeEndpoint(f *testing.F) {
	ep := testEndpoint()
	v, _ := outbox.EncodeEndpoint(&ep)
	f.Add([]byte(v))
	plain := outbox.Endpoint{URL: "http://127.0.0.1:8080/x"}.WithDefaults()
	v, _ = outbox.EncodeEndpoint(&plain)
	f.Add([]byte(v))
	plain.TimeoutMs, plain.Headers = 2000, map[string]outbox.HeaderValue{"x-tenant": "acme", "authorization": "Bearer t"}
	v, _ = outbox.EncodeEndpoint(&plain)
	f.Add([]byte(v))
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := outbox.DecodeEndpoint(v)
		checkCorrupt(t, err)
		if err != nil {
			return
		}
		again, err := outbox.EncodeEndpoint(&e)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("endpoint not canonical: %q", v)
		}
	})
}

func FuzzDecodeDeliveryState(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 3, 0, 2, 'p', 'x'})
	withHealth, _ := outbox.EncodeDeliveryState(outbox.DeliveryState{Attempt: 2, Health: &outbox.Health{
		FailingSinceMs: 5, NotifiedMs: 6, ResumeMs: 7, LastStatus: 503, LastError: "status",
		Pending: []outbox.PendingEvent{{AtMs: 8, Event: outbox.Event{Type: outbox.EventFailing, Endpoint: "e", FailingSinceMs: 5, LastStatus: 503}}},
	}})
	f.Add(withHealth)
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := outbox.DecodeDeliveryState(v)
		checkCorrupt(t, err)
		if err != nil || len(v) == 0 {
			return
		}
		again, err := outbox.EncodeDeliveryState(s)
		if err != nil || !bytes.Equal(again, v) {
			t.Fatalf("delivery state not canonical: % x", v)
		}
	})
}
