package hookverify

import (
	"errors"
	"fmt"
)

// Reasons a request is refused; every error Verify returns matches one of
// them with errors.Is. Their text names the header and the rule, never a
// signature, a secret or the body.
var (
	// ErrMissingHeader: a required header is absent or empty.
	ErrMissingHeader = errors.New("hookverify: missing header")
	// ErrMalformed: a header is repeated or breaks its syntax (hex case or
	// length, a decimal with a sign or a leading zero, a bad key id).
	ErrMalformed = errors.New("hookverify: malformed header")
	// ErrVersion: X-Mkit-Hook-Version is not "2" (MkitVersion); "1", which
	// signs no namespace, included.
	ErrVersion = errors.New("hookverify: unsupported signature version")
	// ErrUnknownKey: the key id is not in the key list.
	ErrUnknownKey = errors.New("hookverify: unknown key id")
	// ErrKeyInactive: now, or the request's created-at, is outside the
	// key's notBeforeMs/notAfterMs.
	ErrKeyInactive = errors.New("hookverify: key not valid now")
	// ErrAudience: the request was signed for another origin.
	ErrAudience = errors.New("hookverify: wrong audience")
	// ErrNamespace: the request was signed for a namespace the receiver
	// does not take (see MkitVerifier.Namespaces), or its body's
	// data.namespace is not the signed one.
	ErrNamespace = errors.New("hookverify: namespace not accepted")
	// ErrWindow: expires-at is not after created-at, or the window is longer
	// than 300,000 ms.
	ErrWindow = errors.New("hookverify: invalid validity window")
	// ErrNotYetValid: the request claims a time further ahead of the
	// receiver's clock than allowed.
	ErrNotYetValid = errors.New("hookverify: signed in the future")
	// ErrExpired: the signature's window (or tolerance) has passed.
	ErrExpired = errors.New("hookverify: signature expired")
	// ErrDigest: the body is not the one the digest names.
	ErrDigest = errors.New("hookverify: body digest mismatch")
	// ErrBadSignature: no signature matches.
	ErrBadSignature = errors.New("hookverify: bad signature")
	// ErrReplay: the nonce was accepted before and its window is still open.
	ErrReplay = errors.New("hookverify: replayed nonce")
	// ErrNonceCacheFull: the replay cache holds its maximum of unexpired
	// nonces. The request is refused rather than a nonce forgotten; the
	// sender retries.
	ErrNonceCacheFull = errors.New("hookverify: nonce cache full")
	// ErrNoScheme: EitherVerifier holds no verifier for the scheme the
	// request's headers name, or it names none.
	ErrNoScheme = errors.New("hookverify: no verifier for this request's scheme")
	// ErrBodyTooLarge: Middleware refused a body over its limit.
	ErrBodyTooLarge = errors.New("hookverify: body too large")
	// ErrConfig: the verifier itself is misconfigured (no keys or secrets, a
	// bad audience, no namespace accepted, a malformed secret or key entry).
	// The sender is not at fault.
	ErrConfig = errors.New("hookverify: verifier misconfigured")
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}
