package schema_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

func TestOutcomeValidateExplainsEachRule(t *testing.T) {
	mod := func(f func(o *schema.Outcome)) schema.Outcome {
		o := committed("r-1")
		f(&o)
		return o
	}
	cases := []struct {
		name string
		o    schema.Outcome
		want string
	}{
		{"rid", mod(func(o *schema.Outcome) { o.ReservationID = "a/b" }), "reservation_id must be"},
		{"repo empty", mod(func(o *schema.Outcome) { o.Repository = "" }), "repository must not be empty"},
		{"repo long", mod(func(o *schema.Outcome) { o.Repository = strings.Repeat("r", 257) }), "repository must be at most 256 bytes"},
		{"repo control", mod(func(o *schema.Outcome) { o.Repository = "a\nb" }), "repository must be printable"},
		{"repo utf8", mod(func(o *schema.Outcome) { o.Repository = "a\xff" }), "repository must be printable"},
		{"occurred", mod(func(o *schema.Outcome) { o.OccurredUnixMs = 0 }), "occurred_unix_ms must be"},
		{"none", mod(func(o *schema.Outcome) { o.Committed = nil }), "exactly one of"},
		{"two", mod(func(o *schema.Outcome) { o.Expired = &schema.Expired{} }), "exactly one of"},
		{"refs", mod(func(o *schema.Outcome) { o.Committed.Refs = make([]schema.Ref, 65) }), "at most 64 refs"},
		{"ref name", mod(func(o *schema.Outcome) { o.Committed.Refs[0].Name = "" }), "refs[0].name must not be empty"},
		{"ref new", mod(func(o *schema.Outcome) { o.Committed.Refs[0].New = strings.ToUpper(hexA) }), "refs[0].new must be 64 lowercase hex"},
		{"ref deleted", mod(func(o *schema.Outcome) { o.Committed.Refs[0].Deleted = true }), "refs[0].new must be empty when deleted"},
		{"reason", mod(func(o *schema.Outcome) { o.Committed = nil; o.Aborted = &schema.Aborted{Reason: "Bad Reason"} }), "aborted.reason must be"},
		{"detail", mod(func(o *schema.Outcome) {
			o.Committed = nil
			o.Aborted = &schema.Aborted{Reason: "x", Detail: strings.Repeat("d", 513)}
		}), "aborted.detail must be at most 512 bytes"},
		{"object", mod(func(o *schema.Outcome) { o.Committed = nil; o.ReadServed = &schema.ReadServed{Object: "abc"} }), "read_served.object must be 64 lowercase hex"},
	}
	for _, c := range cases {
		err := c.o.Validate()
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	for _, ok := range []schema.Outcome{
		committed("r"), aborted("r"),
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Expired: &schema.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &schema.ReadServed{Object: hexA, BytesServed: 9}},
		mod(func(o *schema.Outcome) { o.Committed.Refs = []schema.Ref{{Name: "refs/tags/old", Deleted: true}} }),
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
	var o schema.Outcome
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
		o    schema.Outcome
		want string
	}{
		{schema.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, Expired: &schema.Expired{}}, `"expired":{}`},
		{schema.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, Committed: &schema.Committed{}}, `"refs":[]`},
		{schema.Outcome{ReservationID: "r", Repository: "x", OccurredUnixMs: 1, ReadServed: &schema.ReadServed{Object: hexA, BytesServed: 3}}, `"read_served":{"object":"` + hexA + `","bytes_served":3}`},
		{aborted("r"), `"aborted":{"reason":"ref_conflict","detail":"main moved"}`},
	} {
		b, _ := json.Marshal(&c.o)
		if !strings.Contains(string(b), c.want) {
			t.Errorf("%s lacks %s", b, c.want)
		}
	}
	if k := committed("r").Kind(); k != schema.KindCommitted {
		t.Errorf("kind %q", k)
	}
}

func TestRecordRoundTripsEveryKind(t *testing.T) {
	many := committed("r")
	many.Committed.Refs = append(many.Committed.Refs, schema.Ref{Name: "refs/tags/v1", Deleted: true})
	many.Committed.BytesStored = 1 << 63
	for _, o := range []schema.Outcome{
		many, aborted("r"),
		{ReservationID: "r", Repository: "ü repo", OccurredUnixMs: 1<<63 - 1, Expired: &schema.Expired{}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, ReadServed: &schema.ReadServed{Object: hexA, BytesServed: 300}},
		{ReservationID: "r", Repository: "r", OccurredUnixMs: 1, Committed: &schema.Committed{}},
	} {
		v := mustRecord(t, o)
		got, err := schema.DecodeRecord("r", v)
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
		o.Committed.Refs = append(o.Committed.Refs, schema.Ref{Name: "refs/heads/feature-" + string(rune('a'+i)), New: hexA})
	}
	for _, o := range []schema.Outcome{o, committed("r-7f3a"), aborted("r-7f3a")} {
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
	da, err := schema.Digest(&a)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := schema.Digest(&b)
	other := committed("other")
	dc, _ := schema.Digest(&other)
	if da == db {
		t.Error("different outcomes share a digest")
	}
	if da != dc {
		t.Error("the digest depends on the reservation id, which the seen row's key already names")
	}
}
