package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Standard Webhooks asymmetric key prefixes: whsk_ starts the private key
// relay keeps, whpk_ the public key receivers verify with.
const (
	StandardPrivateKeyPrefix = "whsk_"
	StandardPublicKeyPrefix  = "whpk_"
)

// SignStandardV1a returns webhook-id, webhook-timestamp (unix seconds of
// now) and webhook-signature for one attempt of body: "v1a,<base64 Ed25519
// signature of id.timestamp.body>" for each private key, in the order given,
// separated by spaces, so a receiver trusting either public key verifies
// during rotation. The signed content is exactly SignStandard's; each key is
// whsk_ and the standard base64 of a 64-byte Ed25519 private key (seed, then
// public key).
func SignStandardV1a(msgID string, keys []string, body []byte, now time.Time) (http.Header, error) {
	var signed []byte // the same for every key
	return signStandardWith(msgID, now, len(keys), "private key", func(i int, ts string, sig *strings.Builder) error {
		priv, err := decodeStandardPrivateKey(keys[i])
		if err != nil {
			return err
		}
		if signed == nil {
			signed = standardContent(msgID, ts, body)
		}
		var enc [88]byte // base64 of ed25519.SignatureSize bytes
		base64.StdEncoding.Encode(enc[:], ed25519.Sign(priv, signed))
		sig.WriteString("v1a,")
		sig.Write(enc[:])
		return nil
	})
}

// standardContent is what both Standard Webhooks versions sign:
// id.timestamp.body.
func standardContent(msgID, ts string, body []byte) []byte {
	b := make([]byte, 0, len(msgID)+len(ts)+2+len(body))
	b = append(b, msgID...)
	b = append(b, '.')
	b = append(b, ts...)
	b = append(b, '.')
	return append(b, body...)
}

// GenerateStandardKey returns a new whsk_ private key from r (crypto/rand
// when nil), for an endpoint that chose Standard Webhooks v1a.
func GenerateStandardKey(r io.Reader) (string, error) {
	if r == nil {
		r = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return "", fmt.Errorf("signing: generate key: %w", err)
	}
	return StandardPrivateKeyPrefix + base64.StdEncoding.EncodeToString(priv), nil
}

// StandardPublicKey returns the whpk_ public key of the whsk_ private key.
// The error never holds the key.
func StandardPublicKey(private string) (string, error) {
	priv, err := decodeStandardPrivateKey(private)
	if err != nil {
		return "", err
	}
	return StandardPublicKeyPrefix + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)), nil
}

func decodeStandardPrivateKey(s string) (ed25519.PrivateKey, error) {
	enc, ok := strings.CutPrefix(s, StandardPrivateKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: Standard Webhooks private key must start with %s", ErrInvalidSigner, StandardPrivateKeyPrefix)
	}
	raw, err := strictBase64.DecodeString(enc)
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: Standard Webhooks private key must be the base64 of %d bytes after %s", ErrInvalidSigner, ed25519.PrivateKeySize, StandardPrivateKeyPrefix)
	}
	priv := ed25519.NewKeyFromSeed(raw[:ed25519.SeedSize])
	// The second half must be the seed's public key, or receivers would be
	// shown a key that verifies nothing relay signs.
	if !bytes.Equal(priv, raw) {
		return nil, fmt.Errorf("%w: Standard Webhooks private key does not hold its own public key", ErrInvalidSigner)
	}
	return priv, nil
}
