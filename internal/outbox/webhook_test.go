package outbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

const (
	relayAudience = "https://relay.example.com"
	relayNS       = "acme"
)

func TestEncodeWebhookWritesTheDesignExample(t *testing.T) {
	t.Parallel()
	o := committed("r-7f3a")
	got, err := outbox.EncodeWebhook(&o, relayNS, relayAudience)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"outcome.committed","timestamp":"2025-11-30T00:00:00Z",` +
		`"data":{"reservation_id":"r-7f3a","namespace":"acme","audience":"https://relay.example.com",` +
		`"repository":"acme/widgets","occurred_unix_ms":1764460800000,` +
		`"committed":{"bytes_stored":1024,"new_to_repo":512,"new_to_store":256,` +
		`"refs":[{"name":"refs/heads/main","new":"` + hexA + `","deleted":false}]}}}`
	if string(got) != want {
		t.Fatalf("body\n got %s\nwant %s", got, want)
	}
	again, err := outbox.EncodeWebhook(&o, relayNS, relayAudience)
	if err != nil || !bytes.Equal(again, got) {
		t.Fatalf("a second encoding differs: %s (%v)", again, err)
	}
}

func TestEncodeWebhookTimestampIsUTCWithMilliseconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ms   int64
		want string
	}{
		{t0, "2025-11-30T00:00:00Z"},
		{t0 + 123, "2025-11-30T00:00:00.123Z"},
		{t0 + 120, "2025-11-30T00:00:00.12Z"},
		{t0 + 1, "2025-11-30T00:00:00.001Z"},
		{1, "1970-01-01T00:00:00.001Z"},
	} {
		o := committed("r-1")
		o.OccurredUnixMs = c.ms
		body, err := outbox.EncodeWebhook(&o, relayNS, relayAudience)
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Timestamp string }
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatal(err)
		}
		if m.Timestamp != c.want {
			t.Errorf("occurred %d: timestamp %q, want %q", c.ms, m.Timestamp, c.want)
		}
	}
}

func TestEncodeWebhookRoundTripsEveryKind(t *testing.T) {
	t.Parallel()
	expired := schema.Outcome{ReservationID: "r-3", Repository: "acme/widgets", OccurredUnixMs: t0, Expired: &schema.Expired{}}
	served := schema.Outcome{ReservationID: "r-4", Repository: "acme/widgets", OccurredUnixMs: t0,
		ReadServed: &schema.ReadServed{Object: hexA, BytesServed: 77}}
	noRefs := committed("r-5")
	noRefs.Committed.Refs = nil
	cases := []struct {
		o        schema.Outcome
		kindJSON string
	}{
		{committed("r-1"), `{"bytes_stored":1024,"new_to_repo":512,"new_to_store":256,"refs":[{"name":"refs/heads/main","new":"` + hexA + `","deleted":false}]}`},
		{aborted("r-2"), `{"reason":"ref_conflict","detail":"main moved"}`},
		{expired, `{}`},
		{served, `{"object":"` + hexA + `","bytes_served":77}`},
		{noRefs, `{"bytes_stored":1024,"new_to_repo":512,"new_to_store":256,"refs":[]}`},
	}
	for _, c := range cases {
		kind := string(c.o.Kind())
		body, err := outbox.EncodeWebhook(&c.o, relayNS, relayAudience)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: body is not JSON: %v", kind, err)
		}
		if got["type"] != "outcome."+kind {
			t.Errorf("%s: type %v", kind, got["type"])
		}
		if got["timestamp"] != "2025-11-30T00:00:00Z" {
			t.Errorf("%s: timestamp %v", kind, got["timestamp"])
		}
		if len(got) != 3 {
			t.Errorf("%s: top level has %d keys, want type, timestamp and data", kind, len(got))
		}

		// data is the outcome's own JSON plus its namespace and relay's
		// audience, nothing else.
		data, _ := got["data"].(map[string]any)
		if data["audience"] != relayAudience || data["namespace"] != relayNS {
			t.Errorf("%s: data.audience %v, data.namespace %v", kind, data["audience"], data["namespace"])
		}
		delete(data, "audience")
		delete(data, "namespace")
		own, err := json.Marshal(c.o)
		if err != nil {
			t.Fatal(err)
		}
		if want := decodeMap(t, own); !reflect.DeepEqual(data, want) {
			t.Errorf("%s: data less audience and namespace\n got %v\nwant %v", kind, data, want)
		}
		if want := decodeMap(t, []byte(c.kindJSON)); !reflect.DeepEqual(data[kind], any(want)) {
			t.Errorf("%s: data.%s = %v, want %s", kind, kind, data[kind], c.kindJSON)
		}

		wantKeys := []string{"reservation_id", "namespace", "audience", "repository", "occurred_unix_ms", kind}
		if keys := dataKeys(t, body); !reflect.DeepEqual(keys, wantKeys) {
			t.Errorf("%s: data keys in order %v, want %v", kind, keys, wantKeys)
		}
	}
}

func TestEncodeWebhookRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	twoKinds := committed("r-1")
	twoKinds.Expired = &schema.Expired{}
	noRepo := committed("r-1")
	noRepo.Repository = ""
	badRID := committed("r 1")
	valid := committed("r-1")
	for _, c := range []struct {
		name         string
		o            schema.Outcome
		ns, audience string
	}{
		{"two kinds", twoKinds, relayNS, relayAudience},
		{"no repository", noRepo, relayNS, relayAudience},
		{"bad reservation id", badRID, relayNS, relayAudience},
		{"no kind", schema.Outcome{ReservationID: "r-1", Repository: "acme/widgets", OccurredUnixMs: t0}, relayNS, relayAudience},
		{"empty audience", valid, relayNS, ""},
		{"empty namespace", valid, "", relayAudience},
		{"namespace in capitals", valid, "Acme", relayAudience},
		{"namespace with a quote", valid, `acme","namespace":"victim`, relayAudience},
		{"namespace too long", valid, strings.Repeat("a", 64), relayAudience},
	} {
		body, err := outbox.EncodeWebhook(&c.o, c.ns, c.audience)
		if !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", c.name, err)
		}
		if body != nil {
			t.Errorf("%s: body %s returned with the error", c.name, body)
		}
	}
}

var messageIDForm = regexp.MustCompile(`^msg_[0-9a-f]{32}$`)

func TestMessageIDIsStableAndPinned(t *testing.T) {
	t.Parallel()
	id := outbox.MessageID("acme", "billing", 42, "r-7f3a")
	if !messageIDForm.MatchString(id) {
		t.Fatalf("MessageID = %q, want msg_ and 32 lowercase hex", id)
	}
	if again := outbox.MessageID("acme", "billing", 42, "r-7f3a"); again != id {
		t.Fatalf("MessageID not stable: %q then %q", id, again)
	}
	// Pinned: a change would give deliveries in flight across an upgrade a
	// new webhook-id, and receivers would take their retries as new messages.
	// It is the BLAKE3 of 0x13 "relay:message-id:v1" 0x04 "acme" 0x07
	// "billing" 00 00 00 00 00 00 00 2a 0x06 "r-7f3a", checked by hand.
	const pinned = "msg_ac0f9556287837b19e4fb9e7521407dd"
	if id != pinned {
		t.Fatalf("MessageID = %q, want the pinned %q", id, pinned)
	}
}

func TestMessageIDDiffersWhenAnyInputDiffers(t *testing.T) {
	t.Parallel()
	type in struct {
		ns, ep string
		seq    uint64
		rid    string
	}
	inputs := []in{
		{"acme", "billing", 1, "r-1"},
		{"acme2", "billing", 1, "r-1"},
		{"acme", "billing2", 1, "r-1"},
		{"acme", "billing", 2, "r-1"},
		{"acme", "billing", 1, "r-2"},
		// The same characters split differently between fields.
		{"a", "b/c", 1, "r"},
		{"a/b", "c", 1, "r"},
		{"ab", "c", 1, "r"},
		{"a", "bc", 1, "r"},
		{"", "abc", 1, "r"},
		{"abc", "", 1, "r"},
		{"a", "b", 1, "cr"},
		{"a", "bc", 1, ""},
		// seq bytes that could pass for part of a neighbouring field.
		{"a", "b", 0x63, "r"},
		{"a", "b", 0x63 << 56, "r"},
		{"a", "b", 1 << 8, "r"},
		{"a", "b", 0, "r"},
		{"a", "b", ^uint64(0), "r"},
	}
	seen := make(map[string]in, len(inputs))
	for _, x := range inputs {
		id := outbox.MessageID(x.ns, x.ep, x.seq, x.rid)
		if !messageIDForm.MatchString(id) {
			t.Errorf("MessageID%v = %q, want msg_ and 32 lowercase hex", x, id)
		}
		if prev, ok := seen[id]; ok {
			t.Errorf("MessageID%v = MessageID%v = %s", x, prev, id)
		}
		seen[id] = x
	}
}

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

// dataKeys lists the keys of the body's data object in the order written.
func dataKeys(t *testing.T, body []byte) []string {
	t.Helper()
	var top struct{ Data json.RawMessage }
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(top.Data))
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}
