package signing_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/signing"
)

// sigOpenSSLKey was written by `openssl genpkey -algorithm ed25519` (3.0);
// sigOpenSSLPub is what `openssl pkey -pubout` reported for it. Test-only.
const (
	sigOpenSSLKey = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEICpf4EjDZGW83fQeaVcWjXIS+kLM7ynw3d3u53j73SSZ
-----END PRIVATE KEY-----
`
	sigOpenSSLPub = "f56e3ef93ce394fa59fcb41e6054be98d917421daea87aae61975d2096995bcf"
)

func sigWriteFile(t *testing.T, data []byte, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "signing.pem")
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // WriteFile's mode passes through umask
		t.Fatal(err)
	}
	return path
}

func TestLoadKeyReadsWhatOpenSSLWrites(t *testing.T) {
	t.Parallel()
	key, err := signing.LoadKey(sigWriteFile(t, []byte(sigOpenSSLKey), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != sigOpenSSLPub {
		t.Errorf("public key %s, want %s (openssl's)", got, sigOpenSSLPub)
	}
	s := sigSigner(t, "openssl", key)
	if s.PublicKey().PublicKey != sigOpenSSLPub {
		t.Errorf("signer publishes %s", s.PublicKey().PublicKey)
	}
}

func TestEncodedKeyLoadsBack(t *testing.T) {
	t.Parallel()
	key, err := signing.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := signing.EncodeKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN PRIVATE KEY-----\n")) {
		t.Errorf("encoded key does not start with a PRIVATE KEY block:\n%.40s", data)
	}
	back, err := signing.LoadKey(sigWriteFile(t, data, 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if !key.Equal(back) {
		t.Error("loaded key differs from the encoded one")
	}
	if _, err := signing.EncodeKeyPEM(key[:10]); err == nil {
		t.Error("encoded a truncated key")
	}
}

func TestGenerateKeyReadsItsSeedFromTheReader(t *testing.T) {
	t.Parallel()
	a, err := signing.GenerateKey(&sigSeq{next: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Equal(sigKey(1)) {
		t.Error("key is not the one seeded by the reader")
	}
	b, err := signing.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Equal(b) {
		t.Error("crypto/rand key equals the fixed one")
	}
}

func TestLoadKeyRefusesOtherFilesWithoutShowingThem(t *testing.T) {
	t.Parallel()
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKCS8PrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	edDER, _ := pem.Decode([]byte(sigOpenSSLKey))
	truncated := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER.Bytes[:20]})
	cases := map[string][]byte{
		"empty":           nil,
		"not PEM":         []byte("MC4CAQAwBQYDK2VwBCIEICpf4EjDZGW83fQeaVcWjXIS+kLM7ynw3d3u53j73SSZ\n"),
		"other block":     pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: edDER.Bytes}),
		"ECDSA in PKCS#8": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER}),
		"truncated DER":   truncated,
		"encrypted":       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: edDER.Bytes}),
		"too large":       bytes.Repeat([]byte("#"), 65<<10),
	}
	for name, data := range cases {
		_, err := signing.LoadKey(sigWriteFile(t, data, 0o600))
		if !errors.Is(err, signing.ErrKeyFile) {
			t.Errorf("%s: got %v, want ErrKeyFile", name, err)
			continue
		}
		msg := err.Error()
		for _, secret := range []string{"MC4CAQAwBQYDK2VwBCIEICpf4EjDZGW83fQeaVcWjXIS", hex.EncodeToString(edDER.Bytes[16:]), string(ecDER)} {
			if strings.Contains(msg, secret) {
				t.Errorf("%s: error %q carries key bytes", name, msg)
			}
		}
	}
	if _, err := signing.LoadKey(filepath.Join(t.TempDir(), "absent.pem")); !errors.Is(err, signing.ErrKeyFile) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent file: got %v, want ErrKeyFile and ErrNotExist", err)
	}
}

func TestCheckKeyFileModeFlagsGroupOrOtherAccess(t *testing.T) {
	t.Parallel()
	if err := signing.CheckKeyFileMode(sigWriteFile(t, []byte(sigOpenSSLKey), 0o600)); err != nil {
		t.Errorf("0600: %v", err)
	}
	if err := signing.CheckKeyFileMode(sigWriteFile(t, []byte(sigOpenSSLKey), 0o400)); err != nil {
		t.Errorf("0400: %v", err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := signing.CheckKeyFileMode(sigWriteFile(t, []byte(sigOpenSSLKey), mode)); !errors.Is(err, signing.ErrKeyFileMode) {
			t.Errorf("%#o: got %v, want ErrKeyFileMode", mode, err)
		}
	}
}
