package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// The request decoding of POST .../outcomes and PUT .../endpoints/{id},
// fuzzed through the handlers that do it: each reads its body strictly,
// applies its own rules and validates before it calls the outbox. The outbox
// behind them keeps what it is asked to store, so the properties are about
// what a client's bytes become:
//
//   - what is stored is valid, and is what encoding/json reads the body as
//     without the strict checks: two readers of one request agree;
//   - it re-encodes to a body the API takes again as an equal value;
//   - no string was rewritten: an accepted body is valid UTF-8, and what is
//     stored holds U+FFFD only where the body spelled one;
//   - a refused body stores nothing, and its problem repeats no payload value.
//
// Seeds beyond those added here are in testdata/fuzz/<FuzzName>/.

const (
	fuzzNamespace  = "acme"
	fuzzEndpointID = "billing"
	// minEcho is the shortest payload value a problem must not repeat;
	// shorter ones occur in any text by chance.
	minEcho = 6
)

// The JSON field names of the two bodies: an accepted body uses no other.
var (
	outcomeFields = []string{
		"reservation_id", "repository", "occurred_unix_ms", "committed", "aborted", "expired", "read_served",
		"bytes_stored", "new_to_repo", "new_to_store", "refs", "name", "new", "deleted", "reason", "detail",
		"object", "bytes_served", "outcomes",
	}
	endpointFields = []string{"url", "scheme", "kinds", "enabled", "max_in_flight", "secret"}
)

// echoVocabulary is what a problem may say that a body may also hold as a
// value: field names, enumerations and the words of type errors.
var echoVocabulary = strings.Join(slices.Concat(outcomeFields, endpointFields, []string{
	"secrets disabled_reason created_ms updated_ms",
	`"mkit-hook-v2" "standard-webhooks" "whsec_"`,
	"must be a JSON string boolean array object number of the right range",
}), " ")

// outcomeList is the list form of an outcomes body.
type outcomeList struct {
	Outcomes []schema.Outcome `json:"outcomes"`
}

// endpointRequest is an endpoint body that leaves out what is unset.
type endpointRequest struct {
	URL         string        `json:"url"`
	Scheme      schema.Scheme `json:"scheme,omitempty"`
	Kinds       []schema.Kind `json:"kinds,omitempty"`
	Enabled     *bool         `json:"enabled,omitempty"`
	MaxInFlight *int          `json:"max_in_flight,omitempty"`
	Secret      schema.Secret `json:"secret,omitempty"`
}

func FuzzDecodeOutcomesBody(f *testing.F) {
	deleted := outboxtest.Committed("r-5")
	deleted.Committed.Refs = append(deleted.Committed.Refs, schema.Ref{Name: "refs/tags/v1", Deleted: true})
	all := []schema.Outcome{
		outboxtest.Committed("r-1"),
		outboxtest.Aborted("r-2"),
		{ReservationID: "r-3", Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0, Expired: &schema.Expired{}},
		{ReservationID: "r-4", Repository: "acme/widgets", OccurredUnixMs: outboxtest.T0,
			ReadServed: &schema.ReadServed{Object: outboxtest.HexA, BytesServed: 42}},
		deleted,
	}
	for _, o := range all {
		f.Add(mustJSON(f, o))
	}
	f.Add(mustJSON(f, outcomeList{all}))
	badHex := outboxtest.Committed("r-6")
	badHex.Committed.Refs[0].New = strings.ToUpper(outboxtest.HexA)
	f.Add(mustJSON(f, outcomeList{[]schema.Outcome{all[1], badHex}}))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, got := postOutcomesBody(t, body)
		if rec.Code != http.StatusAccepted {
			if got != nil {
				t.Fatalf("answered %d, yet stored %d outcomes", rec.Code, len(got))
			}
			checkRefusal(t, body, rec, SlugInvalidRequest, SlugInvalidOutcome)
			return
		}
		checkPlain(t, body, outcomeFields)
		checkNotRewritten(t, body, mustJSON(t, got))
		if len(got) == 0 || len(got) > outbox.MaxAppendOutcomes {
			t.Fatalf("accepted %d outcomes in one request", len(got))
		}
		for i := range got {
			if err := got[i].Validate(); err != nil {
				t.Fatalf("accepted outcome %d is invalid: %v", i, err)
			}
		}
		var answer outcomesAnswer
		if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer.Results) != len(got) {
			t.Fatalf("answer %s for %d outcomes: %v", rec.Body.Bytes(), len(got), err)
		}
		for i, res := range answer.Results {
			if res.ReservationID != got[i].ReservationID || res.Status != string(outbox.Accepted) {
				t.Fatalf("result %d is %+v, outcome %q was accepted", i, res, got[i].ReservationID)
			}
		}

		var lax struct {
			schema.Outcome
			Outcomes []schema.Outcome `json:"outcomes"`
		}
		if err := json.Unmarshal(body, &lax); err != nil {
			t.Fatalf("encoding/json refuses a body the API accepted: %v", err)
		}
		want := lax.Outcomes
		if want == nil {
			want = []schema.Outcome{lax.Outcome}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the API read %+v, encoding/json reads %+v", got, want)
		}

		again := [][]byte{mustJSON(t, outcomeList{got})}
		if len(got) == 1 {
			again = append(again, mustJSON(t, got[0]))
		}
		for _, b := range again {
			rec, regot := postOutcomesBody(t, b)
			if rec.Code != http.StatusAccepted {
				t.Fatalf("re-encoded %s refused: %d %s", b, rec.Code, rec.Body.Bytes())
			}
			if !reflect.DeepEqual(withoutEmptyRefs(regot), withoutEmptyRefs(got)) {
				t.Fatalf("re-encoded %s reads %+v, was %+v", b, regot, got)
			}
		}
	})
}

func FuzzDecodeEndpointBody(f *testing.F) {
	yes, no, four := true, false, 4
	for _, e := range []endpointRequest{
		{URL: "https://hooks.acme.example/relay"},
		{URL: "https://billing.acme.example/hooks/relay", Scheme: schema.SchemeStandardWebhooks,
			Kinds: []schema.Kind{schema.KindCommitted, schema.KindAborted}, Enabled: &yes},
		{URL: "https://hooks.acme.example:8443/r?x=1", Scheme: schema.SchemeStandardWebhooks,
			Kinds: schema.Kinds(), Enabled: &no, MaxInFlight: &four, Secret: schema.Secret("whsec_" + strings.Repeat("QUJD", 8))},
		{URL: "http://hooks.acme.example/relay", Scheme: schema.SchemeMkitHookV2, Kinds: []schema.Kind{schema.KindReadServed}},
	} {
		f.Add(mustJSON(f, e))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, st := putEndpointBody(t, body)
		if rec.Code != http.StatusCreated {
			if len(st.batches) != 0 {
				t.Fatalf("answered %d, yet applied %d batches", rec.Code, len(st.batches))
			}
			checkRefusal(t, body, rec, SlugInvalidRequest, SlugInvalidEndpoint, SlugUnsafeURL)
			return
		}
		checkPlain(t, body, endpointFields)
		got := storedEndpoint(t, st)
		checkNotRewritten(t, body, mustJSON(t, got))
		if err := got.Validate(); err != nil {
			t.Fatalf("stored endpoint is invalid: %v", err)
		}

		var lax endpointBody
		if err := json.Unmarshal(body, &lax); err != nil {
			t.Fatalf("encoding/json refuses a body the API accepted: %v", err)
		}
		want := schema.Endpoint{URL: lax.URL, Scheme: lax.Scheme, Kinds: lax.Kinds, Enabled: true,
			CreatedMs: outboxtest.T0, UpdatedMs: outboxtest.T0}
		if len(want.Kinds) == 0 {
			want.Kinds = nil // the row does not tell [] from none
		}
		if lax.Enabled != nil {
			want.Enabled = *lax.Enabled
		}
		if lax.MaxInFlight != nil {
			want.MaxInFlight = *lax.MaxInFlight
		}
		want = want.WithDefaults()
		if !want.Enabled {
			want.DisabledMs = outboxtest.T0 // disabled since its creation
		}
		generated := lax.Secret == "" && want.Scheme == schema.SchemeStandardWebhooks
		switch {
		case lax.Secret != "":
			want.Secrets = []schema.Secret{lax.Secret}
			if bytes.Contains(rec.Body.Bytes(), []byte(lax.Secret)) {
				t.Fatalf("the answer shows the secret the client sent: %s", rec.Body.Bytes())
			}
		case generated:
			var view endpointView
			if err := json.Unmarshal(rec.Body.Bytes(), &view); err != nil || len(got.Secrets) != 1 || view.Secret != string(got.Secrets[0]) {
				t.Fatalf("generated secret not stored alone and shown once: %d stored, answer %v", len(got.Secrets), err)
			}
			want.Secrets = got.Secrets
		}
		// The first sequence number after the creation is relay's, not
		// the body's.
		if got.CreatedSeq == 0 {
			t.Fatalf("the API stored %+v without the sequence of its creation", got)
		}
		want.CreatedSeq = got.CreatedSeq
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the API stored %+v, the body asks for %+v", got, want)
		}

		enabled, inFlight := got.Enabled, got.MaxInFlight
		again := mustJSON(t, endpointRequest{URL: got.URL, Scheme: got.Scheme, Kinds: got.Kinds,
			Enabled: &enabled, MaxInFlight: &inFlight, Secret: lax.Secret})
		rec, st = putEndpointBody(t, again)
		if rec.Code != http.StatusCreated {
			t.Fatalf("re-encoded %s refused: %d %s", again, rec.Code, rec.Body.Bytes())
		}
		regot := storedEndpoint(t, st)
		if generated && len(regot.Secrets) == 1 {
			regot.Secrets = got.Secrets
		}
		if !reflect.DeepEqual(regot, got) {
			t.Fatalf("re-encoded %s stores %+v, was %+v", again, regot, got)
		}
	})
}

// keepingAppender accepts every outcome and keeps those it was given.
type keepingAppender struct {
	calls int
	got   []schema.Outcome
}

func (k *keepingAppender) Append(_ context.Context, _ store.Partition, outcomes []schema.Outcome) ([]outbox.Status, error) {
	k.calls++
	k.got = slices.Clone(outcomes)
	st := make([]outbox.Status, len(outcomes))
	for i := range st {
		st[i].Code = outbox.Accepted
	}
	return st, nil
}

// blankStore is a namespace without rows: reads find nothing, and every
// valid batch commits and is kept.
type blankStore struct {
	batches []store.Batch
}

func (*blankStore) Get(context.Context, store.Partition, store.Key) (store.Value, bool, error) {
	return nil, false, nil
}

func (*blankStore) GetMany(_ context.Context, _ store.Partition, keys []store.Key) ([]store.Row, error) {
	return make([]store.Row, len(keys)), nil
}

func (*blankStore) Scan(context.Context, store.Partition, store.Key, store.Key, *store.Cursor, int) (store.Page, error) {
	return store.Page{}, nil
}

func (*blankStore) ScanUnordered(context.Context, store.Partition, *store.Cursor, int) (store.Page, error) {
	return store.Page{}, nil
}

func (s *blankStore) Apply(_ context.Context, _ store.Partition, b store.Batch) (store.Result, error) {
	if err := b.Validate(); err != nil {
		return store.Result{}, err
	}
	s.batches = append(s.batches, b)
	return store.Result{Committed: true}, nil
}

// postOutcomesBody posts body as JSON to the outcomes handler, and returns
// the answer and the outcomes it stored, nil when it stored none.
func postOutcomesBody(t *testing.T, body []byte) (*httptest.ResponseRecorder, []schema.Outcome) {
	t.Helper()
	app := &keepingAppender{}
	a := &api{Config: Config{Appender: app, Clock: clock.NewManual(outboxtest.T0)}, log: slog.New(slog.DiscardHandler)}
	rec := serveJSON(a.postOutcomes, http.MethodPost, "/v1/namespaces/"+fuzzNamespace+"/outcomes", body, "ns", fuzzNamespace)
	if app.calls > 1 {
		t.Fatalf("one request appended %d times", app.calls)
	}
	return rec, app.got
}

// putEndpointBody puts body as JSON to the endpoint handler of a namespace
// without endpoints, and returns the answer and the store's batches.
func putEndpointBody(t *testing.T, body []byte) (*httptest.ResponseRecorder, *blankStore) {
	t.Helper()
	ch, err := outbound.NewChannel(outbound.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := &blankStore{}
	a := &api{Config: Config{
		Admin:    &outbox.Admin{Store: st, Clock: clock.NewManual(outboxtest.T0)},
		CheckURL: ch.CheckURL,
	}, log: slog.New(slog.DiscardHandler)}
	target := "/v1/namespaces/" + fuzzNamespace + "/endpoints/" + fuzzEndpointID
	return serveJSON(a.putEndpoint, http.MethodPut, target, body, "ns", fuzzNamespace, "id", fuzzEndpointID), st
}

// serveJSON calls h as chi would route to it, with params as its URL
// parameters (name, value, ...).
func serveJSON(h http.HandlerFunc, method, target string, body []byte, params ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rctx := chi.NewRouteContext()
	for i := 0; i+1 < len(params); i += 2 {
		rctx.URLParams.Add(params[i], params[i+1])
	}
	req = req.WithContext(context.WithValue(req.Context(), chi.RouteCtxKey, rctx))
	rec := httptest.NewRecorder()
	h(rec, req)
	return rec
}

// storedEndpoint is the endpoint row of the one batch st applied, as
// schema.DecodeEndpoint reads it: valid and canonical, or the test fails.
func storedEndpoint(t *testing.T, st *blankStore) schema.Endpoint {
	t.Helper()
	if len(st.batches) != 1 {
		t.Fatalf("one request applied %d batches", len(st.batches))
	}
	key, err := schema.EndpointKey(fuzzEndpointID)
	if err != nil {
		t.Fatal(err)
	}
	var rows []store.Value
	for _, w := range st.batches[0].Writes {
		if w.Kind == store.Put && w.Key == key {
			rows = append(rows, w.Value)
		}
	}
	if len(rows) != 1 {
		t.Fatalf("the batch puts the endpoint row %d times", len(rows))
	}
	e, err := schema.DecodeEndpoint(rows[0])
	if err != nil {
		t.Fatalf("the endpoint row written does not decode: %v", err)
	}
	return e
}

// checkRefusal fails unless rec is a problem of one of slugs, with the
// slug's status, that repeats no payload value of body.
func checkRefusal(t *testing.T, body []byte, rec *httptest.ResponseRecorder, slugs ...Slug) {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != ContentTypeProblem {
		t.Fatalf("refusal %d has Content-Type %q: %s", rec.Code, ct, rec.Body.Bytes())
	}
	var prob map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &prob); err != nil {
		t.Fatalf("problem does not decode: %v", err)
	}
	typ, _ := prob["type"].(string)
	slug := Slug(strings.TrimPrefix(typ, ProblemTypePrefix))
	if !slices.Contains(slugs, slug) || rec.Code != slug.Status() {
		t.Fatalf("refused with %d %q, want one of %v: %s", rec.Code, typ, slugs, rec.Body.Bytes())
	}
	delete(prob, "type")
	delete(prob, "title")
	said := appendStrings(nil, prob)
	d := readDoc(body)
	for _, v := range d.values {
		if len(v) < minEcho || strings.Contains(echoVocabulary, v) ||
			slices.ContainsFunc(d.keys, func(k string) bool { return strings.Contains(k, v) }) {
			continue // too short to tell, or a name the problem may give
		}
		for _, s := range said {
			if strings.Contains(s, v) {
				t.Fatalf("problem says %q, repeating the payload value %q", s, v)
			}
		}
	}
}

// appendStrings appends every string inside a decoded JSON value.
func appendStrings(dst []string, v any) []string {
	switch v := v.(type) {
	case string:
		dst = append(dst, v)
	case []any:
		for _, e := range v {
			dst = appendStrings(dst, e)
		}
	case map[string]any:
		for _, e := range v {
			dst = appendStrings(dst, e)
		}
	}
	return dst
}

// jsonDoc is a body as encoding/json reads it, as far as it is JSON.
type jsonDoc struct {
	// values are the string values and number literals: a refusal must not
	// repeat them. keys are the keys: it may name them.
	values, keys []string
	// plain reports one JSON value without null and without a key twice in
	// one object: every reader of such a body reads the same.
	plain bool
}

func readDoc(body []byte) jsonDoc {
	var d jsonDoc
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	plain := true
	var value func(depth int) bool
	value = func(depth int) bool {
		if depth > 2*maxJSONDepth {
			return false
		}
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok := tok.(type) {
		case nil:
			plain = false
		case string:
			d.values = append(d.values, tok)
		case json.Number:
			d.values = append(d.values, string(tok))
		case json.Delim:
			seen := map[string]bool{}
			for dec.More() {
				if tok == '{' {
					k, err := dec.Token()
					if err != nil {
						return false
					}
					key, _ := k.(string)
					plain = plain && !seen[key]
					seen[key] = true
					d.keys = append(d.keys, key)
				}
				if !value(depth + 1) {
					return false
				}
			}
			if _, err := dec.Token(); err != nil {
				return false
			}
		}
		return true
	}
	d.plain = value(0) && plain && len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) == 0
	// Values after the first are payload too.
	for value(0) {
	}
	return d
}

// checkPlain fails unless body is plain JSON using only the field names
// fields, exactly as spelled.
func checkPlain(t *testing.T, body []byte, fields []string) {
	t.Helper()
	d := readDoc(body)
	if !d.plain {
		t.Fatalf("accepted a body with null, a duplicate key or more than one value")
	}
	for _, k := range d.keys {
		if !slices.Contains(fields, k) {
			t.Fatalf("accepted a body with the key %q", k)
		}
	}
}

// checkNotRewritten fails unless body is valid UTF-8 and stored, the JSON
// of what was stored from it, holds U+FFFD only if body spells one: raw or
// as an escape.
func checkNotRewritten(t *testing.T, body, stored []byte) {
	t.Helper()
	if !utf8.Valid(body) {
		t.Fatalf("accepted a body that is not valid UTF-8: %q", body)
	}
	spelled := bytes.Contains(body, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(body), []byte(`\ufffd`))
	if !spelled && bytes.Contains(stored, []byte("\uFFFD")) {
		t.Fatalf("stored U+FFFD the body did not hold: %q became %s", body, stored)
	}
}

// withoutEmptyRefs is outcomes with an empty committed.refs as none: JSON
// encodes none as [].
func withoutEmptyRefs(outcomes []schema.Outcome) []schema.Outcome {
	out := slices.Clone(outcomes)
	for i, o := range out {
		if o.Committed != nil && len(o.Committed.Refs) == 0 {
			c := *o.Committed
			c.Refs = nil
			out[i].Committed = &c
		}
	}
	return out
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
