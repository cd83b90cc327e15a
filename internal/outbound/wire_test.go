package outbound

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawReceiver is a loopback receiver that answers each request with bytes
// of the test's choosing, whatever HTTP makes of them.
type rawReceiver struct {
	ln       net.Listener
	accepted atomic.Int64
	requests atomic.Int64
	// closed gets a value each time a connection ends, at either side.
	closed chan struct{}
	// answer gives the bytes for the n-th request (from 0) and whether to
	// close the connection after them.
	answer func(n int64, req *http.Request) (string, bool)
}

func newRawReceiver(t *testing.T, answer func(n int64, req *http.Request) (string, bool)) *rawReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rawReceiver{ln: ln, closed: make(chan struct{}, 64), answer: answer}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.serve(conn)
			}()
		}
	}()
	return r
}

func (r *rawReceiver) serve(conn net.Conn) {
	defer func() {
		conn.Close()
		r.closed <- struct{}{}
	}()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		answer, closing := r.answer(r.requests.Add(1)-1, req)
		if _, err := io.WriteString(conn, answer); err != nil || closing {
			return
		}
	}
}

func (r *rawReceiver) url(t *testing.T) *url.URL {
	return mustURL(t, "http://"+r.ln.Addr().String()+"/hook")
}

func loopbackChannel(t *testing.T, opts ChannelOptions) *Channel {
	t.Helper()
	opts.Allow = append(opts.Allow, netip.MustParsePrefix("127.0.0.0/8"))
	return newTestChannel(t, opts)
}

// The channel reads an answer as HTTP/1.1 says and keeps the connection for
// the next request only when the answer ended where its framing says: a
// malformed answer is a transport failure, and an answer whose status line
// arrived decides by its status whatever became of its body.
func TestAnswersAreReadAsHTTP11(t *testing.T) {
	t.Parallel()
	const ok = "HTTP/1.1 200 OK\r\n"
	for _, tc := range []struct {
		name    string
		answer  string
		closing bool  // the receiver closes the connection after the answer
		class   Class // "" acknowledged
		excerpt string
		reused  bool
	}{
		{"length", ok + "Content-Length: 2\r\n\r\nok", false, "", "", true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", false, "", "", true},
		{"informational first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", false, "", "", true},
		{"six informational", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 6) + ok + "Content-Length: 0\r\n\r\n", false, ClassTransport, "", false},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", false, ClassTransport, "", false},
		{"HTTP/2 status line", "HTTP/2 200\r\n\r\n", false, ClassTransport, "", false},
		{"four-digit status", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", false, ClassTransport, "", false},
		{"status below 100", "HTTP/1.1 099 Low\r\nContent-Length: 0\r\n\r\n", false, ClassTransport, "", false},
		{"header without colon", ok + "bogus\r\nContent-Length: 0\r\n\r\n", false, ClassTransport, "", false},
		{"space before colon", ok + "Content-Length : 0\r\n\r\n", false, ClassTransport, "", false},
		{"lengths differ", ok + "Content-Length: 2\r\nContent-Length: 3\r\n\r\nok", false, ClassTransport, "", false},
		{"negative length", ok + "Content-Length: -1\r\n\r\n", false, ClassTransport, "", false},
		{"same length twice", ok + "Content-Length: 2\r\nContent-Length: 2\r\n\r\nok", false, "", "", true},
		{"gzip coding", ok + "Transfer-Encoding: gzip\r\n\r\nok", false, ClassTransport, "", false},
		{"two codings", ok + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", false, ClassTransport, "", false},
		{"chunked and length", ok + "Transfer-Encoding: chunked\r\nContent-Length: 100\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, "", "", false},
		{"chunked with trailer", ok + "Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 1\r\n\r\n", false, "", "", true},
		{"malformed chunk", ok + "Transfer-Encoding: chunked\r\n\r\nzz\r\nok\r\n", true, "", "", false},
		{"body to the close", ok + "\r\nall of it", true, "", "", false},
		{"connection close", ok + "Connection: close\r\nContent-Length: 0\r\n\r\n", false, "", "", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false, "", "", false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", false, "", "", true},
		{"bytes past the answer", ok + "Content-Length: 2\r\n\r\nokEXTRA", false, "", "", false},
		{"body short of its length", ok + "Content-Length: 10\r\n\r\nok", true, "", "", false},
		{"header over 64 KiB", ok + "X-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", false, ClassTransport, "", false},
		{"long header line", ok + "X-Long: " + strings.Repeat("a", 10000) + "\r\nContent-Length: 0\r\n\r\n", false, "", "", true},
		{"folded header", ok + "X-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n", false, "", "", true},
		{"folded length", ok + "Content-Length: 2\r\n 3\r\n\r\nok", false, ClassTransport, "", false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", false, "", "", true},
		{"closed without an answer", "", true, ClassTransport, "", false},
		{"cut in the status line", "HTTP/1.1 2", true, ClassTransport, "", false},
		{"chunked refusal", "HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nno!\r\n0\r\n\r\n", false, ClassStatus, "no!", true},
		{"refusal to the close", "HTTP/1.1 503 Busy\r\n\r\nlater", true, ClassStatus, "later", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRawReceiver(t, func(int64, *http.Request) (string, bool) { return tc.answer, tc.closing })
			c := loopbackChannel(t, ChannelOptions{})
			for i := range 2 {
				err := post(t, c, r.url(t))
				if tc.class == "" {
					if err != nil {
						t.Fatalf("post %d = %v, want nil", i, err)
					}
					continue
				}
				e := wantClass(t, err, tc.class)
				if string(e.Excerpt) != tc.excerpt {
					t.Fatalf("excerpt %q, want %q", e.Excerpt, tc.excerpt)
				}
			}
			if want := map[bool]int64{true: 1, false: 2}[tc.reused]; r.accepted.Load() != want {
				t.Fatalf("%d connections for 2 posts, want %d (reused %v)", r.accepted.Load(), want, tc.reused)
			}
		})
	}
}

// A kept-alive connection the receiver closed while it was idle fails its
// next request before any answer: the request goes again on a new
// connection, once.
func TestAStaleConnectionIsReplacedOnce(t *testing.T) {
	t.Parallel()
	r := newRawReceiver(t, func(n int64, _ *http.Request) (string, bool) {
		// Keep-alive in words, closed in deed, every time.
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true
	})
	c := loopbackChannel(t, ChannelOptions{})
	for i := range 3 {
		if err := post(t, c, r.url(t)); err != nil {
			t.Fatalf("post %d = %v", i, err)
		}
		<-r.closed
	}
	if r.requests.Load() != 3 {
		t.Fatalf("receiver read %d requests for 3 posts", r.requests.Load())
	}
	// A receiver that closes every connection before answering fails the
	// post after one more try, not forever.
	var tries atomic.Int64
	dead := newRawReceiver(t, func(int64, *http.Request) (string, bool) { tries.Add(1); return "", true })
	wantClass(t, post(t, c, dead.url(t)), ClassTransport)
	if tries.Load() != 1 {
		t.Fatalf("a fresh connection's failure was sent %d times, want 1", tries.Load())
	}
}

// peerOpen tells a closed idle connection from an open one.
func TestPeerOpenSeesTheClose(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			accepted <- conn
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := <-accepted
	if !peerOpen(conn) {
		t.Fatal("an open connection reads as closed")
	}
	peer.Close()
	// The peer's FIN arrives in the kernel's time: look until it has.
	for deadline := time.Now().Add(5 * time.Second); peerOpen(conn); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("a connection closed by its peer still reads as open after 5 s")
		}
	}
}

// A header HTTP cannot carry is refused before a byte is sent, as net/http
// refuses it, and a host that is not ASCII before it is looked up.
func TestARequestHTTPCannotCarryIsRefused(t *testing.T) {
	t.Parallel()
	r := newRawReceiver(t, func(int64, *http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	c := loopbackChannel(t, ChannelOptions{})
	for _, h := range []http.Header{
		{"X-Evil": {"1\r\nX-Injected: 1"}},
		{"X-Evil": {"nul\x00"}},
		{"X Evil": {"1"}},
		{"X-Evil:": {"1"}},
		{"": {"1"}},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := c.Post(ctx, r.url(t), h, []byte("{}"))
		cancel()
		wantClass(t, err, ClassTransport)
	}
	if r.requests.Load() != 0 {
		t.Fatalf("the receiver read %d requests", r.requests.Load())
	}
	// Failed calls keep no connection, and so no origin.
	c.transport.mu.Lock()
	origins := len(c.transport.hosts)
	c.transport.mu.Unlock()
	if origins != 0 {
		t.Fatalf("%d origins kept after failed calls", origins)
	}
	var looked atomic.Int64
	idn := newTestChannel(t, ChannelOptions{lookup: func(context.Context, string) ([]netip.Addr, error) {
		looked.Add(1)
		return nil, errors.New("no lookups")
	}})
	wantClass(t, post(t, idn, mustURL(t, "https://bücher.example/hook")), ClassURL)
	if looked.Load() != 0 {
		t.Fatal("a host that is not ASCII was looked up")
	}
}

// A path or query holding a byte a request target cannot carry, as an
// endpoint stored before registration refused them may, is refused before
// a connection is made: its text never reaches a request line.
func TestATargetARequestLineCannotCarryIsRefused(t *testing.T) {
	t.Parallel()
	r := newRawReceiver(t, func(int64, *http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	c := loopbackChannel(t, ChannelOptions{})
	for _, target := range []string{"/w?q=x HTTP/1.0 y", "/w?q=é", `/w?q="x"`, "/w?q=<x>", "/w?q={x}|y^z`"} {
		u := mustURL(t, "http://"+r.ln.Addr().String()+target)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		err := c.Post(ctx, u, nil, []byte("{}"))
		cancel()
		wantClass(t, err, ClassURL)
		// The last guard, where the line is written.
		req := &http.Request{URL: u, Host: u.Host}
		if _, err := appendRequest(nil, req, nil); !errors.Is(err, errTargetInvalid) {
			t.Errorf("%q: appendRequest: %v", target, err)
		}
	}
	if n := r.accepted.Load(); n != 0 {
		t.Fatalf("the receiver accepted %d connections", n)
	}
}

// The request is the POST net/http would write: the request line of the
// URL's path and query, Host, the caller's header, Content-Length and the
// body, in one request the receiver's parser reads without complaint.
func TestTheRequestIsWhatAReceiverReads(t *testing.T) {
	t.Parallel()
	got := make(chan *http.Request, 1)
	bodies := make(chan string, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		req, err := http.ReadRequest(bufio.NewReader(conn))
		if err != nil {
			close(got)
			return
		}
		b, _ := io.ReadAll(req.Body)
		got <- req
		bodies <- string(b)
		_, _ = io.WriteString(conn, "HTTP/1.1 204 No Content\r\n\r\n")
	}()
	c := loopbackChannel(t, ChannelOptions{UserAgent: "relay/test"})
	u := mustURL(t, "http://"+ln.Addr().String()+"/in/a%2Fb?token=x&y=%20z")
	header := http.Header{"Webhook-Id": {"msg_1"}, "X-Two": {"a", "b"}, "Content-Length": {"999"}, "Host": {"evil.example"}}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := c.Post(ctx, u, header, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	req := <-got
	if req == nil {
		t.Fatal("the receiver could not parse the request")
	}
	if req.Method != "POST" || req.RequestURI != "/in/a%2Fb?token=x&y=%20z" || req.Host != ln.Addr().String() || req.Proto != "HTTP/1.1" {
		t.Errorf("request %s %s %s host %s", req.Method, req.RequestURI, req.Proto, req.Host)
	}
	if req.ContentLength != 7 || <-bodies != `{"a":1}` {
		t.Errorf("content length %d", req.ContentLength)
	}
	if req.Header.Get("Webhook-Id") != "msg_1" || strings.Join(req.Header["X-Two"], ",") != "a,b" ||
		req.Header.Get("User-Agent") != "relay/test" || req.Header.Get("Content-Type") != "application/json" {
		t.Errorf("header %v", req.Header)
	}
}

// At MaxConns connections to an origin, a further call waits for one to
// come free rather than dialing, until its deadline.
func TestAnOriginsConnectionsAreCapped(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 4)
	release := make(chan struct{})
	r := newRawReceiver(t, func(n int64, _ *http.Request) (string, bool) {
		if n < 2 {
			arrived <- struct{}{}
			<-release
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	c := loopbackChannel(t, ChannelOptions{MaxConns: 2})
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- post(t, c, r.url(t)) }()
	}
	<-arrived
	<-arrived
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err := c.Post(ctx, r.url(t), nil, []byte("{}"))
	cancel()
	wantClass(t, err, ClassTimeout)
	if r.accepted.Load() != 2 {
		t.Fatalf("%d connections at a cap of 2", r.accepted.Load())
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := post(t, c, r.url(t)); err != nil {
		t.Fatal(err)
	}
	if r.accepted.Load() != 2 {
		t.Fatalf("%d connections after the cap freed; want the 2 reused", r.accepted.Load())
	}
}

// A connection idle past the idle timeout is closed.
func TestAnIdleConnectionIsClosedInTime(t *testing.T) {
	t.Parallel()
	r := newRawReceiver(t, func(int64, *http.Request) (string, bool) {
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	c := loopbackChannel(t, ChannelOptions{})
	c.transport.idleTimeout = 50 * time.Millisecond
	if err := post(t, c, r.url(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.closed:
	case <-time.After(10 * time.Second): // a watchdog: the timeout is 50 ms
		t.Fatal("the idle connection is still open after 10 s")
	}
	c.transport.mu.Lock()
	idle, origins := c.transport.idle, len(c.transport.hosts)
	c.transport.mu.Unlock()
	if idle != 0 || origins != 0 {
		t.Fatalf("%d idle connections and %d origins kept after the close", idle, origins)
	}
}

// When the receiver closed every kept connection (it restarted), a call
// fails on the first it takes and goes again on a new connection, not on
// the next stale one.
func TestARestartedReceiversCallGoesOnANewConnection(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 2)
	release := make(chan struct{})
	r := newRawReceiver(t, func(n int64, _ *http.Request) (string, bool) {
		if n < 2 {
			arrived <- struct{}{}
			<-release
			return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true // and gone
		}
		return "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false
	})
	c := loopbackChannel(t, ChannelOptions{})
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- post(t, c, r.url(t)) }()
	}
	<-arrived
	<-arrived
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		<-r.closed
	}
	if err := post(t, c, r.url(t)); err != nil {
		t.Fatalf("post after the receiver closed its connections = %v", err)
	}
	if r.accepted.Load() != 3 {
		t.Fatalf("%d connections, want 3", r.accepted.Load())
	}
}

// The wait for an answer's head is bounded apart from the call's deadline,
// when that is later: a receiver that never answers is cut then, and one
// that answered its head in time has until the call's deadline to finish
// its body, after which its connection is kept.
func TestTheHeadHasItsOwnTimeoutAndTheBodyTheCalls(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					switch req.URL.Path {
					case "/silent":
						<-release
						return
					case "/slow-body":
						_, _ = io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nsl")
						// The rest after the head's timeout has passed.
						<-time.After(1500 * time.Millisecond)
						_, _ = io.WriteString(conn, "ow")
					default:
						_, _ = io.WriteString(conn, "HTTP/1.1 204 No Content\r\n\r\n")
					}
				}
			}()
		}
	}()
	c := loopbackChannel(t, ChannelOptions{})
	c.transport.headTimeout = time.Second
	base := "http://" + ln.Addr().String()
	call := func(path string) error {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		return c.Post(ctx, mustURL(t, base+path), nil, []byte("{}"))
	}
	start := time.Now()
	wantClass(t, call("/silent"), ClassTimeout)
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("a silent receiver held the call %v; the head's timeout is 1 s", waited)
	}
	if err := call("/slow-body"); err != nil {
		t.Fatal(err)
	}
	if err := call("/"); err != nil {
		t.Fatal(err)
	}
	// The silent receiver's connection, then one for the slow body, kept
	// for the last call.
	if accepted.Load() != 2 {
		t.Fatalf("%d connections, want 2: the slow body's was not kept", accepted.Load())
	}
}
