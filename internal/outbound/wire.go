package outbound

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"
)

// wire is the channel's HTTP/1.1 client. Each call runs on its caller's
// goroutine: the request is written with one write, the answer read from
// the same connection and only as far as the channel needs, and the
// connection goes back to its origin's pool when the answer ended cleanly.
// net/http's client, which it replaces, hands every request to a writing
// and a reading goroutine per connection and builds a Response and its
// header map that the channel reads three fields of: more than half of
// relay's CPU per delivered webhook went there.
//
// What the channel promises is kept here: the connection is dialed by the
// channel's guarded dialer only, no proxy exists, no redirect is followed
// (an answer is an answer), TLS is 1.2 or later, headers are capped at
// maxResponseHeaderSize and the body at the channel's maxBody, and every
// read and write is bounded by the call's deadline.
type wire struct {
	// TLSClientConfig is cloned for each connection, with its ServerName.
	TLSClientConfig *tls.Config
	dial            func(ctx context.Context, network, addr string) (net.Conn, error)
	maxConns        int
	maxBody         int64
	// idleTimeout closes a connection idle this long (idleConnTimeout).
	idleTimeout time.Duration
	// headTimeout bounds the wait for an answer's head
	// (responseHeaderTimeout) when the call's deadline is later.
	headTimeout time.Duration

	mu    sync.Mutex
	hosts map[wireKey]*wireHost
	idle  int // idle connections of every origin
}

// wireKey names an origin's pool: the scheme, and the address dialed.
type wireKey struct {
	tls  bool
	addr string // host:port as the URL names it
}

// wireHost is one origin's connections.
type wireHost struct {
	key wireKey
	// open holds a token per connection open or dialing: at most maxConns,
	// as net/http's MaxConnsPerHost; a call beyond waits for one.
	open  chan struct{}
	idle  []*wireConn // most recently used last
	users int         // calls holding the origin (wire.host)
}

type wireConn struct {
	host   *wireHost
	conn   net.Conn // the TLS connection for https
	br     *bufio.Reader
	wbuf   []byte
	idleAt time.Time
	timer  *time.Timer // closes the connection once idle too long
	pooled bool        // in host.idle
}

// wireAnswer is what the channel reads of an answer.
type wireAnswer struct {
	status     int
	retryAfter string // the first Retry-After value
	excerpt    []byte // a non-2xx answer's first MaxExcerptBytes
}

var (
	errAnswerMalformed = errors.New("outbound: malformed HTTP answer")
	errAnswerHeaders   = errors.New("outbound: answer headers too large")
	errHeaderInvalid   = errors.New("outbound: request header not valid in HTTP")
	errHostNotASCII    = errors.New("outbound: host is not ASCII")
	errTargetInvalid   = errors.New("outbound: request target not valid in HTTP")
	// aLongTimeAgo is a deadline that has passed: set on a connection, it
	// ends the read or write under way.
	aLongTimeAgo = time.Unix(1, 0)
)

const (
	// max1xx bounds the informational answers read before the final one.
	max1xx = 5
	// staleAfter: a connection idle this long is checked for a close by
	// the peer before it is used, at the cost of one system call.
	staleAfter = time.Second
	// maxKeptWriteBuffer: a connection keeps its request buffer between
	// calls up to this size.
	maxKeptWriteBuffer = 64 << 10
)

func newWire(cfg *tls.Config, dial func(ctx context.Context, network, addr string) (net.Conn, error), maxConns int, maxBody int64) *wire {
	return &wire{TLSClientConfig: cfg, dial: dial, maxConns: maxConns, maxBody: maxBody, idleTimeout: idleConnTimeout, headTimeout: responseHeaderTimeout, hosts: map[wireKey]*wireHost{}}
}

// post sends req, whose body is body, and reads its answer. A request that
// found a reused connection closed before any byte of an answer is sent
// once more on a new one: a keep-alive connection the receiver closed
// while it was idle.
func (w *wire) post(ctx context.Context, req *http.Request, body []byte) (wireAnswer, error) {
	key, err := wireKeyOf(req)
	if err != nil {
		return wireAnswer{}, err
	}
	h := w.host(key)
	defer w.release(h)
	for try := 0; ; try++ {
		// The second try dials: when one kept connection was closed by
		// the receiver, the others likely were too (it restarted).
		wc, reused, err := w.get(ctx, h, req.URL.Hostname(), try > 0)
		if err != nil {
			return wireAnswer{}, err
		}
		ans, keep, answered, err := wc.exchange(ctx, req, body, w.maxBody, w.headTimeout)
		if keep {
			w.put(wc)
		} else {
			w.drop(wc)
		}
		if err != nil && reused && !answered && try == 0 && ctx.Err() == nil {
			continue
		}
		return ans, err
	}
}

func wireKeyOf(req *http.Request) (wireKey, error) {
	host, port := req.URL.Hostname(), req.URL.Port()
	// Checked before the name is looked up: the Host header could not
	// carry it (net/http would send its punycode form).
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f {
			return wireKey{}, errHostNotASCII
		}
	}
	tlsOn := req.URL.Scheme == "https"
	if port == "" {
		port = "80"
		if tlsOn {
			port = "443"
		}
	}
	return wireKey{tls: tlsOn, addr: net.JoinHostPort(host, port)}, nil
}

// host is the origin's pool, held until release: an origin with no call
// under way and no idle connection is forgotten, so that endpoints long
// gone hold no memory.
func (w *wire) host(key wireKey) *wireHost {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.hosts[key]
	if h == nil {
		h = &wireHost{key: key, open: make(chan struct{}, w.maxConns)}
		w.hosts[key] = h
	}
	h.users++
	return h
}

func (w *wire) release(h *wireHost) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h.users--
	w.forget(h)
}

// forget drops an origin no call holds and no idle connection is kept
// for; w.mu is held. Its connections are all closed then: each is held by
// a call or kept idle.
func (w *wire) forget(h *wireHost) {
	if h.users == 0 && len(h.idle) == 0 && w.hosts[h.key] == h {
		delete(w.hosts, h.key)
	}
}

// get takes the origin's most recently used idle connection that is still
// open, or dials a new one once the origin has room for it.
func (w *wire) get(ctx context.Context, h *wireHost, serverName string, fresh bool) (*wireConn, bool, error) {
	for !fresh {
		w.mu.Lock()
		n := len(h.idle)
		if n == 0 {
			w.mu.Unlock()
			break
		}
		wc := h.idle[n-1]
		h.idle[n-1] = nil
		h.idle = h.idle[:n-1]
		wc.pooled = false
		w.idle--
		w.mu.Unlock()
		if time.Since(wc.idleAt) < staleAfter || peerOpen(wc.conn) {
			return wc, true, nil
		}
		w.drop(wc)
	}
	select {
	case h.open <- struct{}{}:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	wc, err := w.dialConn(ctx, h, serverName)
	if err != nil {
		<-h.open
		return nil, false, err
	}
	return wc, false, nil
}

func (w *wire) dialConn(ctx context.Context, h *wireHost, serverName string) (*wireConn, error) {
	conn, err := w.dial(ctx, "tcp", h.key.addr)
	if err != nil {
		return nil, err
	}
	if h.key.tls {
		cfg := w.TLSClientConfig.Clone()
		cfg.ServerName = serverName
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = conn.Close()
			return nil, err
		}
		conn = tc
	}
	return &wireConn{host: h, conn: conn, br: bufio.NewReaderSize(conn, 4096)}, nil
}

// put returns a connection to its origin's idle pool, closing the oldest
// idle one of the origin, or this one, when the pool is full.
func (w *wire) put(wc *wireConn) {
	wc.idleAt = time.Now()
	w.mu.Lock()
	h := wc.host
	var evict *wireConn
	if w.idle >= w.maxConns {
		if len(h.idle) == 0 {
			w.mu.Unlock()
			w.drop(wc)
			return
		}
		evict = h.idle[0]
		h.idle = append(h.idle[:0], h.idle[1:]...)
		evict.pooled = false
		w.idle--
	}
	h.idle = append(h.idle, wc)
	wc.pooled = true
	w.idle++
	if wc.timer == nil {
		wc.timer = time.AfterFunc(w.idleTimeout, func() { w.expire(wc) })
	} else {
		wc.timer.Reset(w.idleTimeout)
	}
	w.mu.Unlock()
	if evict != nil {
		w.drop(evict)
	}
}

// expire closes a connection idle since idleTimeout.
func (w *wire) expire(wc *wireConn) {
	w.mu.Lock()
	if !wc.pooled || time.Since(wc.idleAt) < w.idleTimeout {
		w.mu.Unlock()
		return
	}
	w.unpool(wc)
	w.forget(wc.host)
	w.mu.Unlock()
	w.drop(wc)
}

// unpool takes an idle connection out of its pool; w.mu is held.
func (w *wire) unpool(wc *wireConn) {
	h := wc.host
	for i, c := range h.idle {
		if c == wc {
			h.idle = append(h.idle[:i], h.idle[i+1:]...)
			break
		}
	}
	wc.pooled = false
	w.idle--
}

// drop closes a connection that is in no pool and frees its origin's token.
func (w *wire) drop(wc *wireConn) {
	if wc.timer != nil {
		wc.timer.Stop()
	}
	_ = wc.conn.Close()
	<-wc.host.open
}

// closeIdle closes every idle connection.
func (w *wire) closeIdle() {
	w.mu.Lock()
	var all []*wireConn
	for _, h := range w.hosts {
		for _, wc := range h.idle {
			wc.pooled = false
			all = append(all, wc)
		}
		h.idle = nil
		w.forget(h)
	}
	w.idle = 0
	w.mu.Unlock()
	for _, wc := range all {
		w.drop(wc)
	}
}

// exchange writes the request and reads its answer. keep says the
// connection may carry another request; answered, that a byte of an answer
// came back. An error after the final answer's head is not returned: the
// status is the answer, whatever became of its body.
func (wc *wireConn) exchange(ctx context.Context, req *http.Request, body []byte, maxBody int64, headTimeout time.Duration) (ans wireAnswer, keep, answered bool, err error) {
	callBy, ok := ctx.Deadline()
	deadline := time.Now().Add(headTimeout)
	// cut: the head has less time than the call, whose deadline the body
	// then gets; otherwise one deadline serves both, set once.
	cut := !ok || deadline.Before(callBy)
	if !cut {
		deadline = callBy
	}
	if err := wc.conn.SetDeadline(deadline); err != nil {
		return ans, false, false, err
	}
	stop := context.AfterFunc(ctx, func() { _ = wc.conn.SetDeadline(aLongTimeAgo) })
	defer func() {
		if !stop() {
			keep = false // the deadline was cut short: the connection is spent
		}
	}()

	buf, err := appendRequest(wc.wbuf[:0], req, body)
	if err != nil {
		return ans, false, false, err
	}
	if cap(buf) <= maxKeptWriteBuffer {
		wc.wbuf = buf[:0]
	}
	if _, err := wc.conn.Write(buf); err != nil {
		return ans, false, false, err
	}

	budget := maxResponseHeaderSize
	var head answerHead
	for n1xx := 0; ; n1xx++ {
		head, err = readHead(wc.br, &budget)
		if head.started {
			answered = true
		}
		if err != nil {
			return ans, false, answered, err
		}
		if head.status >= 200 || head.status == http.StatusSwitchingProtocols {
			break
		}
		if n1xx == max1xx {
			return ans, false, answered, errAnswerMalformed
		}
	}
	if head.status == http.StatusSwitchingProtocols {
		return ans, false, answered, errAnswerMalformed // no upgrade was asked for
	}
	ans.status, ans.retryAfter = head.status, head.retryAfter
	if cut && ok && ctx.Err() == nil {
		_ = wc.conn.SetReadDeadline(callBy)
	}
	keep = wc.readBody(&ans, &head, maxBody) && head.keepAlive
	return ans, keep, true, nil
}

// readBody reads the excerpt of a non-2xx answer and then up to maxBody of
// the body, and reports whether the body ended cleanly within it.
func (wc *wireConn) readBody(ans *wireAnswer, head *answerHead, maxBody int64) bool {
	delivered := head.status >= 200 && head.status < 300
	if head.status == http.StatusNoContent || head.status == http.StatusNotModified {
		return wc.br.Buffered() == 0
	}
	var r io.Reader
	switch {
	case head.chunked:
		r = httputil.NewChunkedReader(wc.br)
	case head.length >= 0:
		r = io.LimitReader(wc.br, head.length)
	default:
		r = wc.br // to the end of the connection
	}
	if !delivered {
		excerpt := make([]byte, MaxExcerptBytes)
		n, _ := io.ReadFull(r, excerpt)
		ans.excerpt = excerpt[:n:n]
	}
	// A body declared longer than the cap is not worth reading on.
	if head.length > maxBody {
		return false
	}
	rest := maxBody - int64(len(ans.excerpt))
	n, err := io.CopyN(io.Discard, r, rest+1)
	if n > rest || !errors.Is(err, io.EOF) {
		return false
	}
	if head.length >= 0 && int64(len(ans.excerpt))+n != head.length {
		return false
	}
	switch {
	case head.chunked:
		// The trailer section, read and ignored.
		budget := maxResponseHeaderSize
		for {
			line, err := readLine(wc.br, &budget)
			if err != nil {
				return false
			}
			if len(line) == 0 {
				break
			}
		}
	case head.length < 0:
		return false // it ended with the connection
	}
	// Bytes past the answer were never asked for.
	return wc.br.Buffered() == 0
}
