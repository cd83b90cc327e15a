package schema

import (
	"slices"
	"strings"
)

// Limits of an endpoint's call timeout and custom headers.
const (
	// MinTimeoutMs and MaxTimeoutMs bound an endpoint's timeout_ms. The
	// ceiling keeps every fire within its bound (the delivery handler's
	// budget plus one default call, 15 s), which the shortest lease a driver
	// takes (20 s) outlasts; a longer call would leave the fire no time to
	// launch calls in.
	MinTimeoutMs = 1000
	MaxTimeoutMs = 10000
	// DefaultTimeoutMs is what an endpoint without timeout_ms is shown with:
	// the delivery handler's default call timeout.
	DefaultTimeoutMs = 5000

	MaxHeaders          = 10
	MaxHeaderNameBytes  = 64
	MaxHeaderValueBytes = 1024
	// RedactedHeader stands for a secret header's value wherever the value
	// is shown. A registration carrying it is refused, so an endpoint read
	// and written back cannot store the placeholder as a credential.
	RedactedHeader = "[redacted]"
)

// HeaderValue is the value of an endpoint's custom header. It formats as a
// redacted placeholder, so printing an Endpoint never leaks a credential a
// header carries; string(v) is the value.
type HeaderValue string

// String redacts the value.
func (HeaderValue) String() string { return RedactedHeader }

// GoString redacts the value.
func (v HeaderValue) GoString() string { return v.String() }

// deniedHeaders are names an endpoint may not set: the framing and
// hop-by-hop headers, which belong to the connection rather than the
// request; the headers relay sets itself (Content-Type, User-Agent, the
// body's encoding, the trace context); and, through deniedHeaderPrefixes, every signature
// header of both schemes.
var deniedHeaders = []string{
	"host", "content-length", "transfer-encoding", "connection", "keep-alive",
	"te", "trailer", "upgrade", "expect", "http2-settings",
	"content-type", "content-encoding", "user-agent",
	"traceparent", "tracestate",
}

// deniedHeaderPrefixes: proxy-* (Proxy-Authorization, Proxy-Connection),
// Standard Webhooks' webhook-id, -timestamp and -signature, and mkit-hook's
// x-mkit-hook-*.
var deniedHeaderPrefixes = []string{"proxy-", "webhook-", "x-mkit-hook-"}

// HeaderDenied reports whether an endpoint may not set the header name.
func HeaderDenied(name string) bool {
	if slices.Contains(deniedHeaders, name) {
		return true
	}
	for _, p := range deniedHeaderPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// validateHeaders names the first header that breaks a rule. The text names
// the header, never its value.
func validateHeaders(h map[string]HeaderValue) error {
	if len(h) > MaxHeaders {
		return invalidf("headers must hold at most %d headers", MaxHeaders)
	}
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	// The first broken rule in name order, so the same body always gets
	// the same answer.
	slices.Sort(names)
	for _, n := range names {
		switch {
		case !headerName(n):
			return invalidf("headers: a name must be a lower-case HTTP token of 1 to %d bytes (letters a-z, digits and !#$%%&'*+-.^_`|~)", MaxHeaderNameBytes)
		case HeaderDenied(n):
			return invalidf("headers.%s is set by relay or belongs to the connection; it cannot be sent", n)
		case !headerValue(string(h[n])):
			return invalidf("headers.%s must be 1 to %d bytes of printable ASCII, with no leading or trailing space", n, MaxHeaderValueBytes)
		case string(h[n]) == RedactedHeader:
			return invalidf("headers.%s holds the redaction placeholder: send the header's value", n)
		}
	}
	return nil
}

// headerName: an RFC 9110 token without upper-case letters.
func headerName(n string) bool {
	if n == "" || len(n) > MaxHeaderNameBytes {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// headerValue: printable ASCII (no CR, LF, NUL, tab or other control), so
// no value can end the header line or start another.
func headerValue(v string) bool {
	if v == "" || len(v) > MaxHeaderValueBytes || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}
