package verifycheck_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// keysServer serves the key list of entries at signing.KeysPath, as relay
// does; rotate changes what it serves.
type keysServer struct {
	*httptest.Server
	list  atomic.Pointer[http.Handler]
	count atomic.Int64
}

func newKeysServer(t *testing.T, entries ...signing.PublicKey) *keysServer {
	t.Helper()
	s := &keysServer{}
	s.rotate(t, entries...)
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.count.Add(1)
		(*s.list.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *keysServer) rotate(t *testing.T, entries ...signing.PublicKey) {
	t.Helper()
	list, err := signing.NewKeyList(entries...)
	if err != nil {
		t.Fatal(err)
	}
	h := signing.KeysHandler(list)
	s.list.Store(&h)
}

func (s *keysServer) keysURL() string { return s.URL + signing.KeysPath }

// answering serves every request with h.
func answering(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// relayList is a valid key list as relay serves it.
func relayList(t *testing.T) []byte {
	t.Helper()
	b := setup(t)
	list, _ := signing.NewKeyList(b.signer.PublicKey())
	rec := httptest.NewRecorder()
	signing.KeysHandler(list).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	return rec.Body.Bytes()
}

func TestCheckKeyListURL(t *testing.T) {
	t.Parallel()
	for src, ok := range map[string]bool{
		"https://relay.example.com/.well-known/mkit-hook-keys.json": true,
		"https://203.0.113.7/.well-known/mkit-hook-keys.json":       true,
		"http://127.0.0.1:8080/.well-known/mkit-hook-keys.json":     true,
		"http://127.8.0.1/.well-known/mkit-hook-keys.json":          true,
		"http://[::1]:8080/.well-known/mkit-hook-keys.json":         true,
		"http://localhost:8080/.well-known/mkit-hook-keys.json":     true,
		"http://relay.example.com/.well-known/mkit-hook-keys.json":  false,
		"http://localhost.example.com/keys.json":                    false,
		"http://127.0.0.1.nip.io/keys.json":                         false,
		"http://127.1/keys.json":                                    false,
		"http://10.0.0.1/keys.json":                                 false,
		"http://[::ffff:10.0.0.1]/keys.json":                        false,
		"http://0.0.0.0:8080/keys.json":                             false,
		"ftp://relay.example.com/keys.json":                         false,
		"file:///etc/relay/keys.json":                               false,
		"https:///keys.json":                                        false,
		"relay.example.com/keys.json":                               false,
		"://":                                                       false,
	} {
		err := hookverify.CheckKeyListURL(src)
		if (err == nil) != ok || (err != nil && !errors.Is(err, hookverify.ErrKeyListSource)) {
			t.Errorf("%s: %v", src, err)
		}
	}
}

func TestFetchKeyListGetsRelaysList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := newKeysServer(t, b.signer.PublicKey())
	list, err := hookverify.FetchKeyList(context.Background(), srv.keysURL())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Keys) != 1 || list.Keys[0].KeyID != "relay-1" || list.Keys[0] != b.v.Keys.Keys[0] {
		t.Fatalf("fetched %+v", list)
	}
}

func TestFetchKeyListOverHTTPSWithTheCallersTransport(t *testing.T) {
	t.Parallel()
	data := relayList(t)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(data) }))
	t.Cleanup(srv.Close)
	if _, err := hookverify.FetchKeyList(context.Background(), srv.URL); err == nil {
		t.Fatal("a certificate the default transport does not trust was accepted")
	}
	list, err := hookverify.FetchKeyList(context.Background(), srv.URL, hookverify.WithTransport(srv.Client().Transport))
	if err != nil || len(list.Keys) != 1 {
		t.Fatalf("got %+v, %v", list, err)
	}
}

// roundTripper answers every request with a valid key list and counts them:
// a request that reaches it is one the rule should have stopped.
type roundTripper struct {
	data  []byte
	calls atomic.Int64
}

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.calls.Add(1)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(string(rt.data))), Request: r}, nil
}

func TestFetchKeyListRefusesPlainHTTPFromAnotherHostWithoutConnecting(t *testing.T) {
	t.Parallel()
	rt := &roundTripper{data: relayList(t)}
	_, err := hookverify.FetchKeyList(context.Background(), "http://relay.example.com/.well-known/mkit-hook-keys.json", hookverify.WithTransport(rt))
	if !errors.Is(err, hookverify.ErrKeyListSource) || !strings.Contains(err.Error(), "https required") {
		t.Errorf("got %v, want ErrKeyListSource", err)
	}
	if n := rt.calls.Load(); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestFetchKeyListFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := newKeysServer(t, b.signer.PublicKey())
	redirect := answering(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.keysURL(), http.StatusFound)
	})
	for _, opts := range [][]hookverify.FetchOption{nil, {hookverify.WithTransport(http.DefaultTransport)}} {
		_, err := hookverify.FetchKeyList(context.Background(), redirect.URL+signing.KeysPath, opts...)
		if err == nil || !strings.Contains(err.Error(), "answered 302") {
			t.Errorf("got %v, want the 302 refused", err)
		}
	}
	if n := target.count.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

func TestFetchKeyListReadsOnlyA200(t *testing.T) {
	t.Parallel()
	data := relayList(t)
	srv := answering(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write(data) // a valid list, under the wrong status
	})
	_, err := hookverify.FetchKeyList(context.Background(), srv.URL+"/keys.json?token=s3cret#frag")
	if err == nil || !strings.Contains(err.Error(), "answered 404") {
		t.Fatalf("got %v, want the 404 refused", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("the error shows the URL's query: %v", err)
	}
}

// A huge body is cut at the limit and refused as too large: the fetch stops
// reading, and the server's writes fail once the socket buffers (a few MiB)
// are full, long before the 64 MiB it has to send.
func TestFetchKeyListStopsReadingAtTheLimit(t *testing.T) {
	t.Parallel()
	const huge = 64 << 20
	written := make(chan int, 1)
	srv := answering(t, func(w http.ResponseWriter, _ *http.Request) {
		chunk := []byte(strings.Repeat(" ", 64<<10))
		n := 0
		for n < huge {
			m, err := w.Write(chunk)
			n += m
			if err != nil {
				break
			}
		}
		written <- n
	})
	_, err := hookverify.FetchKeyList(context.Background(), srv.URL)
	if !errors.Is(err, hookverify.ErrKeyList) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("got %v, want ErrKeyList for a list too large", err)
	}
	if n := <-written; n >= huge/2 {
		t.Errorf("the fetch read %d bytes of the body, want it to stop at the limit", n)
	}
}

func TestFetchKeyListRefusesWhatIsNotAKeyList(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"truncated JSON": `{"version":1,"keys":[`,
		"an HTML page":   "<!doctype html><title>Sign in</title>",
		"another object": `{"error":"not found"}`,
		"empty":          "",
		"two lists":      string(relayList(t)) + string(relayList(t)),
	} {
		srv := answering(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, body) })
		if _, err := hookverify.FetchKeyList(context.Background(), srv.URL); !errors.Is(err, hookverify.ErrKeyList) {
			t.Errorf("%s: got %v, want ErrKeyList", name, err)
		}
	}
}

func TestFetchKeyListEndsWithItsContext(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	srv := answering(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		cancel()
	}()
	if _, err := hookverify.FetchKeyList(ctx, srv.URL); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}
