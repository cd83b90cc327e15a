package schema_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// A row written before timeout_ms and headers existed, byte for byte.
const oldEndpointRow = "\x01" + `{"url":"https://x.example/in","scheme":"mkit-hook-v2","enabled":true,"max_in_flight":2,"created_ms":1,"updated_ms":2}`

func TestAnEndpointRowWithoutTimeoutOrHeadersDecodesToTheDefaults(t *testing.T) {
	got, err := schema.DecodeEndpoint(store.Value(oldEndpointRow))
	if err != nil {
		t.Fatal(err)
	}
	want := schema.Endpoint{URL: "https://x.example/in", Scheme: schema.SchemeMkitHookV2, Enabled: true, MaxInFlight: 2, CreatedMs: 1, UpdatedMs: 2}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// Written back unchanged, it keeps its bytes: guards on it still hold.
	again, err := schema.EncodeEndpoint(&got)
	if err != nil || string(again) != oldEndpointRow {
		t.Fatalf("re-encoded %q, %v", again, err)
	}
}

func withHeaders(h map[string]schema.HeaderValue) schema.Endpoint {
	e := testEndpoint()
	e.TimeoutMs = 2000
	e.Headers = h
	return e
}

func TestAnEndpointsTimeoutAndHeadersRoundTrip(t *testing.T) {
	e := withHeaders(map[string]schema.HeaderValue{"x-tenant": "tenant-one <&>", "authorization": "Bearer hunter2"})
	v, err := schema.EncodeEndpoint(&e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeEndpoint(v)
	if err != nil || !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if s := fmt.Sprintf(format, got); strings.Contains(s, "hunter2") || strings.Contains(s, "tenant-one") {
			t.Errorf("%s prints a header value: %s", format, s)
		}
	}
}

func TestAnEndpointTimeoutOutsideItsRangeIsRefused(t *testing.T) {
	for _, ms := range []int{-1, 1, 999, schema.MaxTimeoutMs + 1, 30000} {
		e := withHeaders(nil)
		e.TimeoutMs = ms
		if _, err := schema.EncodeEndpoint(&e); !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "timeout_ms") {
			t.Errorf("timeout_ms %d: %v, want ErrInvalid naming timeout_ms", ms, err)
		}
	}
	for _, ms := range []int{0, schema.MinTimeoutMs, schema.DefaultTimeoutMs, schema.MaxTimeoutMs} {
		e := withHeaders(nil)
		e.TimeoutMs = ms
		if _, err := schema.EncodeEndpoint(&e); err != nil {
			t.Errorf("timeout_ms %d: %v", ms, err)
		}
	}
}

// Every name relay or the connection owns, and every signature header of
// both schemes.
var deniedNames = []string{
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"te", "trailer", "upgrade", "expect", "http2-settings",
	"content-type", "content-encoding", "user-agent", "traceparent", "tracestate",
	"proxy-authorization", "proxy-connection", "proxy-authenticate",
	"webhook-id", "webhook-timestamp", "webhook-signature",
	"x-mkit-hook-version", "x-mkit-hook-key-id", "x-mkit-hook-namespace", "x-mkit-hook-audience",
	"x-mkit-hook-created-at", "x-mkit-hook-expires-at", "x-mkit-hook-nonce", "x-mkit-hook-digest",
	"x-mkit-hook-signature",
}

func TestEveryDeniedHeaderNameIsRefused(t *testing.T) {
	for _, n := range deniedNames {
		e := withHeaders(map[string]schema.HeaderValue{n: "v"})
		_, err := schema.EncodeEndpoint(&e)
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "headers."+n) {
			t.Errorf("%s: %v, want ErrInvalid naming headers.%s", n, err, n)
		}
	}
}

func TestABadHeaderIsRefusedWithoutEchoingItsValue(t *testing.T) {
	long := strings.Repeat("s", schema.MaxHeaderValueBytes+1)
	many := map[string]schema.HeaderValue{}
	for i := range schema.MaxHeaders + 1 {
		many[fmt.Sprintf("x-h%d", i)] = "secretvalue"
	}
	cases := map[string]map[string]schema.HeaderValue{
		"upper case":     {"X-Tenant": "secretvalue"},
		"space in name":  {"x tenant": "secretvalue"},
		"colon in name":  {"x-a:b": "secretvalue"},
		"empty name":     {"": "secretvalue"},
		"long name":      {strings.Repeat("x", schema.MaxHeaderNameBytes+1): "secretvalue"},
		"cr lf":          {"x-tenant": "secretvalue\r\nx-evil: 1"},
		"lf":             {"x-tenant": "secretvalue\nx"},
		"cr":             {"x-tenant": "secretvalue\rx"},
		"nul":            {"x-tenant": "secretvalue\x00"},
		"tab":            {"x-tenant": "secret\tvalue"},
		"del":            {"x-tenant": "secretvalue\x7f"},
		"non-ascii":      {"x-tenant": "secretvalué"},
		"empty value":    {"x-tenant": ""},
		"leading space":  {"x-tenant": " secretvalue"},
		"trailing space": {"x-tenant": "secretvalue "},
		"too long":       {"x-tenant": schema.HeaderValue(long)},
		"placeholder":    {"authorization": schema.RedactedHeader},
		"too many":       many,
	}
	for name, h := range cases {
		e := withHeaders(h)
		_, err := schema.EncodeEndpoint(&e)
		if !errors.Is(err, schema.ErrInvalid) || !strings.Contains(err.Error(), "headers") {
			t.Errorf("%s: %v, want ErrInvalid naming headers", name, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sss") {
			t.Errorf("%s: error %q echoes the value", name, err)
		}
	}
	ok := map[string]schema.HeaderValue{}
	for i := range schema.MaxHeaders {
		ok[fmt.Sprintf("x-h%d", i)] = schema.HeaderValue(strings.Repeat("~", schema.MaxHeaderValueBytes))
	}
	ok["x-h0"] = "a b!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	e := withHeaders(ok)
	if _, err := schema.EncodeEndpoint(&e); err != nil {
		t.Errorf("%d headers of printable ASCII: %v", len(ok), err)
	}
}
