package outbox_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

// A row written before timeout_ms and headers existed, byte for byte.
const oldEndpointRow = "\x01" + `{"url":"https://x.example/in","scheme":"mkit-hook-v2","enabled":true,"max_in_flight":2,"created_ms":1,"updated_ms":2}`

func TestAnEndpointRowWithoutTimeoutOrHeadersDecodesToTheDefaults(t *testing.T) {
	got, err := outbox.DecodeEndpoint(store.Value(oldEndpointRow))
	if err != nil {
		t.Fatal(err)
	}
	want := outbox.Endpoint{URL: "https://x.example/in", Scheme: outbox.SchemeMkitHookV2, Enabled: true, MaxInFlight: 2, CreatedMs: 1, UpdatedMs: 2}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	// Written back unchanged, it keeps its bytes: guards on it still hold.
	again, err := outbox.EncodeEndpoint(&got)
	if err != nil || string(again) != oldEndpointRow {
		t.Fatalf("re-encoded %q, %v", again, err)
	}
}

func withHeaders(h map[string]outbox.HeaderValue) outbox.Endpoint {
	e := testEndpoint()
	e.TimeoutMs = 2000
	e.Headers = h
	return e
}

func TestAnEndpointsTimeoutAndHeadersRoundTrip(t *testing.T) {
	e := withHeaders(map[string]outbox.HeaderValue{"x-tenant": "tenant-one <&>", "authorization": "Bearer hunter2"})
	v, err := outbox.EncodeEndpoint(&e)
	if err != nil {
		t.Fatal(err)
	}
	got, err := outbox.DecodeEndpoint(v)
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
	for _, ms := range []int{-1, 1, 999, outbox.MaxTimeoutMs + 1, 30000} {
		e := withHeaders(nil)
		e.TimeoutMs = ms
		if _, err := outbox.EncodeEndpoint(&e); !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "timeout_ms") {
			t.Errorf("timeout_ms %d: %v, want ErrInvalid naming timeout_ms", ms, err)
		}
	}
	for _, ms := range []int{0, outbox.MinTimeoutMs, outbox.DefaultTimeoutMs, outbox.MaxTimeoutMs} {
		e := withHeaders(nil)
		e.TimeoutMs = ms
		if _, err := outbox.EncodeEndpoint(&e); err != nil {
			t.Errorf("timeout_ms %d: %v", ms, err)
		}
	}
}

// Every name relay or the connection owns, and every signature header of
// both schemes.
var deniedNames = []string{
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"te", "trailer", "upgrade", "expect", "http2-settings",
	"content-type", "content-encoding", "user-agent",
	"proxy-authorization", "proxy-connection", "proxy-authenticate",
	"webhook-id", "webhook-timestamp", "webhook-signature",
	"x-mkit-hook-version", "x-mkit-hook-key-id", "x-mkit-hook-namespace", "x-mkit-hook-audience",
	"x-mkit-hook-created-at", "x-mkit-hook-expires-at", "x-mkit-hook-nonce", "x-mkit-hook-digest",
	"x-mkit-hook-signature",
}

func TestEveryDeniedHeaderNameIsRefused(t *testing.T) {
	for _, n := range deniedNames {
		e := withHeaders(map[string]outbox.HeaderValue{n: "v"})
		_, err := outbox.EncodeEndpoint(&e)
		if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "headers."+n) {
			t.Errorf("%s: %v, want ErrInvalid naming headers.%s", n, err, n)
		}
	}
}

func TestABadHeaderIsRefusedWithoutEchoingItsValue(t *testing.T) {
	long := strings.Repeat("s", outbox.MaxHeaderValueBytes+1)
	many := map[string]outbox.HeaderValue{}
	for i := range outbox.MaxHeaders + 1 {
		many[fmt.Sprintf("x-h%d", i)] = "secretvalue"
	}
	cases := map[string]map[string]outbox.HeaderValue{
		"upper case":     {"X-Tenant": "secretvalue"},
		"space in name":  {"x tenant": "secretvalue"},
		"colon in name":  {"x-a:b": "secretvalue"},
		"empty name":     {"": "secretvalue"},
		"long name":      {strings.Repeat("x", outbox.MaxHeaderNameBytes+1): "secretvalue"},
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
		"too long":       {"x-tenant": outbox.HeaderValue(long)},
		"placeholder":    {"authorization": outbox.RedactedHeader},
		"too many":       many,
	}
	for name, h := range cases {
		e := withHeaders(h)
		_, err := outbox.EncodeEndpoint(&e)
		if !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), "headers") {
			t.Errorf("%s: %v, want ErrInvalid naming headers", name, err)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "sss") {
			t.Errorf("%s: error %q echoes the value", name, err)
		}
	}
	ok := map[string]outbox.HeaderValue{}
	for i := range outbox.MaxHeaders {
		ok[fmt.Sprintf("x-h%d", i)] = outbox.HeaderValue(strings.Repeat("~", outbox.MaxHeaderValueBytes))
	}
	ok["x-h0"] = "a b!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	e := withHeaders(ok)
	if _, err := outbox.EncodeEndpoint(&e); err != nil {
		t.Errorf("%d headers of printable ASCII: %v", len(ok), err)
	}
}

func TestSecretLookingHeaderNames(t *testing.T) {
	for n, want := range map[string]bool{
		"authorization": true, "x-api-key": true, "x-auth-token": true, "x-client-secret": true,
		"cookie": true, "x-session-id": true, "x-password": true, "x-credentials": true,
		"x-access-token": true, "apikey": true, "x-signature": true,
		"x-tenant": false, "x-request-source": false, "accept": false, "x-region": false,
	} {
		if got := outbox.SecretHeader(n, "acme"); got != want {
			t.Errorf("SecretHeader(%q) = %v, want %v", n, got, want)
		}
	}
}

// A credential under a harmless-looking name is write-only too: told by
// its scheme, its shape, a well-known prefix, or its length and mix of
// characters. Identifiers, versions, UUIDs and words are shown.
func TestCredentialLookingHeaderValues(t *testing.T) {
	for v, want := range map[string]bool{
		"Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc": true,
		"bearer abc":                               true,
		"Basic dXNlcjpwYXNz":                       true,
		"Digest username=\"a\", response=\"b\"":    true,
		"Token abc":                                true,
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig": true,
		"jwt=eyJhbGciOiJIUzI1NiJ9":                 true,
		"sk_live_4eC39HqLyjWD":                     true,
		"sk_test_abc":                              true,
		"ghp_abc":                                  true,
		"gho_abc":                                  true,
		"github_pat_11ABC":                         true,
		"xoxb-123-456":                             true,
		"xoxp-1":                                   true,
		"AKIAIOSFODNN7EXAMPLE":                     true,
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw":   true,
		"glpat-abc":                                true,
		"key=ghp_abc, region=eu":                   true,
		"Zq8KvWm3JxT2pL9sNc4RfA7y":                 true,
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b": true,
		"acme":                                 false,
		"eu-west-1":                            false,
		"v2":                                   false,
		"3f2a9c1e-7b4d-4e8f-9a6b-2c1d0e5f4a3b": false,
		"3F2A9C1E-7B4D-4E8F-9A6B-2C1D0E5F4A3B": false,
		"application/vnd.acme+json; version=2": false,
		"billing-service-production-eu":        false,
		"Acme Corp Billing":                    false,
		"1764460800000":                        false,
		"bearer":                               false,
		"a bearer of news":                     false,
	} {
		if got := outbox.SecretHeader("x-tenant", outbox.HeaderValue(v)); got != want {
			t.Errorf("SecretHeader(x-tenant, %q) = %v, want %v", v, got, want)
		}
	}
}
