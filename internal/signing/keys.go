package signing

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
)

// maxKeyFile bounds what LoadKey reads: a PEM Ed25519 key is about 120 bytes.
const maxKeyFile = 64 << 10

// pemPrivateKey is the PEM block type of a PKCS#8 private key, what
// `openssl genpkey -algorithm ed25519` writes.
const pemPrivateKey = "PRIVATE KEY"

// ErrKeyFile marks a signing key file that cannot be used: unreadable, not
// PEM, not PKCS#8 or not Ed25519. The text names the file and the problem,
// never the key's bytes.
var ErrKeyFile = errors.New("signing: unusable key file")

// ErrKeyFileMode marks a signing key file that group or others may read or
// write. CheckKeyFileMode returns it; callers decide whether to warn or
// refuse (relay warns: mounted secrets are often 0644).
var ErrKeyFileMode = errors.New("signing: key file is accessible to group or others")

// LoadKey reads an Ed25519 signing key from a PEM "PRIVATE KEY" (PKCS#8)
// file. It does not check the file's permissions; see CheckKeyFileMode.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrKeyFile, path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrKeyFile, path, maxKeyFile)
	}
	key, err := ParseKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ParseKeyPEM decodes an Ed25519 key from PEM "PRIVATE KEY" (PKCS#8) bytes.
// Parser errors are not wrapped: their text could describe the key's bytes.
func ParseKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%w: no PEM block", ErrKeyFile)
	}
	if block.Type != pemPrivateKey {
		return nil, fmt.Errorf("%w: PEM block is %q, want %q (PKCS#8, as `openssl genpkey -algorithm ed25519` writes)", ErrKeyFile, block.Type, pemPrivateKey)
	}
	if len(block.Headers) != 0 {
		return nil, fmt.Errorf("%w: encrypted or annotated PEM keys are not supported", ErrKeyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: not a valid PKCS#8 private key", ErrKeyFile)
	}
	key, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: key is %T, want Ed25519", ErrKeyFile, parsed)
	}
	return key, nil
}

// CheckKeyFileMode returns an error wrapping ErrKeyFileMode when group or
// others have any access to the key file. It is a no-op on Windows, whose
// permissions the mode bits do not describe.
func CheckKeyFileMode(path string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %#o, want 0600 or stricter", ErrKeyFileMode, path, perm)
	}
	return nil
}

// GenerateKey returns a new Ed25519 signing key from r (crypto/rand when
// nil), for dev mode and `relay keygen`.
func GenerateKey(r io.Reader) (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, fmt.Errorf("signing: generate Ed25519 key: %w", err)
	}
	return key, nil
}

// EncodeKeyPEM encodes key as PEM "PRIVATE KEY" (PKCS#8), the format LoadKey
// and openssl read. A key of the wrong size is an error, not a panic.
func EncodeKeyPEM(key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: Ed25519 private key must be %d bytes", ErrInvalidSigner, ed25519.PrivateKeySize)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("signing: encode Ed25519 key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}
