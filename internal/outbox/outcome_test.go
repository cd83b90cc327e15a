package outbox_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
)

func TestOutcomeValidateExplainsEachRule(t *testing.T) {
	mod := func(f func(o *outbox.Outcome)) outbox.Outcome {
		o := committed("r-1")
		f(&o)
		return o
	}
	cases := []struct {
		name string
		o    outbox.Outcome
		want string
	}{
		{"rid", mod(func(o *outbox.Outcome) { o.ReservationID = "a/b" }), "reservation_id must be"},
		{"repo empty", mod(func(o *outbox.Outcome) { o.Repository = "" }), "repository must not be empty"},
		{"repo long", mod(func(o *outbox.Outcome) { o.Repository = strings.Repeat("r", 257) }), "repository must be at most 256 bytes"},
		{"repo control", mod(func(o *outbox.Outcome) { o.Repository = "a\nb" }), "repository must be printable"},
		{"repo utf8", mod(func(o *outbox.Outcome) { o.Repository = "a\xff" }), "repository must be printable"},
		{"occurred", mod(func(o *outbox.Outcome) { o.OccurredUnixMs = 0 }), "occurred_unix_ms must be"},
		{"none", mod(func(o *outbox.Outcome) { o.Committed = nil }), "exactly one of"},
		{"two", mod(func(o *outbox.Outcome) { o.Expired = &outbox.Expired{} }), "exactly one of"},
		{"refs", mod(func(o *outbox.Outcome) { o.Committed.Refs = make([]outbox.Ref, 65) }), "at most 64 refs"},
		{"ref name", mod(func(o *outbox.Outcome) { o.Committed.Refs[0].Name = "" }), "refs[0].name must not be empty"},
		{"ref new", mod(func(o *outbox.Outcome) { o.Committed.Refs[0].New = strings.ToUpper(hexA) }), "refs[0].new must be 64 lowercase hex"},
		{"ref deleted", mod(func(o *outbox.Outcome) { o.Committed.Refs[0].Deleted = true }), "refs[0].new must be empty when deleted"},
		{"reason", mod(func(o *outbox.Outcome) { o.Committed = nil; o.Aborted = &outbox.Aborted{Reason: "Bad Reason"} }), "aborted.reason must be"},
		{"detail", mod(func(o *outbox.Outcome) {
			o.Committed = nil
			o.Aborted = &outbox.Aborted{Reason: "x", Detail: strings.Repeat("d", 513)}
		}), "aborted.detail must be at most 512 bytes"},
		{"object", mod(func(o *outbox.Outcome) { o.Committed = nil; o.ReadServed = &outbox.ReadServed{Object: "abc"} }), "read_served.object must be 64 lowercase hex"},
	}
	for _, c := range cases {
		err := c.o.Validate()
		if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, ok := range []outbox.Outcome{
		committed("r"), aborted("r"),
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Expired: &outbox.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &outbox.ReadServed{Object: hexA, BytesServed: 9}},
		mod(func(o *outbox.Outcome) { o.Committed.Refs = []outbox.Ref{{Name: "refs/tags/old", Deleted: true}} }),
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// The API decodes requests into Outcome: its JSON is the webhook's data
// (api/openapi.yaml), field for field.
func TestOutcomeJSONMatchesTheWebhookData(t *testing.T) {
	in := `{"reservation_id":"r-7f3a","repository":"acme/widgets","occurred_unix_ms":1764460800000,` +
		`"committed":{"bytes_stored":1024,"new_to_repo":512,"new_to_store":256,` +
		`"refs":[{"name":"refs/heads/main","new":"` + hexA + `","deleted":false}]}}`
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	var o outbox.Outcome
	if err := dec.Decode(&o); err != nil {
		t.Fatal(err)
	}
	if want := committed("r-7f3a"); !reflect.DeepEqual(o, want) {
		t.Fatalf("decoded %+v, want %+v", o, want)
	}
	out, _ := json.Marshal(&o)
	if string(out) != in {
		t.Errorf("marshal:\n%s\nwant\n%s", out, in)
	}
	for _, c := range []struct {
		o    outbox.Outcome
		want string
	}{
		{outbox.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, Expired: &outbox.Expired{}}, `"expired":{}`},
		{outbox.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, Committed: &outbox.Committed{}}, `"refs":[]`},
		{outbox.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, ReadServed: &outbox.ReadServed{Object: hexA, BytesServed: 3}}, `"read_served":{"object":"` + hexA + `","bytes_served":3}`},
		{aborted("r"), `"aborted":{"reason":"ref_conflict","detail":"main moved"}`},
	} {
		b, _ := json.Marshal(&c.o)
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s lacks %s", b, c.want)
		}
	}
	if k := committed("r").Kind(); k != outbox.KindCommitted {
		t.Errorf("kind %q", k)
	}
}

func TestRecordRoundTripsEveryKind(t *testing.T) {
	many := committed("r")
	many.Committed.Refs = append(many.Committed.Refs, outbox.Ref{Name: "refs/tags/v1", Deleted: true})
	many.Committed.BytesStored = 1 << 63
	for _, o := range []outbox.Outcome{
		many, aborted("r"),
		{ReservationID: "r", Repository: "ü repo", OccurredUnixMs: 1<<63 - 1, Expired: &outbox.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &outbox.ReadServed{Object: hexA, BytesServed: 300}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Committed: &outbox.Committed{}},
	} {
		v := mustRecord(t, o)
		got, err := outbox.DecodeRecord("r", v)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		if !reflect.DeepEqual(got, o) {
			t.Errorf("round trip %+v -> %+v", o, got)
		}
	}
}

// A pending outcome's record is smaller than the JSON the producer sent, so
// a stream's memory stays well within twice the payload.
func TestRecordIsSmallerThanItsJSON(t *testing.T) {
	o := committed("r-7f3a")
	for i := 0; i < 10; i++ {
		o.Committed.Refs = append(o.Committed.Refs, outbox.Ref{Name: "refs/heads/feature-" + string(rune('a'+i)), New: hexA})
	}
	for _, o := range []outbox.Outcome{o, committed("r-7f3a"), aborted("r-7f3a")} {
		js, _ := json.Marshal(&o)
		rec := mustRecord(t, o)
		if len(rec)*2 > len(js) {
			t.Errorf("record %d bytes for %d bytes of JSON", len(rec), len(js))
		}
	}
}

func TestDigestDiffersWhenTheOutcomeDoes(t *testing.T) {
	a, b := committed("r"), committed("r")
	b.Committed.NewToStore++
	da, err := outbox.Digest(&a)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := outbox.Digest(&b)
	other := committed("other")
	dc, _ := outbox.Digest(&other)
	if da == db {
		t.Error("different outcomes share a digest")
	}
	if da != dc {
		t.Error("the digest depends on the reservation id, which the seen row's key already names")
	}
}

// A producer's outcome under a synthetic id would be answered accepted and
// then acknowledged without a call: ingest and replay refuse such ids, while
// Append, relay's own entry, keeps taking them.
func TestSyntheticReservationIDsAreRelaysOwn(t *testing.T) {
	for _, rid := range []string{"s:", "s:local", "s:" + strings.Repeat("x", 126)} {
		o := committed(rid)
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%q): %v, a stored synthetic row must stay valid", rid, err)
		}
		if err := o.ValidateIngest(time.UnixMilli(t0)); !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), `reservation_id must not start with "s:"`) {
			t.Errorf("ValidateIngest(%q) = %v", rid, err)
		}
		if err := outbox.ValidateClientReservationID(rid); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("ValidateClientReservationID(%q) = %v", rid, err)
		}
	}
	for _, rid := range []string{"s", "s-1", "S:x", "xs:1", ":s:", "r-s:"} {
		o := committed(rid)
		if err := o.ValidateIngest(time.UnixMilli(t0)); err != nil {
			t.Errorf("ValidateIngest(%q): %v", rid, err)
		}
	}

	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", outbox.Endpoint{Enabled: true})
		if st := e.Append(committed("s:local")); st[0].Code != outbox.Accepted {
			t.Fatalf("Append of a synthetic outcome: %+v", st)
		}
		if _, found := e.record("billing", "s:local"); !found {
			t.Fatal("no record of the synthetic outcome")
		}
		before := e.all()
		if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "s:local"); !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("replay of a synthetic row: %v", err)
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused replay changed the partition")
		}
	})
}

// occurred_unix_ms is bounded ahead of the ingesting clock, never behind
// it: a producer retrying after an outage has its old outcome taken, a
// clock that is confused or a time in the wrong unit is refused, and
// whatever is taken is a time RFC 3339 can write.
func TestIngestBoundsOccurredTimeAheadOfTheClock(t *testing.T) {
	at := func(now, occurred int64) error {
		o := committed("r-1")
		o.OccurredUnixMs = occurred
		return o.ValidateIngest(time.UnixMilli(now))
	}
	ahead := outbox.MaxOccurredAhead.Milliseconds()
	for _, c := range []struct {
		name          string
		now, occurred int64
		ok            bool
	}{
		{"now", t0, t0, true},
		{"the last accepted, ahead of the clock", t0, t0 + ahead, true},
		{"the first refused, ahead of the clock", t0, t0 + ahead + 1, false},
		{"a year after an outage", t0 + 365*24*3600*1000, t0, true},
		{"the first millisecond", t0, 1, true},
		{"microseconds", t0, t0 * 1000, false},
		{"nanoseconds", t0, t0 * 1_000_000, false},
		{"year 10000", t0, outbox.MaxOccurredUnixMs + 1, false},
		{"the largest int64", t0, 1<<63 - 1, false},
		{"the last RFC 3339 millisecond, at a clock just before it", outbox.MaxOccurredUnixMs - 1000, outbox.MaxOccurredUnixMs, true},
		{"the first millisecond past RFC 3339, at that clock", outbox.MaxOccurredUnixMs - 1000, outbox.MaxOccurredUnixMs + 1, false},
		{"past RFC 3339 at a clock past it", outbox.MaxOccurredUnixMs + ahead, outbox.MaxOccurredUnixMs + 1, false},
	} {
		err := at(c.now, c.occurred)
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if !c.ok && (!errors.Is(err, outbox.ErrInvalid) || !strings.HasPrefix(err.Error(), "occurred_unix_ms must be")) {
			t.Errorf("%s: %v, want occurred_unix_ms refused", c.name, err)
		}
	}
	if got := outbox.LatestOccurredUnixMs(time.UnixMilli(t0)); got != t0+ahead {
		t.Errorf("LatestOccurredUnixMs = %d, want %d", got, t0+ahead)
	}
	// Stored rows keep the looser rule, so that a row taken before the
	// bound still decodes and delivers.
	old := committed("r-1")
	old.OccurredUnixMs = t0 * 1000
	if err := old.Validate(); err != nil {
		t.Errorf("Validate refuses a stored far-future row: %v", err)
	}

	// The last accepted time is one the webhook writes in RFC 3339; the
	// first refused one is not.
	for ms, rfc := range map[int64]bool{outbox.MaxOccurredUnixMs: true, outbox.MaxOccurredUnixMs + 1: false} {
		o := committed("r-1")
		o.OccurredUnixMs = ms
		body, err := outbox.EncodeWebhook(&o, "acme", "https://relay.example.com")
		if err != nil {
			t.Fatal(err)
		}
		var w struct{ Timestamp string }
		if err := json.Unmarshal(body, &w); err != nil {
			t.Fatal(err)
		}
		_, err = time.Parse(time.RFC3339Nano, w.Timestamp)
		if (err == nil) != rfc || (rfc && w.Timestamp != "9999-12-31T23:59:59.999Z") {
			t.Errorf("occurred %d writes timestamp %q (RFC 3339: %v)", ms, w.Timestamp, err)
		}
	}
}
