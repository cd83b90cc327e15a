package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/redisstore"
)

// wire is the API served as relay serves it, on a Listener, reached over
// real TCP connections.
type wire struct {
	t    *testing.T
	h    *harness
	addr string
	// closed learns of every connection the server closed.
	closed chan struct{}
	// opened, active and idle learn of connections accepted, with a
	// request head read and gone idle, while there is room in them: a test
	// that waits on one reads it from the start.
	opened, active, idle chan struct{}
}

func serveWire(t *testing.T, maxConns int) *wire {
	t.Helper()
	return serveWireWith(t, httpapi.ListenerConfig{MaxConnections: maxConns})
}

func serveWireWith(t *testing.T, cfg httpapi.ListenerConfig) *wire {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := newHarness(t, c, redisstore.DefaultPrefix)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Metrics = h.metrics
	l, err := httpapi.NewListener(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{t: t, h: h, addr: ln.Addr().String(), closed: make(chan struct{}, 64), opened: make(chan struct{}, 64), active: make(chan struct{}, 64), idle: make(chan struct{}, 64)}
	srv := httpapi.NewServer(h.h, l)
	listenerState := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		listenerState(c, s)
		switch s {
		case http.StateClosed:
			w.closed <- struct{}{}
		case http.StateNew:
			signal(w.opened)
		case http.StateActive:
			signal(w.active)
		case http.StateIdle:
			signal(w.idle)
		}
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// await fails the test unless ch is signalled n times within a bound far
// above what the server needs.
func await(t *testing.T, ch chan struct{}, n int, what string) {
	t.Helper()
	bound := time.After(20 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-bound:
			t.Fatalf("%s: %d of %d in 20s", what, i, n)
		}
	}
}

// conn is one client connection; every read is bounded by a deadline, so a
// server that neither answers nor closes fails the test instead of hanging.
type clientConn struct {
	net.Conn
	r *bufio.Reader
}

func (w *wire) dial() *clientConn {
	w.t.Helper()
	c, err := net.Dial("tcp", w.addr)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		w.t.Fatal(err)
	}
	return &clientConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *clientConn) send(t *testing.T, raw string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
}

func (c *clientConn) response(t *testing.T) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// closedAfter asserts the server sends nothing more and closes.
func (c *clientConn) closedAfter(t *testing.T, what string) {
	t.Helper()
	b, err := c.r.ReadByte()
	switch {
	case err == nil:
		rest, _ := c.r.Peek(c.r.Buffered())
		t.Fatalf("after %s the server sent more: %q", what, string(b)+string(rest))
	case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed), strings.Contains(err.Error(), "reset"):
	default:
		t.Fatalf("after %s the connection stayed open: %v", what, err)
	}
}

const getHealthz = "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"

func wantProblem(t *testing.T, resp *http.Response, body string, status int, slug httpapi.Slug) {
	t.Helper()
	var p struct{ Type string }
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != httpapi.ContentTypeProblem || json.Unmarshal([]byte(body), &p) != nil || p.Type != slug.Type() {
		t.Fatalf("answer %d %q %s, want %d %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, status, slug)
	}
}

// Behind a proxy that frames by Content-Length, the body of this request
// holds a second request that relay, framing by chunks, would answer: the
// request is refused and the connection closed, so the smuggled request
// and the one after it are never answered.
func TestARequestFramedBothWaysIsRefusedAndItsConnectionClosed(t *testing.T) {
	w := serveWire(t, 0)
	smuggled := "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"
	for name, head := range map[string]string{
		"length first": "POST /v1/namespaces/acme/outcomes HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n",
		"chunks first": "POST /healthz HTTP/1.1\r\nHost: relay\r\ntransfer-encoding: chunked\r\ncontent-length: %d\r\n\r\n",
		"HTTP/1.0":     "POST /healthz HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := w.dial()
			body := "0\r\n\r\n" + smuggled
			c.send(t, strings.Replace(head, "%d", strconv.Itoa(len(body)), 1)+body+getHealthz)
			resp, text := c.response(t)
			wantProblem(t, resp, text, http.StatusBadRequest, httpapi.SlugInvalidRequest)
			if !resp.Close {
				t.Error("the refusal does not say Connection: close")
			}
			c.closedAfter(t, "the refusal")
		})
	}
}

// After a POST net/http skips blank lines before the next request line; a
// request framed both ways behind them is refused all the same.
func TestARequestFramedBothWaysAfterABlankLineIsRefused(t *testing.T) {
	w := serveWire(t, 0)
	post := "POST /healthz HTTP/1.1\r\nHost: relay\r\nContent-Length: 5\r\n\r\nhello"
	both := "GET /healthz HTTP/1.1\r\nHost: relay\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	for _, blank := range []string{"\r\n", "\n\n", "\r\n\r\n"} {
		c := w.dial()
		c.send(t, post+blank+both+getHealthz)
		if resp, _ := c.response(t); resp.StatusCode != http.StatusMethodNotAllowed || resp.Close {
			t.Fatalf("%q: the POST: %d close=%v", blank, resp.StatusCode, resp.Close)
		}
		resp, body := c.response(t)
		wantProblem(t, resp, body, http.StatusBadRequest, httpapi.SlugInvalidRequest)
		c.closedAfter(t, "the refusal")
	}
}

// The watch costs well-framed clients nothing: requests framed by
// Content-Length share a connection; a chunked one is served, and its
// connection closed after it, since the watch does not follow chunks.
func TestWellFramedRequestsAreServed(t *testing.T) {
	w := serveWire(t, 0)
	c := w.dial()
	post := "POST /healthz HTTP/1.1\r\nHost: relay\r\nContent-Length: 5\r\n\r\nhello"
	c.send(t, post+getHealthz+post+getHealthz)
	for i := range 4 {
		resp, body := c.response(t)
		if i%2 == 0 {
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Close {
				t.Fatalf("POST %d: %d close=%v %s", i, resp.StatusCode, resp.Close, body)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("GET %d: %d close=%v %s", i, resp.StatusCode, resp.Close, body)
		}
	}

	c = w.dial()
	c.send(t, "GET /healthz HTTP/1.1\r\nHost: relay\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"+getHealthz)
	resp, body := c.response(t)
	if resp.StatusCode != http.StatusOK || body != "ok\n" || !resp.Close {
		t.Fatalf("chunked GET: %d close=%v %q", resp.StatusCode, resp.Close, body)
	}
	c.closedAfter(t, "a chunked request")
}

// A head over the cap is answered 431 and its connection closed; one that
// carries an oversized token still fits, so the API answers it with 401.
func TestAHeadOverTheCapIs431AndClosed(t *testing.T) {
	w := serveWire(t, 0)
	c := w.dial()
	c.send(t, "GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: "+strings.Repeat("p", httpapi.MaxHeaderBytes+8<<10)+"\r\n\r\n")
	resp, _ := c.response(t)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a %d KiB head: %d, want 431", (httpapi.MaxHeaderBytes+8<<10)>>10, resp.StatusCode)
	}
	c.closedAfter(t, "the 431")

	c = w.dial()
	c.send(t, "POST /v1/namespaces/acme/outcomes HTTP/1.1\r\nHost: relay\r\nContent-Length: 0\r\nAuthorization: Bearer "+strings.Repeat("t", 2*httpapi.MaxTokenBytes)+"\r\n\r\n")
	resp, body := c.response(t)
	wantProblem(t, resp, body, http.StatusUnauthorized, httpapi.SlugUnauthorized)
}

// Connections over the limit, none of those open idle, are answered 503
// with Retry-After and closed, before a request is read; once one closes,
// a new one is served.
func TestConnectionsOverTheLimitAreAnswered503AndClosed(t *testing.T) {
	const limit = 3
	// The held connections send nothing, and their clock never moves: they
	// stay within the grace however slowly the test runs.
	w := serveWireWith(t, httpapi.ListenerConfig{MaxConnections: limit, Clock: clock.NewManual(0)})
	held := make([]*clientConn, limit)
	for i := range held {
		// Open, its first request not sent yet: not idle.
		held[i] = w.dial()
	}
	await(t, w.opened, limit, "connections accepted")
	for range 2 {
		c := w.dial()
		c.send(t, getHealthz)
		resp, body := c.response(t)
		wantProblem(t, resp, body, http.StatusServiceUnavailable, httpapi.SlugUnavailable)
		if resp.Header.Get("Retry-After") == "" || !resp.Close || resp.Header.Get(httpapi.HeaderRequestID) == "" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Fatalf("503 without Retry-After, Connection: close, a request id or Cache-Control: no-store: %v", resp.Header)
		}
		c.closedAfter(t, "the 503")
	}
	if n := gauge(t, w.h, "relay_http_connections_refused_total"); n != 2 {
		t.Errorf("refused connections counted %v, want 2", n)
	}

	if n := gauge(t, w.h, "relay_http_connections_open"); n != limit {
		t.Errorf("open connections %v, want %d", n, limit)
	}

	for i, c := range held {
		c.send(t, getHealthz)
		if resp, _ := c.response(t); resp.StatusCode != http.StatusOK {
			t.Fatalf("held connection %d: %d", i, resp.StatusCode)
		}
	}
	_ = held[0].Close()
	<-w.closed
	c := w.dial()
	c.send(t, getHealthz)
	if resp, _ := c.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a connection closed: %d, want 200", resp.StatusCode)
	}
	// The held connections were never disturbed.
	held[1].send(t, getHealthz)
	if resp, _ := held[1].response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("a held connection: %d", resp.StatusCode)
	}
}

// gauge is the value of the unlabelled metric name in h's registry.
func gauge(t *testing.T, h *harness, name string) float64 {
	t.Helper()
	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			m := f.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// At the limit a new connection is served in the place of the connection
// idle longest, which is closed; the others are left alone.
func TestAtTheLimitTheLongestIdleConnectionMakesRoom(t *testing.T) {
	const limit = 2
	w := serveWire(t, limit)
	held := make([]*clientConn, limit)
	for i := range held {
		held[i] = w.dial()
		held[i].send(t, getHealthz)
		if resp, _ := held[i].response(t); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %d", i, resp.StatusCode)
		}
		await(t, w.idle, 1, "the connection idle")
	}
	c := w.dial()
	c.send(t, getHealthz)
	if resp, body := c.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection at the limit with two idle: %d %s", resp.StatusCode, body)
	}
	held[0].closedAfter(t, "making room")
	held[1].send(t, getHealthz)
	if resp, _ := held[1].response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("the connection idle for less time: %d", resp.StatusCode)
	}
	if n := gauge(t, w.h, "relay_http_connections_refused_total"); n != 0 {
		t.Errorf("refused connections counted %v, want 0", n)
	}
	if n := gauge(t, w.h, "relay_http_connections_open"); n != limit {
		t.Errorf("open connections %v, want %d", n, limit)
	}
}

// At the limit a new connection takes the slot of the connection that has
// waited longest for its first whole request head, once it has waited the
// grace, before any idle one; a connection that has sent a whole head, its
// request still being read, is never closed so.
func TestAtTheLimitAConnectionSilentPastTheGraceMakesRoom(t *testing.T) {
	const limit = 3
	clk := clock.NewManual(0)
	w := serveWireWith(t, httpapi.ListenerConfig{MaxConnections: limit, Clock: clk})
	// A whole head, its body not sent: net/http reads the body before it
	// answers, so the connection is neither idle nor waiting for a head.
	headed := w.dial()
	headed.send(t, "POST /healthz HTTP/1.1\r\nHost: relay\r\nContent-Length: 5\r\n\r\n")
	await(t, w.active, 1, "the POST's head read")
	// Part of a head, then nothing at all: both waiting for a whole head.
	partial := w.dial()
	partial.send(t, "GET /healthz HTTP/1.1\r\nHost: relay\r\n")
	await(t, w.opened, 2, "connections accepted")
	silent := w.dial()
	await(t, w.opened, 1, "the silent connection accepted")

	clk.Advance(httpapi.DefaultHeadGrace - time.Millisecond)
	c := w.dial()
	c.send(t, getHealthz)
	resp, body := c.response(t)
	wantProblem(t, resp, body, http.StatusServiceUnavailable, httpapi.SlugUnavailable)
	c.closedAfter(t, "the 503")

	clk.Advance(time.Millisecond)
	first := w.dial()
	first.send(t, getHealthz)
	if resp, body := first.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection at the limit, one waiting past the grace: %d %s", resp.StatusCode, body)
	}
	partial.closedAfter(t, "making room")
	await(t, w.idle, 1, "the served connection idle")
	// The silent one goes next, before the connection idle meanwhile.
	second := w.dial()
	second.send(t, getHealthz)
	if resp, body := second.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("the next connection at the limit: %d %s", resp.StatusCode, body)
	}
	silent.closedAfter(t, "making room")
	first.send(t, getHealthz)
	if resp, _ := first.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("the connection idle meanwhile: %d", resp.StatusCode)
	}
	// The connection whose head was read is still served.
	headed.send(t, "hello"+getHealthz)
	if resp, _ := headed.response(t); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("the POST whose head was read: %d", resp.StatusCode)
	}
	if resp, _ := headed.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("the connection whose head was read: %d", resp.StatusCode)
	}
	if n := gauge(t, w.h, "relay_http_connections_refused_total"); n != 1 {
		t.Errorf("refused connections counted %v, want 1", n)
	}
}

// A client that pipelines requests and never reads their answers blocks
// the server's writes once the buffers between them are full: it is closed
// within the write stall, and its slot freed.
func TestAClientThatStopsReadingIsClosedWithinTheWriteStall(t *testing.T) {
	const limit = 2
	w := serveWireWith(t, httpapi.ListenerConfig{MaxConnections: limit, WriteStall: 200 * time.Millisecond})
	small := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048)
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	reqs := []byte(strings.Repeat(getHealthz, 200_000))
	for range limit {
		c, err := small.Dial("tcp", w.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		go func() { _, _ = c.Write(reqs) }()
	}
	await(t, w.closed, limit, "clients that stopped reading closed")
	if n := gauge(t, w.h, "relay_http_connections_open"); n != 0 {
		t.Errorf("open connections %v, want 0", n)
	}
	c := w.dial()
	c.send(t, getHealthz)
	if resp, _ := c.response(t); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new connection: %d, want 200", resp.StatusCode)
	}
}
