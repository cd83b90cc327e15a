package httpapi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// producerBodies are outcomes bodies as producers send them: each kind,
// a list, compact and indented, with non-ASCII text.
func producerBodies(tb testing.TB) [][]byte {
	deleted := outboxtest.Committed("r-5")
	deleted.Committed.Refs = append(deleted.Committed.Refs, schema.Ref{Name: "refs/tags/v1", Deleted: true})
	noRefs := outboxtest.Committed("r-7")
	noRefs.Committed.Refs = nil
	unicode := outboxtest.Aborted("r-8")
	unicode.Repository, unicode.Aborted.Detail = "acme/wïdgets", "zu groß — 🚫"
	all := []schema.Outcome{
		outboxtest.Committed("r-1"),
		outboxtest.Aborted("r-2"),
		{ReservationID: "r-3", Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0, Expired: &schema.Expired{}},
		{ReservationID: "r-4", Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0,
			ReadServed: &schema.ReadServed{Object: outboxtest.HexA, BytesServed: 1<<64 - 1}},
		deleted, noRefs, unicode,
	}
	var bodies [][]byte
	for _, o := range all {
		bodies = append(bodies, mustJSON(tb, o))
	}
	bodies = append(bodies, mustJSON(tb, outcomeList{all}))
	indented, err := json.MarshalIndent(outcomeList{all}, " \r\n", "\t")
	if err != nil {
		tb.Fatal(err)
	}
	return append(bodies, indented,
		[]byte(`{"repository":"a/b","committed":{"refs":[],"bytes_stored":0},"reservation_id":"r","occurred_unix_ms":1}`),
		[]byte(` {"outcomes":[]} `), []byte(`{}`))
}

// generalRead is how the general path reads body: its problem, or what it
// decoded and the count of top-level keys.
func generalRead(body []byte) (outcomesBody, int, *Problem) {
	var v outcomesBody
	top, p := decodeStrictTop(body, &v)
	return v, top, p
}

// The fast path reads what producers send, and reads it as the general
// path does.
func TestTheOutcomesFastPathReadsProducersBodiesAsTheGeneralPath(t *testing.T) {
	for _, body := range producerBodies(t) {
		var fast outcomesBody
		top, ok := decodeOutcomesBody(body, &fast)
		if !ok {
			t.Fatalf("declined %s", body)
		}
		want, wantTop, p := generalRead(body)
		if p != nil || top != wantTop || !reflect.DeepEqual(fast, want) {
			t.Fatalf("%s: fast read %+v (%d keys), general %+v (%d keys, %v)", body, fast, top, want, wantTop, p)
		}
	}
}

// Everything the fast path does not read exactly as the general path
// would, valid or not, it leaves to it.
func TestTheOutcomesFastPathDeclinesWhatItCannotReadExactly(t *testing.T) {
	base := string(mustJSON(t, outboxtest.Committed("r-1")))
	withTail := func(member string) string { return strings.TrimSuffix(base, "}") + "," + member + "}" }
	for _, body := range []string{
		"", " ", "[]", "null", `"x"`, "{", `{"reservation_id"}`, `{"reservation_id":}`, `{,}`,
		base + " x", base + "{}", base + ",",
		strings.Replace(base, `"r-1"`, `"r\u002d1"`, 1),
		strings.Replace(base, `"r-1"`, `"r\n1"`, 1),
		strings.Replace(base, `"r-1"`, "\"r\x011\"", 1),
		strings.Replace(base, `"r-1"`, "\"r\xff1\"", 1),
		strings.Replace(base, `"r-1"`, "\"r\xed\xa0\x80\"", 1),
		strings.Replace(base, `"reservation_id"`, `"Reservation_id"`, 1),
		strings.Replace(base, `"reservation_id"`, `"reservation_\u0069d"`, 1),
		withTail(`"reservation_id":"r-2"`),
		withTail(`"committed":{}`),
		withTail(`"outcomes":[]`) + `,"outcomes":[]}`,
		withTail(`"event":{}`),
		withTail(`"unknown":1`),
		withTail(`"expired":{"x":1}`),
		withTail(`"expired":null`),
		withTail(`"expired":[]`),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":-`, 1),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":0`, 1),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":1.`, 1),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":1e`, 1),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":18446744073709551616`, 1),
		strings.Replace(base, `"bytes_stored":`, `"bytes_stored":"`, 1),
		strings.Replace(base, `"occurred_unix_ms":`, `"occurred_unix_ms":-`, 1),
		strings.Replace(base, `"occurred_unix_ms":`, `"occurred_unix_ms":9223372036854775808`, 1),
		`{"occurred_unix_ms":-0}`,
		`{"occurred_unix_ms":1E3}`,
		strings.Replace(base, `"refs":[`, `"refs":[{"deleted":truex},`, 1),
		strings.Replace(base, `"refs":[`, `"refs":[{"deleted":null},`, 1),
		strings.Replace(base, `"refs":[`, `"refs":[{"name":"a","name":"b"},`, 1),
		strings.Replace(base, `"refs":[`, `"refs":[1,`, 1),
		strings.Replace(base, `"refs":[`, `"refs":[,`, 1),
		`{"outcomes":[{},]}`,
		`{"outcomes":{}}`,
		`{"outcomes":[{"expired":{}}`,
	} {
		var v outcomesBody
		if _, ok := decodeOutcomesBody([]byte(body), &v); ok {
			t.Errorf("took %q", body)
		}
	}
}

// What the fast path takes, the general path takes and reads alike.
func FuzzOutcomesBodyFastPath(f *testing.F) {
	for _, body := range producerBodies(f) {
		f.Add(body)
	}
	// The general path's own seeds hold bodies it refuses.
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzDecodeOutcomesBody/*")
	for _, path := range seeds {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		_, arg, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		quoted, found := strings.CutPrefix(arg, "[]byte(")
		body, err := strconv.Unquote(strings.TrimSuffix(quoted, ")"))
		if !found || err != nil {
			f.Fatalf("seed %s: %q", path, arg)
		}
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast outcomesBody
		top, ok := decodeOutcomesBody(body, &fast)
		if !ok {
			return
		}
		want, wantTop, p := generalRead(body)
		if p != nil {
			t.Fatalf("fast path took %q, general path refuses it: %s", body, p.Detail)
		}
		if top != wantTop || !reflect.DeepEqual(fast, want) {
			t.Fatalf("%q: fast read %+v (%d keys), general %+v (%d keys)", body, fast, top, want, wantTop)
		}
	})
}

// go test -run '^$' -bench OutcomesBody ./internal/httpapi
func BenchmarkOutcomesBody(b *testing.B) {
	o := outboxtest.Aborted("r-1")
	o.Aborted.Detail = strings.Repeat("d", 256)
	body := mustJSON(b, o)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var v outcomesBody
			if _, ok := decodeOutcomesBody(body, &v); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		for b.Loop() {
			if _, _, p := generalRead(body); p != nil {
				b.Fatal(p.Detail)
			}
		}
	})
}
