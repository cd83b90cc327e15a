package outbox

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/zeebo/blake3"
)

// marshalWebhook is the reference appendWebhook must match byte for byte:
// json.Marshal of the documented shape, as the body was first written.
func marshalWebhook(t testing.TB, o *schema.Outcome, namespace, audience string) []byte {
	t.Helper()
	type data struct {
		ReservationID  string             `json:"reservation_id"`
		Namespace      string             `json:"namespace"`
		Audience       string             `json:"audience"`
		Repository     string             `json:"repository"`
		OccurredUnixMs int64              `json:"occurred_unix_ms"`
		Committed      *schema.Committed  `json:"committed,omitempty"`
		Aborted        *schema.Aborted    `json:"aborted,omitempty"`
		Expired        *schema.Expired    `json:"expired,omitempty"`
		ReadServed     *schema.ReadServed `json:"read_served,omitempty"`
	}
	body, err := json.Marshal(struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      data   `json:"data"`
	}{
		Type:      "outcome." + string(o.Kind()),
		Timestamp: time.UnixMilli(o.OccurredUnixMs).UTC().Format(time.RFC3339Nano),
		Data: data{
			ReservationID: o.ReservationID, Namespace: namespace, Audience: audience,
			Repository: o.Repository, OccurredUnixMs: o.OccurredUnixMs,
			Committed: o.Committed, Aborted: o.Aborted, Expired: o.Expired, ReadServed: o.ReadServed,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// trickyStrings are what encoding/json escapes, one of each kind, alone and
// among plain text.
var trickyStrings = []string{
	"", "plain", `a"b`, `a\b`, "<script>&amp;</script>", "tab\there", "nl\ncr\r", "\b\f", "\x00\x01\x1f\x7f",
	"line\u2028sep\u2029", "é ü 漢字 🙂", "bad\xffutf8", "\xc3", "\xe2\x80", "\xed\xa0\x80", "\u2027\u202a",
	"ends with <", "&", strings.Repeat("x<", 40),
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	check := func(s string) {
		t.Helper()
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString([]byte("prefix"), s); string(got) != "prefix"+string(want) {
			t.Errorf("appendJSONString(%q) = %s, want %s", s, got[len("prefix"):], want)
		}
	}
	for _, s := range trickyStrings {
		check(s)
	}
	for c := range 256 {
		check(string([]byte{byte(c)}))
		check("a" + string([]byte{byte(c)}) + "b")
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	})
}

// TestEncodeWebhookMatchesJSONMarshal: the hand-written body is the bytes
// json.Marshal wrote for every kind, with and without refs, and with the
// strings a valid outcome may hold that JSON escapes.
func TestEncodeWebhookMatchesJSONMarshal(t *testing.T) {
	t.Parallel()
	const hex64 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	ms := time.Date(2025, 11, 30, 0, 0, 0, 0, time.UTC).UnixMilli()
	base := func(rid string) schema.Outcome {
		return schema.Outcome{ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: ms}
	}
	var cases []schema.Outcome
	for i, refs := range [][]schema.Ref{nil, {}, {{Name: "refs/heads/main", New: hex64}}, {{Name: "refs/tags/<v1>&\"q\"", Deleted: true}, {Name: "refs/heads/é", New: hex64}}} {
		o := base("r-c")
		o.OccurredUnixMs += int64(i * 120)
		o.Committed = &schema.Committed{BytesStored: 1 << 63, NewToRepo: uint64(i), NewToStore: 18446744073709551615, Refs: refs}
		cases = append(cases, o)
	}
	for _, detail := range []string{"", "main moved", `quote " backslash \ <b>&</b>`, "line\u2028para\u2029 漢字"} {
		o := base("r-a")
		o.Aborted = &schema.Aborted{Reason: "ref_conflict", Detail: detail}
		cases = append(cases, o)
	}
	expired := base("r-e")
	expired.OccurredUnixMs = 1
	expired.Expired = &schema.Expired{}
	served := base("r-s")
	served.OccurredUnixMs += 999
	served.ReadServed = &schema.ReadServed{Object: hex64, BytesServed: 77}
	odd := base("r-o")
	odd.Repository = "a<b>&c\"d\\e/é"
	odd.Expired = &schema.Expired{}
	cases = append(cases, expired, served, odd)
	for _, o := range cases {
		for _, audience := range []string{"https://relay.example.com", "https://relay.example.com/a?b=<c>&d"} {
			got, err := EncodeWebhook(&o, "acme_1-x", audience)
			if err != nil {
				t.Fatalf("%s %s: %v", o.ReservationID, o.Kind(), err)
			}
			if want := marshalWebhook(t, &o, "acme_1-x", audience); string(got) != string(want) {
				t.Errorf("%s %s:\n got %s\nwant %s", o.ReservationID, o.Kind(), got, want)
			}
		}
	}
}

func FuzzEncodeWebhookMatchesJSONMarshal(f *testing.F) {
	f.Add("r-1", "acme/widgets", int64(1764460800123), uint8(0), "refs/heads/main", "ref_conflict", "main <moved> & \u2028", uint64(7), "acme")
	f.Add("r-2", "a\"b", int64(1), uint8(1), "", "x", "", uint64(0), "a")
	f.Add("r-3", "r", int64(253402300800000), uint8(2), "n", "r", "d", uint64(1), "n_s")
	f.Add("r-4", "r", int64(9), uint8(3), "n", "r", "d\xff", uint64(1<<63), "n-s")
	f.Fuzz(func(t *testing.T, rid, repo string, ms int64, kind uint8, name, reason, detail string, n uint64, ns string) {
		o := schema.Outcome{ReservationID: rid, Repository: repo, OccurredUnixMs: ms}
		switch kind % 4 {
		case 0:
			o.Committed = &schema.Committed{BytesStored: n, NewToRepo: n / 2, NewToStore: n / 3}
			if name != "" {
				o.Committed.Refs = []schema.Ref{{Name: name, New: strings.Repeat("b", 64)}, {Name: name + "/x", Deleted: true}}
			}
		case 1:
			o.Aborted = &schema.Aborted{Reason: reason, Detail: detail}
		case 2:
			o.Expired = &schema.Expired{}
		case 3:
			o.ReadServed = &schema.ReadServed{Object: strings.Repeat("c", 64), BytesServed: n}
		}
		audience := "https://" + name
		got, err := EncodeWebhook(&o, ns, audience)
		if err != nil {
			return // refused input: TestEncodeWebhookRefusesInvalidInput
		}
		if !utf8.Valid(got) {
			t.Fatalf("body is not UTF-8: %q", got)
		}
		if want := marshalWebhook(t, &o, ns, audience); string(got) != string(want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}

// TestMessageIDIsBLAKE3OfItsFields: the pooled hasher gives blake3.Sum256
// of the fields, hasher after hasher, whatever the lengths.
func TestMessageIDIsBLAKE3OfItsFields(t *testing.T) {
	t.Parallel()
	for n := range 300 {
		rid := strings.Repeat("r", n)
		b := binary.AppendUvarint(nil, uint64(len(messageIDDomain)))
		b = append(b, messageIDDomain...)
		b = append(binary.AppendUvarint(b, 4), "acme"...)
		b = append(binary.AppendUvarint(b, 7), "billing"...)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
		b = append(binary.AppendUvarint(b, uint64(n)), rid...)
		sum := blake3.Sum256(b)
		if got, want := MessageID("acme", "billing", uint64(n), rid), "msg_"+hex.EncodeToString(sum[:16]); got != want {
			t.Fatalf("rid of %d bytes: %s, want %s", n, got, want)
		}
	}
}
