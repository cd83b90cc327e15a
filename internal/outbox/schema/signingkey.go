package schema

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// SigningKey is a Standard Webhooks v1a private key, "whsk_" and the base64
// of a 64-byte Ed25519 private key (its seed, then its public key, so the row
// holds both). It formats as a redacted placeholder, so printing an Endpoint
// never leaks it; string(k) is the key. Only relay generates them.
type SigningKey string

// SigningKeyPrefix starts every SigningKey; PublicKeyPrefix every public
// key shown for one.
const (
	SigningKeyPrefix = "whsk_"
	PublicKeyPrefix  = "whpk_"
)

// String redacts the key.
func (SigningKey) String() string { return SigningKeyPrefix + "[redacted]" }

// GoString redacts the key.
func (k SigningKey) GoString() string { return k.String() }

// private decodes the key, checking that its public half is its seed's.
func (k SigningKey) private() (ed25519.PrivateKey, bool) {
	raw, ok := strings.CutPrefix(string(k), SigningKeyPrefix)
	if !ok {
		return nil, false
	}
	b, err := base64.StdEncoding.Strict().DecodeString(raw)
	if err != nil || len(b) != ed25519.PrivateKeySize {
		return nil, false
	}
	priv := ed25519.NewKeyFromSeed(b[:ed25519.SeedSize])
	return priv, bytes.Equal(priv, b)
}

// PublicKey is the key's public half as receivers configure it: "whpk_" and
// the base64 of 32 bytes. Empty for a malformed key.
func (k SigningKey) PublicKey() string {
	priv, ok := k.private()
	if !ok {
		return ""
	}
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(priv[ed25519.SeedSize:])
}

// NewSigningKey generates a v1a key pair.
func NewSigningKey() (SigningKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generate signing key: %w", err)
	}
	return SigningKey(SigningKeyPrefix + base64.StdEncoding.EncodeToString(priv)), nil
}
