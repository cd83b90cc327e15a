package outbound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// Class says why a delivery attempt failed, so the driver can branch and
// operators can count without parsing messages.
type Class string

const (
	// ClassStatus: the endpoint answered with a non-2xx status not covered below.
	ClassStatus Class = "status"
	// ClassGone: the endpoint answered 410; the driver disables it.
	ClassGone Class = "gone"
	// ClassRedirect: the endpoint answered 3xx; redirects are never followed.
	ClassRedirect Class = "redirect"
	// ClassURL: the endpoint URL breaks a rule that needs no DNS (scheme,
	// userinfo, missing host, plain http to anything but an allowed loopback,
	// an origin with a second spelling such as a port with a leading zero,
	// a path or query a request line cannot carry).
	ClassURL Class = "url"
	// ClassRefused: the SSRF guard refused every address of the endpoint.
	ClassRefused Class = "refused"
	// ClassDNS: the endpoint's name did not resolve.
	ClassDNS Class = "dns"
	// ClassConnect: no TCP connection could be made to a permitted address.
	ClassConnect Class = "connect"
	// ClassTLS: the TLS handshake failed (certificate, version, not TLS).
	ClassTLS Class = "tls"
	// ClassTimeout: the call's deadline, or a transport timeout, cut the attempt.
	ClassTimeout Class = "timeout"
	// ClassCanceled: the caller canceled the call (shutdown); not the endpoint's fault.
	ClassCanceled Class = "canceled"
	// ClassTransport: the connection broke or the answer was not valid HTTP.
	ClassTransport Class = "transport"
)

// Error is a failed attempt. Its text is safe to store and show to the
// endpoint's owner: it never holds the URL (its query may carry a token),
// headers, either body, or the addresses a name resolved to.
type Error struct {
	Class      Class
	Status     int           // HTTP status when there was one
	RetryAfter time.Duration // from Retry-After on 429/503, at most 15 min; 0 when absent
	Gone       bool          // 410
	// Excerpt is the start of the answer's body when the endpoint answered
	// a non-2xx status: its first MaxExcerptBytes at most, the bytes as the
	// endpoint sent them, so untrusted (a caller makes them printable
	// before showing them). Only the answer's: never a request header or
	// body. Never part of the error's text.
	Excerpt []byte

	reason string // a fixed phrase chosen by this package, never text from the wire
}

func (e *Error) Error() string {
	switch e.Class {
	case ClassStatus, ClassGone, ClassRedirect:
		msg := fmt.Sprintf("webhook: endpoint answered %d", e.Status)
		if e.reason != "" {
			msg += " (" + e.reason + ")"
		}
		if e.RetryAfter > 0 {
			msg += ", retry after " + e.RetryAfter.String()
		}
		return msg
	}
	if e.reason == "" {
		return "webhook: " + string(e.Class)
	}
	return "webhook: " + string(e.Class) + ": " + e.reason
}

// targetReason is why an endpoint whose path or query holds a byte a
// request line cannot carry is not called.
const targetReason = "the URL's path or query holds a space, a control byte, a byte that is not ASCII or one of \"<>\\^`{|}; register it percent-encoded"

// errNotPermitted marks a dial the SSRF guard stopped, wherever in the
// transport's error chain it ends up.
var errNotPermitted = errors.New("destination address not permitted")

// statusError maps a non-2xx answer to its Error.
func statusError(status int, retryAfter time.Duration) *Error {
	switch {
	case status >= 300 && status < 400:
		return &Error{Class: ClassRedirect, Status: status, reason: "redirects are not followed"}
	case status == 410:
		return &Error{Class: ClassGone, Status: status, Gone: true, reason: "gone"}
	default:
		return &Error{Class: ClassStatus, Status: status, RetryAfter: retryAfter}
	}
}

// transportError classifies an error from http.Client.Do. It reads types, not
// messages, and keeps none of the original text: url.Error and net.OpError
// both print the URL or addresses.
func transportError(ctx context.Context, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// The caller's context first: once it is done, whatever the transport
	// saw last is a consequence.
	switch ctx.Err() {
	case context.DeadlineExceeded:
		return &Error{Class: ClassTimeout, reason: "no answer before the deadline"}
	case context.Canceled:
		return &Error{Class: ClassCanceled}
	}
	switch {
	case errors.Is(err, errHostNotASCII):
		return &Error{Class: ClassURL, reason: "host is not ASCII; register its punycode form"}
	case errors.Is(err, errTargetInvalid):
		return &Error{Class: ClassURL, reason: targetReason}
	case errors.Is(err, errHeaderInvalid):
		return &Error{Class: ClassTransport, reason: "a request header is not valid in HTTP"}
	case errors.Is(err, errAnswerMalformed):
		return &Error{Class: ClassTransport, reason: "the answer is not valid HTTP/1.1"}
	case errors.Is(err, errAnswerHeaders):
		return &Error{Class: ClassTransport, reason: "the answer's header is over 64 KiB"}
	}
	if errors.Is(err, errNotPermitted) || errors.Is(err, ssrf.ErrProhibitedIP) ||
		errors.Is(err, ssrf.ErrProhibitedNetwork) || errors.Is(err, ssrf.ErrProhibitedPort) {
		return &Error{Class: ClassRefused, reason: errNotPermitted.Error()}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		switch {
		case dnsErr.IsNotFound:
			return &Error{Class: ClassDNS, reason: "name not found"}
		case dnsErr.IsTimeout:
			return &Error{Class: ClassDNS, reason: "lookup timed out"}
		default:
			return &Error{Class: ClassDNS, reason: "lookup failed"}
		}
	}
	if reason, ok := tlsReason(err); ok {
		return &Error{Class: ClassTLS, reason: reason}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Class: ClassTimeout, reason: "no answer before the deadline"}
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		if opErr.Timeout() {
			return &Error{Class: ClassTimeout, reason: "connect timed out"}
		}
		return &Error{Class: ClassConnect, reason: errnoReason(err)}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		// TLS handshake or response-header timeout of the transport.
		return &Error{Class: ClassTimeout, reason: "transport timeout"}
	}
	return &Error{Class: ClassTransport, reason: errnoReason(err)}
}

// tlsReason names a TLS failure in a fixed phrase.
func tlsReason(err error) (string, bool) {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		alert       tls.AlertError
		header      tls.RecordHeaderError
		echRejected *tls.ECHRejectionError
		remote      *net.OpError
	)
	switch {
	case errors.As(err, &unknownCA):
		return "certificate signed by an unknown authority", true
	case errors.As(err, &hostname):
		return "certificate does not match the host", true
	case errors.As(err, &invalid):
		if invalid.Reason == x509.Expired {
			return "certificate expired or not yet valid", true
		}
		return "certificate invalid", true
	case errors.As(err, &verify):
		return "certificate not verified", true
	case errors.As(err, &alert):
		// The alert's text is crypto/tls's fixed vocabulary.
		return "alert: " + alert.Error(), true
	case errors.As(err, &remote) && remote.Op == "remote error":
		// crypto/tls reports an alert from the peer this way over TCP.
		return "endpoint sent alert: " + strings.TrimPrefix(remote.Err.Error(), "tls: "), true
	case errors.As(err, &header):
		return "endpoint did not answer TLS", true
	case errors.As(err, &echRejected):
		return "encrypted client hello rejected", true
	case strings.HasSuffix(err.Error(), "server gave HTTP response to HTTPS client"):
		// net/http replaces the tls.RecordHeaderError with this text.
		return "endpoint did not answer TLS", true
	}
	return "", false
}

// errnoReason names the socket error behind err, if any.
func errnoReason(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed before a complete answer"
	}
	return "request failed"
}
