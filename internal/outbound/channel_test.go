package outbound

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/signing"
)

// Network rule for these tests: traffic goes only to loopback. The stub
// resolver answers every lookup (no DNS query leaves), and fakeNet's dial is
// the only dial the channel makes for a name: it records the address the
// channel asked for and connects to a loopback httptest listener instead,
// whatever that address was.

// publicIP stands in for a public address. It must pass the guard, so it
// cannot be a documentation address: ssrf denies 192.0.2.0/24,
// 198.51.100.0/24 and 203.0.113.0/24. It is never dialed (see fakeNet.dial).
const publicIP = "93.184.216.34"

// fakeNet is the channel's resolver and dialer in tests.
type fakeNet struct {
	t *testing.T

	mu      sync.Mutex
	answers map[string][][]netip.Addr // host -> successive answers; the last repeats
	lookups map[string]int
	routes  map[string]string // address asked -> loopback listener
	route   string            // listener for any other address; "" refuses
	asked   []string

	read atomic.Int64 // bytes the channel read from all connections
}

func newFakeNet(t *testing.T) *fakeNet {
	return &fakeNet{t: t, answers: map[string][][]netip.Addr{}, lookups: map[string]int{}, routes: map[string]string{}}
}

// answer makes host resolve to each answer in turn, one per lookup.
func (n *fakeNet) answer(host string, answers ...[]string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ips := range answers {
		var as []netip.Addr
		for _, ip := range ips {
			as = append(as, netip.MustParseAddr(ip))
		}
		n.answers[host] = append(n.answers[host], as)
	}
}

func (n *fakeNet) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	i := n.lookups[host]
	n.lookups[host]++
	as := n.answers[host]
	if len(as) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as[min(i, len(as)-1)], nil
}

func (n *fakeNet) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	n.asked = append(n.asked, addr)
	to, ok := n.routes[addr]
	if !ok {
		to = n.route
	}
	n.mu.Unlock()
	if to == "" {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	if ap, err := netip.ParseAddrPort(to); err != nil || !ap.Addr().IsLoopback() {
		n.t.Errorf("fakeNet routes to %q, which is not a loopback listener", to)
		return nil, errors.New("fakeNet: refusing a non-loopback route")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", to)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, read: &n.read}, nil
}

func (n *fakeNet) askedFor() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.asked...)
}

func (n *fakeNet) lookupsOf(host string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lookups[host]
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

// publicTLS is an https receiver that the channel reaches as
// https://example.com (the name httptest's certificate carries), resolved
// to publicIP and dialed through fakeNet to the loopback listener.
type publicTLS struct {
	ch   *Channel
	net  *fakeNet
	srv  *httptest.Server
	hits atomic.Int64
	url  *url.URL
}

func setupPublicTLS(t *testing.T, opts ChannelOptions, h http.HandlerFunc) *publicTLS {
	t.Helper()
	p := &publicTLS{net: newFakeNet(t)}
	if h == nil {
		h = func(http.ResponseWriter, *http.Request) {}
	}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(p.srv.Close)
	p.net.answer("example.com", []string{publicIP})
	p.net.route = p.srv.Listener.Addr().String()
	opts.lookup = p.net.lookup
	opts.dial = p.net.dial
	opts.roots = x509.NewCertPool()
	opts.roots.AddCert(p.srv.Certificate())
	p.ch = newTestChannel(t, opts)
	p.url = mustURL(t, "https://example.com/hook")
	return p
}

// newTestChannel builds a channel that cannot leave loopback: without a
// fakeNet, lookups fail and the production dialer (guard and all) is wrapped
// so that it refuses, without dialing, any address that is not loopback.
func newTestChannel(t *testing.T, opts ChannelOptions) *Channel {
	t.Helper()
	if opts.lookup == nil {
		opts.lookup = func(_ context.Context, host string) ([]netip.Addr, error) {
			return nil, &net.DNSError{Err: "no DNS in tests", Name: host, IsNotFound: true}
		}
	}
	faked := opts.dial != nil
	c, err := NewChannel(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !faked {
		real := c.dial
		c.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
				t.Errorf("channel dialed %q for real; tests dial only loopback", addr)
				return nil, errors.New("test: refusing a non-loopback dial")
			}
			return real(ctx, network, addr)
		}
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// loopbackHTTP is a plain-http receiver on 127.0.0.1, reached by the
// production dialer because the channel allows 127.0.0.0/8.
func loopbackHTTP(t *testing.T, opts ChannelOptions, h http.HandlerFunc) (*Channel, *url.URL) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	opts.Allow = append(opts.Allow, netip.MustParsePrefix("127.0.0.0/8"))
	return newTestChannel(t, opts), mustURL(t, srv.URL+"/hook")
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func post(t *testing.T, c *Channel, u *url.URL) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	return c.Post(ctx, u, http.Header{"X-Test": {"1"}}, []byte(`{"type":"outcome.expired"}`))
}

// wantClass fails unless err is an *Error of class.
func wantClass(t *testing.T, err error, class Class) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("Post = %v (%T), want *Error of class %q", err, err, class)
	}
	if e.Class != class {
		t.Fatalf("Post = %v, class %q; want class %q", err, e.Class, class)
	}
	return e
}

func TestGuardRefusesNonPublicAddressesAtDial(t *testing.T) {
	t.Parallel()
	for _, ip := range []string{
		"127.0.0.1", "::1", "::ffff:127.0.0.1", "10.0.0.1", "172.16.0.1",
		"192.168.1.1", "100.64.0.1", "169.254.169.254", "fc00::1", "fe80::1",
		"64:ff9b::7f00:1", "0.0.0.0", "224.0.0.1", "ff02::1", "::ffff:10.0.0.1",
	} {
		t.Run(ip, func(t *testing.T) {
			t.Parallel()
			// fakeNet would carry any dial to the receiver, so only the
			// guard stands between this Post and a 200.
			p := setupPublicTLS(t, ChannelOptions{}, nil)
			p.net.answers["example.com"] = [][]netip.Addr{{netip.MustParseAddr(ip)}}
			wantClass(t, post(t, p.ch, p.url), ClassRefused)
			if asked := p.net.askedFor(); len(asked) != 0 {
				t.Errorf("dialed %v; the guard must refuse before any dial", asked)
			}
			if p.hits.Load() != 0 {
				t.Error("the receiver was reached")
			}
		})
	}
	t.Run("public control", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		if err := post(t, p.ch, p.url); err != nil {
			t.Fatalf("Post to a public address = %v, want nil", err)
		}
		if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":443" {
			t.Errorf("dialed %v, want [%s:443]", got, publicIP)
		}
	})
}

func TestNameTurningPrivateIsRefusedOnTheNextDial(t *testing.T) {
	t.Parallel()
	p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close") // the next Post must dial again
	})
	p.net.answers["example.com"] = nil
	p.net.answer("example.com", []string{publicIP}, []string{"10.0.0.1"})

	if err := post(t, p.ch, p.url); err != nil {
		t.Fatalf("first Post = %v, want nil", err)
	}
	wantClass(t, post(t, p.ch, p.url), ClassRefused)
	if n := p.net.lookupsOf("example.com"); n != 2 {
		t.Errorf("%d lookups, want 2: each new connection resolves again", n)
	}
	if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":443" {
		t.Errorf("dialed %v, want only [%s:443]", got, publicIP)
	}
	if p.hits.Load() != 1 {
		t.Errorf("receiver hit %d times, want 1", p.hits.Load())
	}
}

func TestMixedAnswerDialsOnlyPermittedAddresses(t *testing.T) {
	t.Parallel()
	p := setupPublicTLS(t, ChannelOptions{}, nil)
	p.net.answers["example.com"] = nil
	p.net.answer("example.com", []string{"127.0.0.1", "10.0.0.1", "::ffff:192.168.0.1", publicIP})
	if err := post(t, p.ch, p.url); err != nil {
		t.Fatalf("Post = %v, want nil", err)
	}
	if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":443" {
		t.Errorf("dialed %v, want only [%s:443]", got, publicIP)
	}
}

func TestRedirectToInternalAddressIsNotFollowed(t *testing.T) {
	t.Parallel()
	var internalHits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		internalHits.Add(1)
	}))
	t.Cleanup(internal.Close)
	// 10.0.0.0/8 is allowed and routed to a live receiver, so the guard would
	// not stop a followed redirect: only not following it keeps it unvisited.
	p := setupPublicTLS(t, ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}},
		func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://10.0.0.1/admin", http.StatusFound)
		})
	p.net.routes["10.0.0.1:80"] = internal.Listener.Addr().String()

	e := wantClass(t, post(t, p.ch, p.url), ClassRedirect)
	if e.Status != http.StatusFound {
		t.Errorf("Status = %d, want 302", e.Status)
	}
	if internalHits.Load() != 0 {
		t.Error("the redirect target was contacted")
	}
	if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":443" {
		t.Errorf("dialed %v, want only [%s:443]", got, publicIP)
	}
}

func TestEnvironmentProxyIsIgnored(t *testing.T) {
	var proxyHits atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		proxyHits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"} {
		t.Setenv(k, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")

	// A proxied request would dial the proxy's loopback address, which the
	// guard refuses here; a direct one dials example.com's address.
	p := setupPublicTLS(t, ChannelOptions{}, nil)
	if err := post(t, p.ch, p.url); err != nil {
		t.Fatalf("Post = %v, want nil", err)
	}
	if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":443" {
		t.Errorf("dialed %v, want only [%s:443] (direct)", got, publicIP)
	}
	if proxyHits.Load() != 0 || p.hits.Load() != 1 {
		t.Errorf("proxy hit %d times, receiver %d; want 0 and 1", proxyHits.Load(), p.hits.Load())
	}
}

func TestAllowListedLoopbackIsReachable(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(fmt.Sprintf("%s %s %s %s", r.Method, r.Header.Get("X-Test"), r.Header.Get("User-Agent"), b))
	}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	if !srv.Listener.Addr().(*net.TCPAddr).IP.Equal(net.IPv4(127, 0, 0, 1)) {
		t.Skip("httptest did not listen on 127.0.0.1")
	}

	refusing := newTestChannel(t, ChannelOptions{})
	wantClass(t, post(t, refusing, mustURL(t, srv.URL)), ClassRefused)
	if got.Load() != nil {
		t.Fatal("a channel without an allow-list reached loopback")
	}

	allowing := newTestChannel(t, ChannelOptions{
		Allow:     []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		UserAgent: "relay/test",
	})
	for _, u := range []string{srv.URL, fmt.Sprintf("http://localhost:%d/hook", port)} {
		got.Store("")
		if err := post(t, allowing, mustURL(t, u)); err != nil {
			t.Fatalf("Post %s = %v, want nil", u, err)
		}
		if want := `POST 1 relay/test {"type":"outcome.expired"}`; got.Load() != want {
			t.Errorf("receiver saw %q, want %q", got.Load(), want)
		}
	}
}

func TestAnyPortIsAllowed(t *testing.T) {
	t.Parallel()
	p := setupPublicTLS(t, ChannelOptions{}, nil)
	if err := post(t, p.ch, mustURL(t, "https://example.com:8443/hook")); err != nil {
		t.Fatalf("Post = %v, want nil", err)
	}
	if got := p.net.askedFor(); len(got) != 1 || got[0] != publicIP+":8443" {
		t.Errorf("dialed %v, want [%s:8443]", got, publicIP)
	}
}

func TestDialControlChecksTheSocketAddress(t *testing.T) {
	t.Parallel()
	c := newTestChannel(t, ChannelOptions{})
	for _, tc := range []struct {
		network, addr string
		ok            bool
	}{
		{"tcp4", publicIP + ":443", true},
		{"tcp4", publicIP + ":8080", true},
		{"tcp6", "[2606:2800:220:1::1]:443", true},
		{"tcp4", "127.0.0.1:443", false},
		{"tcp6", "[::ffff:169.254.169.254]:80", false},
		{"tcp6", "[64:ff9b::a00:1]:443", false},
		{"udp4", publicIP + ":443", false},
	} {
		if err := c.control(tc.network, tc.addr, nil); (err == nil) != tc.ok {
			t.Errorf("control(%s, %s) = %v, want ok=%v", tc.network, tc.addr, err, tc.ok)
		}
	}
}

func TestAllowingNAT64StillJudgesTheIPv4Inside(t *testing.T) {
	t.Parallel()
	c := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("64:ff9b::/96")}})
	if err := c.permit(netip.MustParseAddr("64:ff9b::5db8:d822")); err != nil { // 93.184.216.34
		t.Errorf("NAT64 of a public address refused: %v", err)
	}
	for _, a := range []string{"64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b::a9fe:a9fe"} {
		if c.permit(netip.MustParseAddr(a)) == nil {
			t.Errorf("%s permitted; its IPv4 address is not", a)
		}
	}
}

func TestAllowingTunnelPrefixesStillJudgesTheIPv4Inside(t *testing.T) {
	t.Parallel()
	// 93.184.216.34 (public), 127.0.0.1 and 169.254.169.254 (metadata) in
	// each form that carries an IPv4 address.
	const (
		teredoPublic   = "2001:0:4136:e378:8000:63bf:a247:27dd" // client bits are the IPv4 XOR 0xffffffff
		teredoLoopback = "2001:0:4136:e378:8000:63bf:80ff:fffe"
		teredoMetadata = "2001:0:4136:e378:8000:63bf:5601:5601"
	)
	global := netip.MustParsePrefix("2000::/3")
	for _, tc := range []struct {
		name  string
		allow []netip.Prefix
		addrs map[string]bool // address -> permitted
	}{
		{"global unicast allowed", []netip.Prefix{global}, map[string]bool{
			"2606:2800:220:1::1": true, // no IPv4 inside: the allow-list decides
			"2002:5db8:d822::1":  true,
			"2002:7f00:1::1":     false,
			"2002:a9fe:a9fe::1":  false,
			"2002:a00:1::1":      false,
			teredoPublic:         true,
			teredoLoopback:       false,
			teredoMetadata:       false,
		}},
		{"local-use NAT64 allowed", []netip.Prefix{netip.MustParsePrefix("64:ff9b:1::/48")}, map[string]bool{
			"64:ff9b:1::5db8:d822": true,
			"64:ff9b:1::a9fe:a9fe": false,
			"64:ff9b:1::7f00:1":    false,
			"64:ff9b:1::c0a8:101":  false,
		}},
		{"embedded IPv4 allowed itself", []netip.Prefix{global, netip.MustParsePrefix("127.0.0.1/32")}, map[string]bool{
			"2002:7f00:1::1": true,
			teredoLoopback:   true,
			"2002:7f00:2::1": false, // 127.0.0.2
			teredoMetadata:   false,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newTestChannel(t, ChannelOptions{Allow: tc.allow})
			for a, ok := range tc.addrs {
				if err := c.permit(netip.MustParseAddr(a)); (err == nil) != ok {
					t.Errorf("permit(%s) = %v, want ok=%v", a, err, ok)
				}
				if err := c.control("tcp6", netip.AddrPortFrom(netip.MustParseAddr(a), 443).String(), nil); (err == nil) != ok {
					t.Errorf("control(tcp6, %s) = %v, want ok=%v", a, err, ok)
				}
			}
		})
	}
	t.Run("URL literal", func(t *testing.T) {
		t.Parallel()
		c := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{global}})
		wantClass(t, c.CheckURL(mustURL(t, "https://[2002:a9fe:a9fe::1]/latest/meta-data")), ClassRefused)
	})
}

func TestAllowListCoversMappedForms(t *testing.T) {
	t.Parallel()
	c := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{
		netip.MustParsePrefix("10.1.2.0/24"),
		netip.MustParsePrefix("::ffff:192.168.7.0/120"),
	}})
	for a, ok := range map[string]bool{
		"10.1.2.3": true, "::ffff:10.1.2.3": true, "10.1.3.1": false,
		"192.168.7.9": true, "::ffff:192.168.7.9": true, "192.168.8.1": false,
	} {
		if err := c.permit(netip.MustParseAddr(a)); (err == nil) != ok {
			t.Errorf("permit(%s) = %v, want ok=%v", a, err, ok)
		}
	}
}

func TestAnswerMapsToResult(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		status     int
		retryAfter string
		want       *Error // nil: acknowledged
	}{
		{"200 acknowledges", 200, "", nil},
		{"204 acknowledges", 204, "", nil},
		{"503 retry seconds", 503, "120", &Error{Class: ClassStatus, Status: 503, RetryAfter: 2 * time.Minute}},
		{"429 retry date", 429, now.Add(90 * time.Second).Format(http.TimeFormat), &Error{Class: ClassStatus, Status: 429, RetryAfter: 90 * time.Second}},
		{"429 retry capped", 429, "86400", &Error{Class: ClassStatus, Status: 429, RetryAfter: 15 * time.Minute}},
		{"503 date capped", 503, now.Add(3 * time.Hour).Format(http.TimeFormat), &Error{Class: ClassStatus, Status: 503, RetryAfter: 15 * time.Minute}},
		{"503 negative", 503, "-5", &Error{Class: ClassStatus, Status: 503}},
		{"503 malformed", 503, "soon", &Error{Class: ClassStatus, Status: 503}},
		{"503 without", 503, "", &Error{Class: ClassStatus, Status: 503}},
		{"500 ignores retry", 500, "60", &Error{Class: ClassStatus, Status: 500}},
		{"410 gone", 410, "", &Error{Class: ClassGone, Status: 410, Gone: true}},
		{"301", 301, "", &Error{Class: ClassRedirect, Status: 301}},
		{"302", 302, "", &Error{Class: ClassRedirect, Status: 302}},
		{"304", 304, "", &Error{Class: ClassRedirect, Status: 304}},
		{"307", 307, "", &Error{Class: ClassRedirect, Status: 307}},
		{"308", 308, "", &Error{Class: ClassRedirect, Status: 308}},
		{"400", 400, "", &Error{Class: ClassStatus, Status: 400}},
		{"404", 404, "", &Error{Class: ClassStatus, Status: 404}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, u := loopbackHTTP(t, ChannelOptions{now: func() time.Time { return now }},
				func(w http.ResponseWriter, _ *http.Request) {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					if tc.status/100 == 3 {
						w.Header().Set("Location", "https://example.net/")
					}
					w.WriteHeader(tc.status)
				})
			err := post(t, c, u)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Post = %v, want nil", err)
				}
				return
			}
			e := wantClass(t, err, tc.want.Class)
			if e.Status != tc.want.Status || e.RetryAfter != tc.want.RetryAfter || e.Gone != tc.want.Gone {
				t.Errorf("Post = %+v, want %+v", *e, *tc.want)
			}
		})
	}
}

func TestLargeAnswerIsNotReadWhole(t *testing.T) {
	t.Parallel()
	const size = 10 << 20
	for _, tc := range []struct {
		status   int
		declared bool // Content-Length sent; otherwise chunked
	}{{200, true}, {500, true}, {200, false}, {503, false}} {
		t.Run(fmt.Sprint(tc.status, " declared=", tc.declared), func(t *testing.T) {
			t.Parallel()
			written := make(chan int64, 1)
			p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
				if tc.declared {
					w.Header().Set("Content-Length", fmt.Sprint(size))
				}
				w.WriteHeader(tc.status)
				n, _ := io.Copy(w, io.LimitReader(zeros{}, size))
				written <- n
			})
			err := post(t, p.ch, p.url)
			if tc.status == 200 && err != nil {
				t.Fatalf("Post = %v, want nil", err)
			}
			if tc.status != 200 {
				wantClass(t, err, ClassStatus)
			}
			// Headers, TLS records and one bufio buffer over the 64 KiB cap.
			if read := p.net.read.Load(); read > defaultMaxResponseBytes+64<<10 {
				t.Errorf("channel read %d bytes off the wire; cap is %d", read, defaultMaxResponseBytes)
			}
			if n := <-written; n >= size {
				t.Errorf("receiver wrote all %d bytes; the channel should hang up first", n)
			}
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestShortAnswerLeavesConnectionReusable(t *testing.T) {
	t.Parallel()
	p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, strings.Repeat("busy ", 1000))
	})
	for range 3 {
		wantClass(t, post(t, p.ch, p.url), ClassStatus)
	}
	if got := len(p.net.askedFor()); got != 1 {
		t.Errorf("%d dials for 3 posts, want 1 (keep-alive)", got)
	}
}

func TestHangingReceiverIsCutByTheDeadline(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	p := setupPublicTLS(t, ChannelOptions{}, func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) }) // runs before the server's Close

	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	err := p.ch.Post(ctx, p.url, nil, []byte("{}"))
	wantClass(t, err, ClassTimeout)
	select {
	case <-arrived:
	default:
		t.Error("the request never reached the receiver; the timeout was not the answer's")
	}
}

func TestDrippingBodyIsCutByTheBackstopWhenCtxHasNoDeadline(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			c, u := loopbackHTTP(t, ChannelOptions{postDeadline: 300 * time.Millisecond},
				func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(status)
					_, _ = io.WriteString(w, "still ")
					_ = http.NewResponseController(w).Flush()
					select { // the rest of the body never comes
					case <-release:
					case <-r.Context().Done():
					}
				})
			t.Cleanup(func() { close(release) }) // runs before the server's Close

			ctx := t.Context()
			if _, ok := ctx.Deadline(); ok {
				t.Fatal("test context has a deadline; the backstop would not be exercised")
			}
			done := make(chan error, 1)
			go func() { done <- c.Post(ctx, u, nil, []byte("{}")) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second): // a watchdog: the backstop is 300 ms
				t.Fatal("Post still reading a dripping body after 10 s; no deadline bounds it")
			}
			// The answer's status arrived and decides, though its body was cut.
			if status == http.StatusOK {
				if err != nil {
					t.Errorf("Post = %v, want nil (200 acknowledges)", err)
				}
			} else if e := wantClass(t, err, ClassStatus); e.Status != status {
				t.Errorf("Status = %d, want %d", e.Status, status)
			}
		})
	}
}

func TestPostBackstopDefaultsTo30s(t *testing.T) {
	t.Parallel()
	if c := newTestChannel(t, ChannelOptions{}); c.postDeadline != DefaultPostDeadline || DefaultPostDeadline != 30*time.Second {
		t.Errorf("backstop %v (DefaultPostDeadline %v), want 30s", c.postDeadline, DefaultPostDeadline)
	}
}

func TestCanceledCallIsNotATimeout(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	p := setupPublicTLS(t, ChannelOptions{}, func(_ http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.ch.Post(ctx, p.url, nil, []byte("{}")) }()
	<-arrived
	cancel()
	wantClass(t, <-done, ClassCanceled)
}

func TestTransportFailuresHaveAClass(t *testing.T) {
	t.Parallel()
	t.Run("untrusted certificate", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		p.ch.transport.TLSClientConfig.RootCAs = x509.NewCertPool()
		wantClass(t, post(t, p.ch, p.url), ClassTLS)
	})
	t.Run("certificate for another name", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		p.net.answer("other.example.org", []string{publicIP})
		wantClass(t, post(t, p.ch, mustURL(t, "https://other.example.org/")), ClassTLS)
	})
	t.Run("TLS 1.1 receiver", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		old := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		old.TLS = &tls.Config{MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}
		old.StartTLS()
		t.Cleanup(old.Close)
		p.net.route = old.Listener.Addr().String()
		p.ch.transport.TLSClientConfig.RootCAs.AddCert(old.Certificate())
		wantClass(t, post(t, p.ch, p.url), ClassTLS)
	})
	t.Run("plain http on the https port", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		plain := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		t.Cleanup(plain.Close)
		p.net.route = plain.Listener.Addr().String()
		wantClass(t, post(t, p.ch, p.url), ClassTLS)
	})
	t.Run("name not found", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, nil)
		wantClass(t, post(t, p.ch, mustURL(t, "https://missing.example.com/")), ClassDNS)
	})
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		c := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
		e := wantClass(t, post(t, c, mustURL(t, "http://"+addr+"/")), ClassConnect)
		if !strings.Contains(e.Error(), "connection refused") {
			t.Errorf("Error() = %q, want it to name the refusal", e.Error())
		}
	})
	t.Run("connection closed without an answer", func(t *testing.T) {
		t.Parallel()
		p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		wantClass(t, post(t, p.ch, p.url), ClassTransport)
	})
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	strict := newTestChannel(t, ChannelOptions{})
	local := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("10.1.2.0/24"),
	}})
	for _, tc := range []struct {
		c    *Channel
		url  string
		want Class // "" means accepted
	}{
		{strict, "https://hooks.example.com/in", ""},
		{strict, "https://hooks.example.com:8443/in?x=1", ""},
		{strict, "https://93.184.216.34/in", ""},
		{strict, "https://[2606:2800:220:1::1]/in", ""},
		{strict, "http://hooks.example.com/in", ClassURL},
		{strict, "ftp://hooks.example.com/in", ClassURL},
		{strict, "https://user:pass@hooks.example.com/in", ClassURL},
		{strict, "https://user@hooks.example.com/in", ClassURL},
		{strict, "https:///in", ClassURL},
		{strict, "https:opaque", ClassURL},
		{strict, "https://hooks.example.com:0/", ClassURL},
		{strict, "https://127.1/", ClassURL},
		{strict, "https://2130706433/", ClassURL},
		{strict, "https://0x7f.0x1/", ClassURL},
		{strict, "https://[fe80::1%25eth0]/", ClassURL},
		{strict, "https://10.0.0.1/", ClassRefused},
		{strict, "https://192.168.1.1/", ClassRefused},
		{strict, "https://169.254.169.254/latest/meta-data", ClassRefused},
		{strict, "https://[::ffff:127.0.0.1]/", ClassRefused},
		{strict, "https://[fc00::1]/", ClassRefused},
		{strict, "https://127.0.0.1/", ClassRefused},
		{strict, "http://127.0.0.1:8080/", ClassRefused},
		{strict, "https://localhost/", ClassRefused},
		{local, "http://127.0.0.1:8080/hook", ""},
		{local, "http://[::1]:8080/hook", ""},
		{local, "http://localhost:8080/hook", ""},
		{local, "http://LOCALHOST:8080/hook", ""},
		{local, "http://localhost.:8080/hook", ClassURL},
		{strict, "https://hooks.example.com./in", ClassURL},
		{strict, "https://hooks.example.com:0443/in", ClassURL},
		{strict, "https://hooks.example.com:08443/in", ClassURL},
		{strict, "https://[2606:2800:0220:1::1]/in", ClassURL},
		{strict, "https://[2606:2800:220:1:0:0:0:1]/in", ClassURL},
		{strict, "https://[2606:2800:220:1::1]:8443/in", ""},
		{local, "https://10.1.2.3/hook", ""},
		{local, "http://10.1.2.3/hook", ClassURL},
		{local, "https://10.1.3.1/hook", ClassRefused},
		{local, "http://hooks.example.com/in", ClassURL},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		err = tc.c.CheckURL(u)
		var e *Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckURL(%s) = %v, want nil", tc.url, err)
		case tc.want != "" && (!errors.As(err, &e) || e.Class != tc.want):
			t.Errorf("CheckURL(%s) = %v, want class %q", tc.url, err, tc.want)
		}
	}
	if err := strict.CheckURL(nil); err == nil {
		t.Error("CheckURL(nil) = nil")
	}
}

// A URL the channel accepts is one relay can sign for; one it cannot sign
// for (an origin with a second spelling) is refused at registration as a
// bad URL. signing's tests hold the signer to the receiver's Origin.
func TestCheckURLRefusesWhatTheSignerCannotSign(t *testing.T) {
	t.Parallel()
	// Every address is permitted, so CheckURL judges only the URL's form.
	c := newTestChannel(t, ChannelOptions{Allow: []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
	}})
	for raw, accepted := range map[string]bool{
		"https://h.example:443/x":          true,
		"https://h.example:8443/x":         true,
		"https://h.example:65535/x":        true,
		"https://h.example:0443/x":         false,
		"https://h.example:08443/x":        false,
		"https://h.example:00/x":           false,
		"https://H.Example/x":              true,
		"https://example.com./x":           false,
		"https://example.com.:443/x":       false,
		"https://localhost./x":             false,
		"http://127.0.0.1:8080/x":          true,
		"https://[2001:db8::1]/x":          true,
		"https://[2001:DB8::1]:8443/x":     true,
		"https://[2001:0db8::1]/x":         false,
		"https://[2001:db8:0:0:0:0:0:1]/x": false,
		"https://[2001:db8::0:1]/x":        false,
		"https://[::ffff:93.184.216.34]/x": true,
		"https://[::ffff:5db8:d822]/x":     false,
		"https://[fe80::1%25eth0]/x":       false,
		"https://xn--bcher-kva.example/x":  true,
		"https://h.example:443/x?q=1#frag": true,
	} {
		u := mustURL(t, raw)
		if _, err := signing.Origin(u); (err == nil) != accepted {
			t.Errorf("signing.Origin(%s): %v, want accepted %t", raw, err, accepted)
		}
		err := c.CheckURL(u)
		var e *Error
		switch {
		case accepted && err != nil:
			t.Errorf("CheckURL(%s) = %v, want nil", raw, err)
		case !accepted && (!errors.As(err, &e) || e.Class != ClassURL):
			t.Errorf("CheckURL(%s) = %v, want class %q", raw, err, ClassURL)
		}
	}
}

func TestNewChannelRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for _, opts := range []ChannelOptions{
		{MaxConns: -1},
		{MaxResponseBytes: -1},
		{Allow: []netip.Prefix{{}}},
	} {
		if _, err := NewChannel(opts); err == nil {
			t.Errorf("NewChannel(%+v) = nil error", opts)
		}
	}
}

// BenchmarkChannelPost measures the channel alone: 64 concurrent posts of a
// small body to a loopback receiver over kept-alive connections.
func BenchmarkChannelPost(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, err := NewChannel(ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseIdleConnections()
	u, _ := url.Parse(srv.URL + "/hook")
	body := []byte(`{"type":"outcome.committed","timestamp":"2026-03-01T12:00:00Z","data":{}}`)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Post(b.Context(), u, http.Header{"Webhook-Id": {"msg_1"}}, body); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "posts/s")
}

func TestARefusalKeepsTheFirstBytesOfItsAnswerOnly(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	for _, declared := range []bool{true, false} {
		t.Run(fmt.Sprint("declared=", declared), func(t *testing.T) {
			t.Parallel()
			p := setupPublicTLS(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
				if declared {
					w.Header().Set("Content-Length", fmt.Sprint(size))
				}
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write(body)
			})
			e := wantClass(t, post(t, p.ch, p.url), ClassStatus)
			if !bytes.Equal(e.Excerpt, body[:MaxExcerptBytes]) {
				t.Fatalf("excerpt of %d bytes %q, want the first %d of the answer", len(e.Excerpt), e.Excerpt, MaxExcerptBytes)
			}
			if strings.Contains(e.Error(), string(body[:8])) {
				t.Fatalf("error text %q holds the answer", e.Error())
			}
		})
	}
	// A short refusal is kept whole; a 2xx keeps nothing.
	c, u := loopbackHTTP(t, ChannelOptions{}, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, "no")
	})
	if e := wantClass(t, post(t, c, u), ClassStatus); string(e.Excerpt) != "no" {
		t.Fatalf("excerpt %q", e.Excerpt)
	}
}

// PostStatus tells which 2xx the endpoint answered, and 0 with the error
// otherwise.
func TestPostStatusTellsTheTwoHundredTheEndpointAnswered(t *testing.T) {
	for _, code := range []int{http.StatusOK, http.StatusAccepted, http.StatusNoContent} {
		c, u := loopbackHTTP(t, ChannelOptions{}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) })
		if got, err := c.PostStatus(context.Background(), u, http.Header{}, []byte("{}")); err != nil || got != code {
			t.Errorf("answered %d: PostStatus %d, %v", code, got, err)
		}
	}
	c, u := loopbackHTTP(t, ChannelOptions{}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	if got, err := c.PostStatus(context.Background(), u, http.Header{}, []byte("{}")); err == nil || got != 0 {
		t.Errorf("answered 502: PostStatus %d, %v", got, err)
	}
}
