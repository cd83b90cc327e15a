// Package outbound sends webhook attempts to endpoints relay does not
// trust: the Sender signs each attempt afresh (with internal/signing) and
// posts it through the Channel, which dials only addresses the SSRF guard
// permits over an HTTP/1.1 client of its own. A failed attempt is an *Error
// whose Class says why, and whose text holds no URL, header or body.
package outbound
