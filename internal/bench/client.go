package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The load phases' client. The bench shares its cores with relay, so what
// the client spends is taken from what it measures: net/http spent some
// 40 µs of CPU a single POST, this one some 13, most of it the write and
// read syscalls. It writes a request encoded before the phase's clock
// starts in one Write, on a keep-alive connection per worker, and reads the
// answer through a buffer kept with the connection. The setup calls still
// go through net/http.
const (
	// benchDialTimeout bounds one dial, TLS handshake included.
	benchDialTimeout = 5 * time.Second
	// benchIdle is the longest a load connection rests before it is dialled
	// anew rather than reused: a server may close an idle connection, and
	// a POST written into one that is closing fails.
	benchIdle = 2 * time.Second
	// benchAnswerLimit is the most of an answer's body kept; a connection
	// whose answer was longer is closed.
	benchAnswerLimit = 1 << 20
)

// loadTarget is where the load phases POST: what to dial, and the head
// every request starts with.
type loadTarget struct {
	addr string      // host:port
	tls  *tls.Config // nil for http
	host string      // the Host header
	path string      // the URL's path, "" or "/prefix"
	auth string      // the Authorization header
}

func newLoadTarget(base, token string) (*loadTarget, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("the token holds a line break")
	}
	t := &loadTarget{host: u.Host, path: strings.TrimSuffix(u.EscapedPath(), "/"), auth: "Bearer " + token}
	port := u.Port()
	switch u.Scheme {
	case "http":
		port = cmp.Or(port, "80")
	case "https":
		port = cmp.Or(port, "443")
		t.tls = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	default:
		return nil, fmt.Errorf("%q is not an http(s) URL", base)
	}
	t.addr = net.JoinHostPort(u.Hostname(), port)
	return t, nil
}

// head is the head of a POST of JSON to path, up to the value of its
// Content-Length.
func (t *loadTarget) head(path string) string {
	return "POST " + t.path + path + " HTTP/1.1\r\nHost: " + t.host + "\r\nAuthorization: " + t.auth +
		"\r\nContent-Type: application/json\r\nContent-Length: "
}

// appendRequest appends head, the length of body, and body to dst: a
// whole request.
func appendRequest(dst []byte, head string, body []byte) []byte {
	dst = slices.Grow(dst, len(head)+24+len(body))
	dst = append(dst, head...)
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, "\r\n\r\n"...)
	return append(dst, body...)
}

func (t *loadTarget) conn() *loadConn {
	return &loadConn{target: t, timeout: benchRequestTimeout, idle: benchIdle}
}

// loadConn is one keep-alive HTTP/1.1 connection, used by one goroutine
// at a time. It is dialled on first use, and again after an error, a
// Connection: close, or a rest longer than idle.
type loadConn struct {
	target  *loadTarget
	timeout time.Duration // bounds one request, dial included
	idle    time.Duration
	nc      net.Conn
	br      *bufio.Reader
	lastUse time.Time
	// body holds the last answer's body until the next request.
	body []byte
	// wire and scratch are where the next request is written.
	wire, scratch []byte
}

// do writes req, a whole HTTP/1.1 request, and returns the answer's status
// and body. The body is the connection's own: it changes with the next
// request.
func (c *loadConn) do(ctx context.Context, req []byte) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	now := time.Now()
	deadline := now.Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if c.nc != nil && now.Sub(c.lastUse) > c.idle {
		c.close()
	}
	if c.nc == nil {
		if err := c.dial(ctx, deadline); err != nil {
			return 0, nil, err
		}
	}
	nc := c.nc
	if err := nc.SetDeadline(deadline); err != nil {
		c.close()
		return 0, nil, err
	}
	// An ended ctx cuts the request short through the deadline, which
	// spoils the connection for the next one.
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	code, keep, err := c.roundTrip(req)
	if !stop() {
		keep = false
		if err != nil {
			err = ctx.Err()
		}
	}
	if err != nil || !keep {
		c.close()
	} else {
		c.lastUse = time.Now()
	}
	if err != nil {
		return 0, nil, err
	}
	return code, c.body, nil
}

func (c *loadConn) dial(ctx context.Context, deadline time.Time) error {
	d := net.Dialer{Timeout: benchDialTimeout, Deadline: deadline}
	nc, err := d.DialContext(ctx, "tcp", c.target.addr)
	if err != nil {
		return err
	}
	if c.target.tls != nil {
		tc := tls.Client(nc, c.target.tls)
		hctx, cancel := context.WithDeadline(ctx, deadline)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			return err
		}
		nc = tc
	}
	c.nc = nc
	if c.br == nil {
		c.br = bufio.NewReaderSize(nc, 16<<10)
	} else {
		c.br.Reset(nc)
	}
	return nil
}

func (c *loadConn) close() {
	if c.nc != nil {
		_ = c.nc.Close()
		c.nc = nil
	}
}

// roundTrip writes req and reads the answer into c.body. keep says the
// connection may carry another request.
func (c *loadConn) roundTrip(req []byte) (code int, keep bool, err error) {
	if _, err := c.nc.Write(req); err != nil {
		return 0, false, fmt.Errorf("write request: %w", err)
	}
	code, c.body, keep, err = readAnswer(c.br, c.body[:0])
	if err != nil {
		return 0, false, fmt.Errorf("read answer: %w", err)
	}
	return code, keep, nil
}

// errBadAnswer is an answer the bench cannot read as HTTP/1.x.
var errBadAnswer = errors.New("malformed HTTP answer")

// readAnswer reads one HTTP/1.x answer from br: its status, its body
// appended to buf, and whether the connection may carry another request.
// It takes Content-Length, chunked and read-to-close bodies and skips 1xx
// answers, and refuses what it cannot frame rather than guess. It reads
// only what the bench needs, and allocates nothing: http.ReadResponse took
// 1.4 µs and 14 allocations an answer, a tenth of the client's CPU; this
// takes 0.16 µs.
func readAnswer(br *bufio.Reader, buf []byte) (code int, body []byte, keep bool, err error) {
	for {
		line, err := br.ReadSlice('\n')
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF // io.EOF alone: closed before answering
		}
		if err != nil {
			return 0, buf, false, err
		}
		line = trimEOL(line)
		// HTTP/1.x NNN[ reason]
		if len(line) < 12 || string(line[:7]) != "HTTP/1." || (line[7] != '0' && line[7] != '1') || line[8] != ' ' ||
			(len(line) > 12 && line[12] != ' ') {
			return 0, buf, false, fmt.Errorf("%w: status line %q", errBadAnswer, line)
		}
		http11 := line[7] == '1'
		code = 0
		for _, d := range line[9:12] {
			if d < '0' || d > '9' {
				return 0, buf, false, fmt.Errorf("%w: status line %q", errBadAnswer, line)
			}
			code = code*10 + int(d-'0')
		}
		length, chunked, closing, keepAlive, err := readAnswerHeader(br)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return 0, buf, false, err
		}
		keep = !closing && (http11 || keepAlive)
		switch {
		case code >= 100 && code < 200 && code != http.StatusSwitchingProtocols:
			continue // the answer follows
		case code < 100:
			return 0, buf, false, fmt.Errorf("%w: status %d", errBadAnswer, code)
		case code == http.StatusSwitchingProtocols:
			return code, buf, false, nil
		case code == http.StatusNoContent || code == http.StatusNotModified:
			return code, buf, keep, nil
		case chunked:
			buf, err = readChunked(br, buf)
		case length >= 0:
			buf, err = readBodyBytes(br, buf, length)
		default:
			// Neither length nor chunks: the body ends with the connection.
			keep = false
			buf, err = readToEOF(br, buf)
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return code, buf, keep && err == nil, err
	}
}

// readAnswerHeader reads header lines up to the blank one and returns what
// framing the body has and what Connection says. length is -1 when no
// Content-Length came.
func readAnswerHeader(br *bufio.Reader) (length int64, chunked, closing, keepAlive bool, err error) {
	length = -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, false, false, false, err
		}
		line = trimEOL(line)
		if len(line) == 0 {
			return length, chunked, closing, keepAlive, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || name[0] == ' ' || name[0] == '\t' {
			return 0, false, false, false, fmt.Errorf("%w: header line %q", errBadAnswer, line)
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			n, ok := parseDecimal(value)
			if !ok || (length >= 0 && n != length) {
				return 0, false, false, false, fmt.Errorf("%w: Content-Length %q", errBadAnswer, value)
			}
			length = n
		case asciiEqualFold(name, "Transfer-Encoding"):
			if !asciiEqualFold(value, "chunked") {
				return 0, false, false, false, fmt.Errorf("%w: Transfer-Encoding %q", errBadAnswer, value)
			}
			chunked = true
		case asciiEqualFold(name, "Connection"):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.Trim(tok, " \t")
				closing = closing || asciiEqualFold(tok, "close")
				keepAlive = keepAlive || asciiEqualFold(tok, "keep-alive")
			}
		}
	}
}

// readChunked appends a chunked body to buf and reads its trailer.
func readChunked(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return buf, err
		}
		line = trimEOL(line)
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // a chunk extension
		}
		size, ok := parseHex(bytes.Trim(line, " \t"))
		if !ok {
			return buf, fmt.Errorf("%w: chunk size %q", errBadAnswer, line)
		}
		if size == 0 {
			for { // trailer fields, up to a blank line
				line, err := br.ReadSlice('\n')
				if err != nil {
					return buf, err
				}
				if len(trimEOL(line)) == 0 {
					return buf, nil
				}
			}
		}
		if buf, err = readBodyBytes(br, buf, size); err != nil {
			return buf, err
		}
		line, err = br.ReadSlice('\n')
		if err != nil {
			return buf, err
		}
		if len(trimEOL(line)) != 0 {
			return buf, fmt.Errorf("%w: chunk longer than its size", errBadAnswer)
		}
	}
}

// readBodyBytes appends the next n bytes of br to buf.
func readBodyBytes(br *bufio.Reader, buf []byte, n int64) ([]byte, error) {
	if n > int64(benchAnswerLimit-len(buf)) {
		return buf, fmt.Errorf("answer body longer than %d bytes", benchAnswerLimit)
	}
	buf = slices.Grow(buf, int(n))
	m, err := io.ReadFull(br, buf[len(buf):len(buf)+int(n)])
	return buf[:len(buf)+m], err
}

// readToEOF appends the rest of br to buf.
func readToEOF(br *bufio.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= benchAnswerLimit {
				return buf, fmt.Errorf("answer body longer than %d bytes", benchAnswerLimit)
			}
			buf = slices.Grow(buf, min(max(len(buf), 512), benchAnswerLimit-len(buf)))
		}
		n, err := br.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

// asciiEqualFold is strings.EqualFold for ASCII, without converting b.
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i]|0x20, s[i]|0x20 // lower-cases letters; the rest must match exactly
		if x != y || (b[i] != s[i] && (x < 'a' || x > 'z')) {
			return false
		}
	}
	return true
}

// parseDecimal reads a Content-Length: digits only, at most 18 of them.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// parseHex reads a chunk size: hex digits only, at most 15 of them.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, d := range b {
		var v byte
		switch {
		case d >= '0' && d <= '9':
			v = d - '0'
		case d >= 'a' && d <= 'f':
			v = d - 'a' + 10
		case d >= 'A' && d <= 'F':
			v = d - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(v)
	}
	return n, true
}
