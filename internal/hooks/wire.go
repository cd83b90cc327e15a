package hooks

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
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
	errAnswerMalformed = errors.New("hooks: malformed HTTP answer")
	errAnswerHeaders   = errors.New("hooks: answer headers too large")
	errHeaderInvalid   = errors.New("hooks: request header not valid in HTTP")
	errHostNotASCII    = errors.New("hooks: host is not ASCII")
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

// answerHead is what the channel reads of an answer's status line and
// header.
type answerHead struct {
	status     int
	retryAfter string
	length     int64 // -1 when not declared
	chunked    bool
	keepAlive  bool
	started    bool // a byte of it was read
}

// readHead reads a status line and header, within budget bytes.
func readHead(br *bufio.Reader, budget *int) (answerHead, error) {
	h := answerHead{length: -1}
	line, err := readLine(br, budget)
	if len(line) > 0 || err == nil || errors.Is(err, errAnswerHeaders) {
		h.started = true
	}
	if err != nil {
		return h, err
	}
	minor, status, ok := parseStatusLine(line)
	if !ok {
		return h, errAnswerMalformed
	}
	h.status = status
	h.keepAlive = minor >= 1
	var (
		sawLength, framing bool
		teCount            int
	)
	for {
		line, err := readLine(br, budget)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			// A continuation of the line before: of no header the channel
			// reads, unless that one frames the body.
			if framing {
				return h, errAnswerMalformed
			}
			continue
		}
		colon := indexByte(line, ':')
		if colon <= 0 || !validHeaderName(line[:colon]) {
			return h, errAnswerMalformed
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		framing = false
		switch {
		case equalFold(name, "content-length"):
			framing = true
			n, ok := parseLength(value)
			if !ok || sawLength && n != h.length {
				return h, errAnswerMalformed
			}
			h.length, sawLength = n, true
		case equalFold(name, "transfer-encoding"):
			framing = true
			teCount++
			if teCount > 1 || !equalFold(value, "chunked") {
				return h, errAnswerMalformed // net/http supports chunked alone too
			}
			h.chunked = true
		case equalFold(name, "connection"):
			for _, tok := range splitComma(value) {
				switch {
				case equalFold(tok, "close"):
					h.keepAlive = false
				case equalFold(tok, "keep-alive") && minor == 0:
					h.keepAlive = true
				}
			}
		case equalFold(name, "retry-after"):
			if h.retryAfter == "" {
				h.retryAfter = string(value)
			}
		}
	}
	if h.chunked && sawLength {
		// Both framings: chunked decides (RFC 9112 6.3), and the
		// connection is not trusted with another request.
		h.length, h.keepAlive = -1, false
	}
	if !h.chunked && h.length < 0 && h.status != http.StatusNoContent && h.status != http.StatusNotModified && h.status >= 200 {
		h.keepAlive = false // the body ends with the connection
	}
	return h, nil
}

// readLine reads one line, without its CRLF (or bare LF), taking its bytes
// from budget: a line past it is errAnswerHeaders.
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(long) > *budget {
				return nil, errAnswerHeaders
			}
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	*budget -= len(line)
	if *budget < 0 {
		return nil, errAnswerHeaders
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				return line, io.ErrUnexpectedEOF
			}
			return nil, io.EOF
		}
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// parseStatusLine reads "HTTP/1.x NNN reason": the minor version and the
// status.
func parseStatusLine(line []byte) (minor, status int, ok bool) {
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' {
		return 0, 0, false
	}
	if line[7] < '0' || line[7] > '9' {
		return 0, 0, false
	}
	minor = int(line[7] - '0')
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		status = status*10 + int(c-'0')
	}
	if status < 100 || len(line) > 12 && line[12] != ' ' {
		return 0, 0, false
	}
	return minor, status, true
}

// parseLength reads a Content-Length: digits only, no sign, at most 18 of
// them.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// appendRequest appends req as HTTP/1.1 to buf: its request line, Host, its
// header but for the fields net/http also leaves out, Content-Length, and
// body. A header name or value that HTTP cannot carry refuses the request,
// as net/http does.
func appendRequest(buf []byte, req *http.Request, body []byte) ([]byte, error) {
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f {
			return buf, errHostNotASCII
		}
	}
	buf = append(buf, "POST "...)
	buf = append(buf, req.URL.RequestURI()...)
	buf = append(buf, " HTTP/1.1\r\nHost: "...)
	buf = append(buf, host...)
	buf = append(buf, "\r\n"...)
	for name, values := range req.Header {
		switch name {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue
		}
		if !validHeaderName([]byte(name)) {
			return buf, errHeaderInvalid
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return buf, errHeaderInvalid
			}
			buf = append(buf, name...)
			buf = append(buf, ": "...)
			buf = append(buf, trimOWSString(v)...)
			buf = append(buf, "\r\n"...)
		}
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(body)), 10)
	buf = append(buf, "\r\n\r\n"...)
	return append(buf, body...), nil
}

// validHeaderName: a token (RFC 9110 5.6.2).
func validHeaderName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c >= 0x80 || !isTokenByte[c] {
			return false
		}
	}
	return true
}

// validHeaderValue: no control byte but horizontal tab (RFC 9110 5.5), as
// net/http checks.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

var isTokenByte = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func trimOWSString(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// equalFold compares b with a lower-case ASCII word, ignoring case.
func equalFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func splitComma(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := indexByte(b, ',')
		if i < 0 {
			out = append(out, trimOWS(b))
			break
		}
		out = append(out, trimOWS(b[:i]))
		b = b[i+1:]
	}
	return out
}
