package outbound

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The wire client's HTTP/1.1: reading an answer's head, and writing a
// request. wire.go keeps the connections; this file knows the syntax.

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
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !validHeaderName(line[:colon]) {
			return h, errAnswerMalformed
		}
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
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
	target := req.URL.RequestURI()
	if !validTarget(target) {
		return buf, errTargetInvalid
	}
	buf = append(buf, "POST "...)
	buf = append(buf, target...)
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
			buf = append(buf, strings.Trim(v, " \t")...)
			buf = append(buf, "\r\n"...)
		}
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(body)), 10)
	buf = append(buf, "\r\n\r\n"...)
	return append(buf, body...), nil
}

// validTarget: only bytes a URI holds unencoded (RFC 3986: unreserved,
// gen-delims, sub-delims and '%'). A space would end the request target,
// and what follows it pass for the line's version; url.URL keeps a query as
// written, so an endpoint's query could carry one.
func validTarget(t string) bool {
	for i := 0; i < len(t); i++ {
		if c := t[i]; c >= 0x80 || !isTargetByte[c] {
			return false
		}
	}
	return true
}

var isTargetByte = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~:/?#[]@!$&'()*+,;=%" {
		t[c] = true
	}
	return t
}()

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
		i := bytes.IndexByte(b, ',')
		if i < 0 {
			out = append(out, bytes.Trim(b, " \t"))
			break
		}
		out = append(out, bytes.Trim(b[:i], " \t"))
		b = b[i+1:]
	}
	return out
}
