package hookverify

import (
	"crypto/ed25519"
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
	// PublicKeys are the endpoint's whpk_ keys (v1a, Ed25519): a request
	// signed by the private half of any of them verifies. A verifier with
	// public keys and no secrets refuses v1 signatures: whoever holds a
	// whsec_ secret could make those.
	PublicKeys []string
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
// the tolerance both ways, and an entry of webhook-signature that is either
// "v1,<base64>", the HMAC-SHA256 of id.timestamp.body under one of the
// secrets (compared in constant time), or "v1a,<base64>", the Ed25519
// signature of id.timestamp.body under one of the public keys. Entries of
// other versions, and of a version the verifier holds no key for, are
// skipped.
func (v *StandardVerifier) Verify(h http.Header, body []byte) error {
	keys, pubs, tol, err := v.config()
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
	var signed []byte
	if len(pubs) > 0 {
		signed = make([]byte, 0, len(id)+len(tsS)+2+len(body))
		signed = append(append(append(append(append(signed, id...), '.'), tsS...), '.'), body...)
	}
	// strings.Cut rather than strings.SplitSeq: the module builds with Go 1.22.
	for rest, more := sigs, true; more; {
		var entry string
		entry, rest, more = strings.Cut(rest, " ")
		if b64, ok := strings.CutPrefix(entry, "v1a,"); ok {
			got, err := base64.StdEncoding.DecodeString(b64)
			if err != nil || len(got) != ed25519.SignatureSize {
				continue
			}
			for _, pub := range pubs {
				if ed25519.Verify(pub, signed, got) {
					return nil
				}
			}
			continue
		}
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
	return errorf(ErrBadSignature, "no %s signature of %s matches", v.versions(), HeaderStandardSignature)
}

// versions names the signature versions the verifier holds keys for.
func (v *StandardVerifier) versions() string {
	switch {
	case len(v.Secrets) > 0 && len(v.PublicKeys) > 0:
		return "v1 or v1a"
	case len(v.PublicKeys) > 0:
		return "v1a"
	}
	return "v1"
}

// Check validates the configuration without a request: at least one
// secret or public key, each secret whsec_ and the base64 of 24 to 64
// bytes, each public key whpk_ and the base64 of 32 bytes, and a tolerance
// that is not negative. Call it at start so that a misconfigured receiver
// refuses to start instead of answering every request 500. Errors match
// ErrConfig.
func (v *StandardVerifier) Check() error {
	_, _, _, err := v.config()
	return err
}

// config returns the decoded secrets and public keys and the tolerance in
// effect.
func (v *StandardVerifier) config() ([][]byte, []ed25519.PublicKey, time.Duration, error) {
	if len(v.Secrets) == 0 && len(v.PublicKeys) == 0 {
		return nil, nil, 0, errorf(ErrConfig, "no secrets and no public keys")
	}
	keys, err := v.keys()
	if err != nil {
		return nil, nil, 0, err
	}
	pubs, err := v.publicKeys()
	if err != nil {
		return nil, nil, 0, err
	}
	switch {
	case v.Tolerance < 0:
		return nil, nil, 0, errorf(ErrConfig, "negative tolerance")
	case v.Tolerance == 0:
		return keys, pubs, DefaultTolerance, nil
	}
	return keys, pubs, v.Tolerance, nil
}

// publicKeys decodes the public keys: whpk_ and the standard base64 of an
// Ed25519 public key.
func (v *StandardVerifier) publicKeys() ([]ed25519.PublicKey, error) {
	pubs := make([]ed25519.PublicKey, len(v.PublicKeys))
	for i, s := range v.PublicKeys {
		enc, ok := strings.CutPrefix(s, "whpk_")
		if !ok {
			return nil, errorf(ErrConfig, "public key %d does not start with whpk_", i+1)
		}
		key, err := base64.StdEncoding.Strict().DecodeString(enc)
		if err != nil || len(key) != ed25519.PublicKeySize {
			return nil, errorf(ErrConfig, "public key %d is not the base64 of %d bytes", i+1, ed25519.PublicKeySize)
		}
		pubs[i] = key
	}
	return pubs, nil
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
