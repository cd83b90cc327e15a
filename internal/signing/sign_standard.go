package signing

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks request headers. Header names are case-insensitive;
// the specification writes them in lower case.
const (
	HeaderStandardID        = "webhook-id"
	HeaderStandardTimestamp = "webhook-timestamp"
	HeaderStandardSignature = "webhook-signature"
)

// StandardSecretPrefix starts every Standard Webhooks secret.
const StandardSecretPrefix = "whsec_"

// Standard Webhooks secret sizes: the specification asks for 24 to 64 bytes.
const (
	minStandardSecret = 24
	maxStandardSecret = 64
	// StandardSecretSize is the size of secrets GenerateStandardSecret makes.
	StandardSecretSize = 32
)

// SignStandard returns webhook-id, webhook-timestamp (unix seconds of now)
// and webhook-signature for one attempt of body: "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" for each secret, in the order given, separated by
// spaces, so a receiver holding either secret verifies during rotation.
// msgID is stable across attempts, non-empty printable ASCII without '.'
// (a '.' would make the signed string ambiguous); each secret is whsec_ and
// the standard base64 of 24 to 64 bytes.
func SignStandard(msgID string, secrets []string, body []byte, now time.Time) (http.Header, error) {
	var prefix []byte // id.timestamp., the same for every secret
	return signStandardWith(msgID, now, len(secrets), "secret", func(i int, ts string, sig *strings.Builder) error {
		key, err := decodeStandardSecret(secrets[i])
		if err != nil {
			return err
		}
		if prefix == nil {
			prefix = make([]byte, 0, len(msgID)+len(ts)+2)
			prefix = append(append(append(append(prefix, msgID...), '.'), ts...), '.')
		}
		// Written piece by piece: the body is not copied on this path.
		mac := hmac.New(sha256.New, key)
		mac.Write(prefix)
		mac.Write(body)
		var sum [sha256.Size]byte
		var enc [44]byte // base64 of sha256.Size bytes
		base64.StdEncoding.Encode(enc[:], mac.Sum(sum[:0]))
		sig.WriteString("v1,")
		sig.Write(enc[:])
		return nil
	})
}

// signStandardWith is what both Standard Webhooks versions share: the id
// and time checks, the timestamp, and the headers, with one signature per
// key written by entry, space-separated, in the order given. what names a
// key in errors.
func signStandardWith(msgID string, now time.Time, keys int, what string, entry func(i int, ts string, sig *strings.Builder) error) (http.Header, error) {
	if err := checkStandardID(msgID); err != nil {
		return nil, err
	}
	if keys == 0 {
		return nil, fmt.Errorf("%w: no Standard Webhooks %s", ErrInvalidSigner, what)
	}
	if now.Unix() < 0 {
		return nil, fmt.Errorf("signing: sign at %v: time before 1970 has no webhook-timestamp", now)
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	var sig strings.Builder
	// Room for the longer entry, v1a's, for each key: one allocation.
	sig.Grow(keys*len("v1a,") + keys*base64.StdEncoding.EncodedLen(ed25519.SignatureSize))
	for i := range keys {
		if i > 0 {
			sig.WriteByte(' ')
		}
		if err := entry(i, ts, &sig); err != nil {
			return nil, fmt.Errorf("%w (%s %d of %d)", err, strings.TrimPrefix(what, "private "), i+1, keys)
		}
	}
	// The keys as Header.Set writes them, and the values in one array: two
	// allocations fewer per header on every attempt.
	v := []string{msgID, ts, sig.String()}
	return http.Header{
		keyStandardID:        v[0:1:1],
		keyStandardTimestamp: v[1:2:2],
		keyStandardSignature: v[2:3:3],
	}, nil
}

// The Standard Webhooks headers' keys in canonical form, as Header.Set
// writes them.
var (
	keyStandardID        = http.CanonicalHeaderKey(HeaderStandardID)
	keyStandardTimestamp = http.CanonicalHeaderKey(HeaderStandardTimestamp)
	keyStandardSignature = http.CanonicalHeaderKey(HeaderStandardSignature)
)

// strictBase64 decodes secrets and keys. Made once: Encoding.Strict
// returns a fresh copy of the encoding's tables each time.
var strictBase64 = base64.StdEncoding.Strict()

// GenerateStandardSecret returns a new whsec_ secret of StandardSecretSize
// random bytes from r (crypto/rand when nil), for an endpoint that chose
// Standard Webhooks.
func GenerateStandardSecret(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	var b [StandardSecretSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", fmt.Errorf("signing: generate secret: %w", err)
	}
	return StandardSecretPrefix + base64.StdEncoding.EncodeToString(b[:]), nil
}

// CheckStandardSecret reports whether s is a usable whsec_ secret, so a
// configuration error surfaces at registration rather than at delivery.
func CheckStandardSecret(s string) error {
	_, err := decodeStandardSecret(s)
	return err
}

func decodeStandardSecret(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, StandardSecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: Standard Webhooks secret must start with %s", ErrInvalidSigner, StandardSecretPrefix)
	}
	key, err := strictBase64.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: Standard Webhooks secret is not standard base64 after %s", ErrInvalidSigner, StandardSecretPrefix)
	}
	if len(key) < minStandardSecret || len(key) > maxStandardSecret {
		return nil, fmt.Errorf("%w: Standard Webhooks secret must decode to %d to %d bytes", ErrInvalidSigner, minStandardSecret, maxStandardSecret)
	}
	return key, nil
}

func checkStandardID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty webhook-id", ErrInvalidSigner)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f || c == '.' {
			return fmt.Errorf("%w: webhook-id must be printable ASCII without spaces or '.'", ErrInvalidSigner)
		}
	}
	return nil
}
