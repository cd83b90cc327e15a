package outbound

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Error text is stored and may be shown to an endpoint's owner: it must not
// carry the URL (tokens ride in queries), either body, headers, or the
// addresses a name resolved to (that would map an internal network).
func TestErrorTextHoldsNoSecrets(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		case "/redirect":
			w.Header().Set("Location", "https://10.0.0.1/SECRET-LOCATION")
			w.WriteHeader(http.StatusFound)
		default:
			w.Header().Set("X-Answer", "SECRET-RESPONSE-HEADER")
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte("SECRET-RESPONSE-BODY"))
	})
	t.Cleanup(func() { close(release) })
	p.net.answer("internal.example.com", []string{"10.9.8.7"})
	p.net.answer("down.example.com", []string{"93.184.216.35"}) // fakeNet has no route for it

	for _, tc := range []struct {
		url   string
		class Class
	}{
		{"https://example.com/in?token=SECRET-QUERY", ClassStatus},
		{"https://example.com/redirect?token=SECRET-QUERY", ClassRedirect},
		{"https://example.com/hang?token=SECRET-QUERY", ClassTimeout},
		{"https://internal.example.com/in?token=SECRET-QUERY", ClassRefused},
		{"https://missing.example.com/in?token=SECRET-QUERY", ClassDNS},
		{"https://down.example.com/in?token=SECRET-QUERY", ClassConnect},
		{"https://SECRET-USER:SECRET-PASS@example.com/in", ClassURL},
		{"http://example.com/in?token=SECRET-QUERY", ClassURL},
	} {
		p.net.route = p.srv.Listener.Addr().String()
		if strings.HasPrefix(tc.url, "https://down.") {
			p.net.route = ""
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := p.ch.Post(ctx, mustURL(t, tc.url),
			http.Header{"Authorization": {"Bearer SECRET-HEADER"}}, []byte(`{"k":"SECRET-BODY"}`))
		cancel()
		e := wantClass(t, err, tc.class)
		msg := e.Error()
		for _, bad := range []string{"SECRET", "example.com", "/in", "10.9.8.7", "93.184.216", "127.0.0.1"} {
			if strings.Contains(msg, bad) {
				t.Errorf("%s: Error() = %q contains %q", tc.url, msg, bad)
			}
		}
		if !strings.HasPrefix(msg, "webhook: ") || len(msg) < len("webhook: x") {
			t.Errorf("%s: Error() = %q, want a reason", tc.url, msg)
		}
	}
}

func TestErrorTextSaysWhatHappened(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{statusError(503, 30*time.Second), "webhook: endpoint answered 503, retry after 30s"},
		{statusError(500, 0), "webhook: endpoint answered 500"},
		{statusError(410, 0), "webhook: endpoint answered 410 (gone)"},
		{statusError(302, 0), "webhook: endpoint answered 302 (redirects are not followed)"},
		{&Error{Class: ClassRefused, reason: errNotPermitted.Error()}, "webhook: refused: destination address not permitted"},
		{&Error{Class: ClassCanceled}, "webhook: canceled"},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
	if e := statusError(410, 0); !e.Gone || e.Class != ClassGone {
		t.Errorf("410 = %+v, want Gone", *e)
	}
}
