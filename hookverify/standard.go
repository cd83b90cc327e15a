package hookverify

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"
)

// The Standard Webhooks request headers.
const (
	HeaderStandardID        = "webhook-id"
	HeaderStandardTimestamp = "webhook-timestamp"
	HeaderStandardSignature = "webhook-signature"
)

// DefaultTolerance is how far webhook-timestamp may be from the receiver's
// clock, either way, as the Standard Webhooks libraries allow.
const DefaultTolerance = 5 * time.Minute

// StandardVerifier checks Standard Webhooks requests. It is safe for
// concurrent use. The scheme has no nonce: a request replayed within the
// tolerance verifies again, so receivers deduplicate by webhook-id (stable
// across relay's retries of one message).
type StandardVerifier struct {
	// Secrets are the endpoint's whsec_ secrets; a request signed with any of
	// them verifies, so a rotation can hold the old and the new one.
	Secrets []string
	// Tolerance bounds |now - webhook-timestamp|; DefaultTolerance when 0.
	Tolerance time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// VerifyRequest lets StandardVerifier serve as a Middleware's Verifier.
func (v *StandardVerifier) VerifyRequest(r *http.Request, body []byte) error {
	return v.Verify(r.Header, body)
}

// Verify checks a Standard Webhooks request: headers present, webhook-id
// printable ASCII without '.', webhook-timestamp a canonical decimal within
// the tolerance both ways, and a "v1,<base64>" entry of webhook-signature
// that is the HMAC-SHA256 of id.timestamp.body under one of the secrets
// (compared in constant time). Entries of other versions are skipped.
func (v *StandardVerifier) Verify(h http.Header, body []byte) error {
	keys, tol, err := v.config()
	if err != nil {
		return err
	}
	f, err := singleHeaders(h, HeaderStandardID, HeaderStandardTimestamp, HeaderStandardSignature)
	if err != nil {
		return err
	}
	id, tsS, sigs := f[0], f[1], f[2]
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '.' {
			return errorf(ErrMalformed, "%s must be printable ASCII without spaces or '.'", HeaderStandardID)
		}
	}
	ts, ok := parseDecimal(tsS)
	if !ok {
		return errorf(ErrMalformed, "%s must be a decimal without sign or leading zeros", HeaderStandardTimestamp)
	}
	now := v.now().Unix()
	tolS := int64(tol / time.Second)
	if now-ts > tolS {
		return errorf(ErrExpired, "%s is more than %v old", HeaderStandardTimestamp, tol)
	}
	if ts-now > tolS {
		return errorf(ErrNotYetValid, "%s is more than %v ahead", HeaderStandardTimestamp, tol)
	}

	expected := make([][]byte, len(keys))
	for i, key := range keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(tsS))
		mac.Write([]byte{'.'})
		mac.Write(body)
		expected[i] = mac.Sum(nil)
	}
	for entry := range strings.SplitSeq(sigs, " ") {
		b64, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(got) != sha256.Size {
			continue
		}
		for _, want := range expected {
			if hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return errorf(ErrBadSignature, "no v1 signature of %s matches", HeaderStandardSignature)
}

// Check validates the configuration without a request: at least one
// secret, each whsec_ and the base64 of 24 to 64 bytes, and a tolerance
// that is not negative. Call it at start so that a misconfigured receiver
// refuses to start instead of answering every request 500. Errors match
// ErrConfig.
func (v *StandardVerifier) Check() error {
	_, _, err := v.config()
	return err
}

// config returns the decoded secrets and the tolerance in effect.
func (v *StandardVerifier) config() ([][]byte, time.Duration, error) {
	keys, err := v.keys()
	if err != nil {
		return nil, 0, err
	}
	switch {
	case v.Tolerance < 0:
		return nil, 0, errorf(ErrConfig, "negative tolerance")
	case v.Tolerance == 0:
		return keys, DefaultTolerance, nil
	}
	return keys, v.Tolerance, nil
}

func (v *StandardVerifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// keys decodes the secrets: whsec_ and the standard base64 of 24 to 64
// bytes, the sizes the specification asks for.
func (v *StandardVerifier) keys() ([][]byte, error) {
	if len(v.Secrets) == 0 {
		return nil, errorf(ErrConfig, "no secrets")
	}
	keys := make([][]byte, len(v.Secrets))
	for i, s := range v.Secrets {
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			return nil, errorf(ErrConfig, "secret %d does not start with whsec_", i+1)
		}
		key, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(key) < 24 || len(key) > 64 {
			return nil, errorf(ErrConfig, "secret %d is not the base64 of 24 to 64 bytes", i+1)
		}
		keys[i] = key
	}
	return keys, nil
}
