package schema_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// decoders maps each versioned codec to a valid encoding and its decoder.
func decoders(t *testing.T) map[string]struct {
	valid  store.Value
	decode func(store.Value) error
} {
	seen, _ := schema.EncodeSeen(schema.Seen{Digest: [32]byte{1, 2, 3}, AcceptedMs: t0})
	attempt, err := schema.EncodeAttempts(schema.Attempts{Total: 3, Last: []schema.Attempt{{AtMs: t0, DurationMs: 12, Status: 503, ErrorClass: "status", Excerpt: "busy"}}})
	if err != nil {
		t.Fatal(err)
	}
	ep := testEndpoint()
	endpoint, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]struct {
		valid  store.Value
		decode func(store.Value) error
	}{
		"record": {mustRecord(t, committed("r")), func(v store.Value) error { _, err := schema.DecodeRecord("r", v); return err }},
		"backlog": {schema.EncodeBacklog(schema.Backlog{Rows: 3, Bytes: 300}), func(v store.Value) error {
			_, err := schema.DecodeBacklog(v)
			return err
		}},
		"sequence": {schema.EncodeSequence(7), func(v store.Value) error { _, err := schema.DecodeSequence(v); return err }},
		"seen":     {seen, func(v store.Value) error { _, err := schema.DecodeSeen(v); return err }},
		"attempt":  {attempt, func(v store.Value) error { _, err := schema.DecodeAttempts(v); return err }},
		"endpoint": {endpoint, func(v store.Value) error { _, err := schema.DecodeEndpoint(v); return err }},
	}
}

func TestDecodersRefuseTruncatedTrailingAndUnknownVersions(t *testing.T) {
	for name, c := range decoders(t) {
		if err := c.decode(c.valid); err != nil {
			t.Errorf("%s: valid value refused: %v", name, err)
		}
		for i := range len(c.valid) {
			if err := c.decode(c.valid[:i]); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("%s: prefix of %d bytes: %v", name, i, err)
			}
		}
		if err := c.decode(append(bytes.Clone(c.valid), 0)); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: trailing byte: %v", name, err)
		}
		// 0x7f: a version no codec writes (the attempt row is at 2).
		v2 := bytes.Clone(c.valid)
		v2[0] = 0x7f
		if err := c.decode(v2); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: unknown version: %v", name, err)
		}
	}
}

func TestRecordDecoderIsStrict(t *testing.T) {
	valid := mustRecord(t, aborted("r"))
	// 0x01 kind(2) len(12) "acme/widgets" ...
	if valid[2] != 12 {
		t.Fatalf("layout changed: % x", valid[:4])
	}
	overlong := append([]byte{valid[0], valid[1], 0x8c, 0x00}, valid[3:]...)
	badKind := bytes.Clone(valid)
	badKind[1] = 9
	control := aborted("r")
	control.Repository = "acme/widgets"
	badRepo := mustRecord(t, control)
	badRepo[3] = '\n'
	for name, v := range map[string][]byte{"overlong varint": overlong, "unknown kind": badKind, "control char": badRepo} {
		if _, err := schema.DecodeRecord("r", v); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := schema.DecodeRecord("bad/rid", valid); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("bad rid: %v", err)
	}
}

func TestSmallCodecsRoundTrip(t *testing.T) {
	b := schema.Backlog{Rows: 1 << 40, Bytes: 1<<64 - 1}
	if got, err := schema.DecodeBacklog(schema.EncodeBacklog(b)); err != nil || got != b {
		t.Errorf("backlog %+v, %v", got, err)
	}
	if got, err := schema.DecodeSequence(schema.EncodeSequence(1<<64 - 1)); err != nil || got != 1<<64-1 {
		t.Errorf("sequence %d, %v", got, err)
	}
	// As ingest writes it: 16 bytes of the digest, and the log row's seq;
	// erased, without the seq. Each decodes as written.
	short := schema.Seen{Digest: [32]byte{0: 1, 15: 2}, AcceptedMs: 1<<63 - 1, Writer: [8]byte{7: 7}, Logged: true, Seq: 9}
	for _, s := range []schema.Seen{short, {Digest: short.Digest, AcceptedMs: 5}} {
		v, _ := schema.EncodeSeen(s)
		if got, err := schema.DecodeSeen(v); err != nil || got != s {
			t.Errorf("short seen %+v: decoded %+v, %v", s, got, err)
		}
		if want := 1 + schema.SeenDigestBytes + 8 + 8 + map[bool]int{true: 8}[s.Logged]; len(v) != want {
			t.Errorf("short seen row is %d bytes, want %d", len(v), want)
		}
	}
}

// A seen row matches a digest by the 16 bytes it keeps.
func TestASeenRowMatchesTheDigestItKeeps(t *testing.T) {
	d := [32]byte{0: 1, 15: 2, 31: 3}
	tail := d
	tail[31] ^= 1
	head := d
	head[15] ^= 1
	short := schema.Seen{Digest: [32]byte{0: 1, 15: 2}}
	if !short.Matches(d) || !short.Matches(tail) || short.Matches(head) {
		t.Errorf("matches %v, %v beyond its bytes, %v within them", short.Matches(d), short.Matches(tail), short.Matches(head))
	}
}

func TestDeliveryStateIsTheReferenceLayout(t *testing.T) {
	s, err := schema.DecodeDeliveryState(nil)
	if err != nil || s.FailedFires != 0 || s.Cursor != nil {
		t.Errorf("empty state: %+v, %v", s, err)
	}
	v, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 0x01020304, Cursor: store.NewCursor([]byte("pa/x"))})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{1, 2, 3, 4, 0, 4, 'p', 'a', '/', 'x'}; !bytes.Equal(v, want) {
		t.Errorf("encoded % x, want % x", v, want)
	}
	got, err := schema.DecodeDeliveryState(v)
	if err != nil || got.FailedFires != 0x01020304 || string(got.Cursor.Bytes()) != "pa/x" {
		t.Errorf("decoded %+v, %v", got, err)
	}
	none, _ := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 2})
	if got, err := schema.DecodeDeliveryState(none); err != nil || got.Cursor != nil || got.FailedFires != 2 {
		t.Errorf("no cursor: %+v, %v", got, err)
	}
	for _, bad := range [][]byte{{0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 2, 'a'}, {0, 0, 0, 0, 0, 1, 'a', 'b'}, append([]byte{0, 0, 0, 0, 0x10, 0x01}, make([]byte, 4097)...)} {
		if _, err := schema.DecodeDeliveryState(bad); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("% x: %v", bad[:min(len(bad), 8)], err)
		}
	}
	if _, err := schema.EncodeDeliveryState(schema.DeliveryState{Cursor: store.NewCursor(make([]byte, 4097))}); err == nil {
		t.Error("oversized cursor encoded")
	}
}

func secret(b byte) schema.Secret {
	return schema.Secret(schema.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)))
}

func testEndpoint() schema.Endpoint {
	return schema.Endpoint{
		URL: "https://billing.acme.example/hooks/relay?a=1&b=<2>", Scheme: schema.SchemeStandardWebhooks,
		Secrets: []schema.Secret{secret(1), secret(2)}, Kinds: []schema.Kind{schema.KindCommitted, schema.KindAborted},
		Enabled: true, MaxInFlight: 4, CreatedMs: t0, UpdatedMs: t0 + 1,
	}
}

func TestEndpointRoundTripsAndFiltersKinds(t *testing.T) {
	ep := testEndpoint()
	v, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeEndpoint(v)
	if err != nil || !reflect.DeepEqual(got, ep) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if !got.Accepts(schema.KindAborted) || got.Accepts(schema.KindExpired) {
		t.Error("kind filter")
	}
	all := schema.Endpoint{URL: "https://x.example"}.WithDefaults()
	if all.Scheme != schema.SchemeMkitHookV2 || all.MaxInFlight != 1 || !all.Accepts(schema.KindReadServed) {
		t.Errorf("defaults: %+v", all)
	}
}

func TestEndpointDecoderAcceptsOnlyCanonicalJSON(t *testing.T) {
	ep := testEndpoint()
	v, _ := schema.EncodeEndpoint(&ep)
	body := string(v[1:])
	for name, b := range map[string]string{
		"unknown field":  strings.Replace(body, `"enabled"`, `"colour":1,"enabled"`, 1),
		"other spelling": strings.Replace(body, `"url"`, `"URL"`, 1),
		"whitespace":     strings.Replace(body, `,"scheme"`, `, "scheme"`, 1),
		"trailing":       body + "{}",
		"duplicate":      strings.Replace(body, `"enabled":true`, `"enabled":true,"enabled":true`, 1),
		"null":           "null",
		"empty kinds":    strings.Replace(body, `"kinds":["committed","aborted"]`, `"kinds":[]`, 1),
		"invalid":        strings.Replace(body, `"max_in_flight":4`, `"max_in_flight":17`, 1),
	} {
		if b == body {
			t.Fatalf("%s: replacement did nothing", name)
		}
		if _, err := schema.DecodeEndpoint(append([]byte{1}, b...)); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestEndpointValidateNeverEchoesURLOrSecrets(t *testing.T) {
	mod := func(f func(e *schema.Endpoint)) schema.Endpoint {
		e := testEndpoint()
		f(&e)
		return e
	}
	cases := map[string]schema.Endpoint{
		"no url":      mod(func(e *schema.Endpoint) { e.URL = "" }),
		"relative":    mod(func(e *schema.Endpoint) { e.URL = "/hooks" }),
		"ftp":         mod(func(e *schema.Endpoint) { e.URL = "ftp://x.example/" }),
		"credentials": mod(func(e *schema.Endpoint) { e.URL = "https://user:hunter2@x.example/" }),
		"fragment":    mod(func(e *schema.Endpoint) { e.URL = "https://x.example/#frag" }),
		"bad parse":   mod(func(e *schema.Endpoint) { e.URL = "https://x.example:port/" }),
		"scheme":      mod(func(e *schema.Endpoint) { e.Scheme = "hmac" }),
		"no secret":   mod(func(e *schema.Endpoint) { e.Secrets = nil }),
		"bad secret":  mod(func(e *schema.Endpoint) { e.Secrets = []schema.Secret{"whsec_hunter2"} }),
		"dup secret":  mod(func(e *schema.Endpoint) { e.Secrets = []schema.Secret{secret(1), secret(1)} }),
		"mkit secret": mod(func(e *schema.Endpoint) { e.Scheme = schema.SchemeMkitHookV2 }),
		"kind":        mod(func(e *schema.Endpoint) { e.Kinds = []schema.Kind{"merged"} }),
		"dup kind":    mod(func(e *schema.Endpoint) { e.Kinds = []schema.Kind{"expired", "expired"} }),
		"in flight":   mod(func(e *schema.Endpoint) { e.MaxInFlight = 0 }),
		"reason":      mod(func(e *schema.Endpoint) { e.DisabledReason = "gone" }),
		"bad reason":  mod(func(e *schema.Endpoint) { e.Enabled = false; e.DisabledReason = "Gone Away" }),
		"times":       mod(func(e *schema.Endpoint) { e.UpdatedMs = e.CreatedMs - 1 }),
		"too many sec": mod(func(e *schema.Endpoint) {
			e.Secrets = []schema.Secret{secret(1), secret(2), secret(3), secret(4), secret(5)}
		}),
	}
	for name, e := range cases {
		_, err := schema.EncodeEndpoint(&e)
		if !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, leak := range []string{"hunter2", "x.example", string(secret(1))} {
			if strings.Contains(err.Error(), leak) {
				t.Errorf("%s: error %q leaks %q", name, err, leak)
			}
		}
	}
	disabled := mod(func(e *schema.Endpoint) { e.Enabled = false; e.DisabledReason = "gone" })
	if _, err := schema.EncodeEndpoint(&disabled); err != nil {
		t.Errorf("disabled as gone: %v", err)
	}
	ep := testEndpoint()
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, ep); strings.Contains(s, string(secret(1))[6:]) {
			t.Errorf("%s prints the secret: %s", format, s)
		}
	}
}

// A state carrying a bucket or a throttle appends them after the cursor;
// one without them is the layout it always was, and reads as a full
// bucket, unthrottled.
func TestDeliveryStateCarriesTheBucketAndThrottleAfterTheCursor(t *testing.T) {
	old := []byte{0, 0, 0, 2, 0, 1, 'c'}
	s, err := schema.DecodeDeliveryState(old)
	if err != nil || s.Tokens != nil || s.Throttle != nil || s.Paced() {
		t.Fatalf("state without the extension: %+v, %v", s, err)
	}
	full := schema.DeliveryState{
		FailedFires: 2, Cursor: store.NewCursor([]byte("c")),
		Tokens:   &schema.TokenBucket{MilliTokens: 1500, AtMs: t0, Paced: true},
		Throttle: &schema.Throttle{MaxInFlight: 2, RateMilli: 12_500, CeilingMilli: 25_000, Reason: "429", SinceMs: t0 - 5, DecreasedMs: t0 - 1, RaisedMs: t0},
	}
	v, err := schema.EncodeDeliveryState(full)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(v, old) || v[len(old)] != 0x01 || v[len(old)+1] != 0x07 {
		t.Errorf("encoded % x", v)
	}
	got, err := schema.DecodeDeliveryState(v)
	if err != nil || !reflect.DeepEqual(got.Tokens, full.Tokens) || !reflect.DeepEqual(got.Throttle, full.Throttle) || !got.Paced() || got.FailedFires != 2 {
		t.Errorf("decoded %+v %+v %+v, %v", got, got.Tokens, got.Throttle, err)
	}
	onlyThrottle := full
	onlyThrottle.Tokens = nil
	{
		v, _ := schema.EncodeDeliveryState(onlyThrottle)
		if got, err := schema.DecodeDeliveryState(v); err != nil || got.Tokens != nil || got.Throttle == nil {
			t.Errorf("throttle only: %+v, %v", got, err)
		}
	}
	for _, bad := range [][]byte{
		append(slices.Clone(old), 0x02, 0x01),             // unknown extension
		append(slices.Clone(old), 0x01, 0x00),             // nothing in it
		append(slices.Clone(old), 0x01, 0x02),             // paced without a bucket
		append(slices.Clone(old), 0x01, 0x01, 0, 0),       // short bucket
		append(slices.Clone(v), 0),                        // trailing byte
		append(slices.Clone(old), 0x01, 0x10, 0, 0, 0, 0), // unknown flag
	} {
		if _, err := schema.DecodeDeliveryState(bad); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("% x: %v", bad, err)
		}
	}
	long := full
	long.Throttle = &schema.Throttle{Reason: strings.Repeat("x", schema.MaxThrottleReason+1)}
	if _, err := schema.EncodeDeliveryState(long); err == nil {
		t.Error("oversized reason encoded")
	}
}

// The health rides after the throttle, its pending events encoded as
// their records are.
func TestDeliveryStateCarriesTheHealth(t *testing.T) {
	ev := schema.Event{Type: schema.EventDisabled, Endpoint: "billing", Reason: "failing", FailingSinceMs: t0 - 9, LastStatus: 503, LastError: "status"}
	full := schema.DeliveryState{
		FailedFires: 4,
		Throttle:    &schema.Throttle{MaxInFlight: 1, Reason: "503", SinceMs: t0},
		Health: &schema.Health{FailingSinceMs: t0 - 9, NotifiedMs: t0, ResumeMs: t0 + 60_000, LastStatus: 503, LastError: "status",
			Pending: []schema.PendingEvent{{Event: ev, AtMs: t0}, {Event: schema.Event{Type: schema.EventRecovered, Endpoint: "billing"}, AtMs: t0 + 1}}},
	}
	v, err := schema.EncodeDeliveryState(full)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeDeliveryState(v)
	if err != nil || !reflect.DeepEqual(got.Health, full.Health) || got.Throttle == nil || got.FailedFires != 4 {
		t.Fatalf("decoded %+v %+v, %v", got, got.Health, err)
	}
	for i := range len(v) - 1 {
		if _, err := schema.DecodeDeliveryState(v[:i+1]); !errors.Is(err, store.ErrCorrupt) && i+1 > 6 {
			t.Fatalf("cut at %d: %v", i+1, err)
		}
	}
	bad := full
	h := *full.Health
	h.Pending = make([]schema.PendingEvent, schema.MaxPendingEvents+1)
	for i := range h.Pending {
		h.Pending[i] = schema.PendingEvent{Event: ev, AtMs: t0}
	}
	bad.Health = &h
	if _, err := schema.EncodeDeliveryState(bad); err == nil {
		t.Error("too many pending events encoded")
	}
	h.Pending = []schema.PendingEvent{{Event: schema.Event{Type: "endpoint.exploded", Endpoint: "billing"}, AtMs: t0}}
	if _, err := schema.EncodeDeliveryState(bad); err == nil {
		t.Error("an invalid event encoded")
	}
}

func TestRateLimitIsOptionalAndBounded(t *testing.T) {
	for _, rl := range []int{0, schema.MinRateLimit, 50, schema.MaxRateLimit} {
		ep := testEndpoint()
		ep.RateLimit = rl
		v, err := schema.EncodeEndpoint(&ep)
		if err != nil {
			t.Fatalf("rate_limit %d: %v", rl, err)
		}
		if got, err := schema.DecodeEndpoint(v); err != nil || got.RateLimit != rl {
			t.Errorf("rate_limit %d read back as %d, %v", rl, got.RateLimit, err)
		}
		if rl == 0 && bytes.Contains(v, []byte("rate_limit")) {
			t.Error("an endpoint without a rate_limit stores one")
		}
	}
	for _, rl := range []int{-1, schema.MaxRateLimit + 1} {
		ep := testEndpoint()
		ep.RateLimit = rl
		if _, err := schema.EncodeEndpoint(&ep); !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "rate_limit") {
			t.Errorf("rate_limit %d: %v", rl, err)
		}
	}
}
