package outbound

import (
	"bytes"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// TestRequestIsWhatNewRequestMakesOfTheURLsText: the channel builds its
// request from the parsed endpoint rather than from its text parsed again,
// and the request is the same: URL, Host (an empty port dropped), body and
// headers, the caller's header and URL left as they were.
func TestRequestIsWhatNewRequestMakesOfTheURLsText(t *testing.T) {
	t.Parallel()
	c := newTestChannel(t, ChannelOptions{})
	body := []byte(`{"type":"outcome.expired"}`)
	for _, raw := range []string{
		"https://hooks.example.com/in",
		"https://hooks.example.com",
		"https://hooks.example.com:/in",
		"https://hooks.example.com:8443/a%2Fb/c%20d?token=x&y=%20z",
		"https://hooks.example.com/p?",
		"https://hooks.example.com/p#frag",
		"https://[2001:db8::1]:8443/in",
		"https://[2001:db8::1]:/in",
		"http://127.0.0.1:9000/hook;x=1",
	} {
		endpoint := mustURL(t, raw)
		before := *endpoint
		header := http.Header{"Webhook-Id": {"msg_1"}, "X-Extra": {"a", "b"}}
		got, err := c.newRequest(t.Context(), endpoint, header, body)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		want, err := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint.String(), bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		want.Header = header.Clone()
		want.Header.Set("User-Agent", defaultUserAgent)
		want.Header.Set("Content-Type", "application/json")
		if !reflect.DeepEqual(got.URL, want.URL) {
			t.Errorf("%s: URL %#v, want %#v", raw, got.URL, want.URL)
		}
		if got.URL.RequestURI() != want.URL.RequestURI() || got.Host != want.Host {
			t.Errorf("%s: request line %q host %q, want %q and %q", raw, got.URL.RequestURI(), got.Host, want.URL.RequestURI(), want.Host)
		}
		if got.Method != want.Method || got.Proto != want.Proto || got.ContentLength != want.ContentLength || got.GetBody == nil {
			t.Errorf("%s: %s %s length %d (GetBody %v), want %s %s length %d", raw, got.Method, got.Proto, got.ContentLength, got.GetBody != nil, want.Method, want.Proto, want.ContentLength)
		}
		if !reflect.DeepEqual(got.Header, want.Header) {
			t.Errorf("%s: header %v, want %v", raw, got.Header, want.Header)
		}
		if b, _ := io.ReadAll(got.Body); !bytes.Equal(b, body) {
			t.Errorf("%s: body %q", raw, b)
		}
		if got.URL == endpoint || *endpoint != before {
			t.Errorf("%s: the request shares or changed the caller's URL", raw)
		}
		if len(header) != 2 || header.Get("User-Agent") != "" {
			t.Errorf("%s: the caller's header changed: %v", raw, header)
		}
	}
}
