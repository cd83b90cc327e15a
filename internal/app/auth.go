package app

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"github.com/hookrelay/relay/internal/httpapi"
)

// Load builds the token verifier. audience is relay's public URL, the
// default aud. With no key configured, development (dev true) gets a
// throwaway HS256 secret, returned so serve can mint and print an admin
// token once; a real deployment must configure one.
func (c Auth) Load(dev bool, audience string, log *slog.Logger) (auth *httpapi.Auth, devSecret []byte, err error) {
	cfg := httpapi.AuthConfig{Audience: c.Audience, Issuer: c.Issuer, Leeway: c.Leeway}
	if cfg.Audience == "" {
		cfg.Audience = audience
	}
	if c.Secret != "" {
		if c.SecretOnCommandLine {
			log.Warn("the JWT secret was given as --jwt-secret, which other local users can read in the process list; prefer RELAY_JWT_SECRET")
		}
		if len(c.Secret) < httpapi.MinHS256Secret {
			return nil, nil, fmt.Errorf("RELAY_JWT_SECRET (--jwt-secret) is %d bytes; it must be at least %d (openssl rand -hex 32 makes one)", len(c.Secret), httpapi.MinHS256Secret)
		}
		cfg.HS256Secret = []byte(c.Secret)
	}
	if c.PublicKeys != "" {
		keys, err := readJWTPublicKeys(c.PublicKeys)
		if err != nil {
			return nil, nil, err
		}
		cfg.EdDSAKeys = keys
	}
	if len(cfg.HS256Secret) == 0 && len(cfg.EdDSAKeys) == 0 {
		if !dev {
			return nil, nil, errors.New("no JWT key for the API: set RELAY_JWT_SECRET (an HS256 secret of at least 32 bytes) or RELAY_JWT_PUBLIC_KEYS (Ed25519 public keys of your token issuer); a throwaway secret is for development only")
		}
		devSecret = make([]byte, httpapi.MinHS256Secret)
		_, _ = rand.Read(devSecret) // crypto/rand.Read never fails since Go 1.24.
		cfg.HS256Secret = devSecret
		log.Warn("NO JWT KEY CONFIGURED: API tokens are checked against a throwaway secret that changes at every start; use the admin token printed below. Set RELAY_JWT_SECRET or RELAY_JWT_PUBLIC_KEYS for real use.")
	}
	auth, err = httpapi.NewAuth(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("API tokens: %w", err)
	}
	// A wrong aud or iss is the usual reason tokens fail; say what is checked.
	log.Info("API tokens", "audience", cfg.Audience, "issuer", cfg.Issuer,
		"hs256", len(cfg.HS256Secret) > 0, "eddsa_keys", len(cfg.EdDSAKeys), "leeway", cfg.Leeway)
	return auth, devSecret, nil
}

// kidPattern is what a key id given as kid=path may be; anything else
// before an "=" is taken as part of the path.
var kidPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// readJWTPublicKeys reads the --jwt-public-keys list: entries path or
// kid=path, comma-separated.
func readJWTPublicKeys(list string) ([]httpapi.EdDSAKey, error) {
	var out []httpapi.EdDSAKey
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kid, path, found := strings.Cut(entry, "=")
		if !found || !kidPattern.MatchString(kid) {
			kid, path = "", entry
		}
		keys, err := readPublicKeyFile(path)
		if err != nil {
			return nil, fmt.Errorf("RELAY_JWT_PUBLIC_KEYS: %w", err)
		}
		if kid != "" && len(keys) != 1 {
			return nil, fmt.Errorf("RELAY_JWT_PUBLIC_KEYS: %s holds %d keys; a kid=path entry names one key", path, len(keys))
		}
		for _, k := range keys {
			out = append(out, httpapi.EdDSAKey{ID: kid, Key: k})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("RELAY_JWT_PUBLIC_KEYS names no key file")
	}
	return out, nil
}

// maxPublicKeyFile bounds a key file: a PEM Ed25519 public key is about
// 110 bytes.
const maxPublicKeyFile = 64 << 10

// readPublicKeyFile reads every PEM "PUBLIC KEY" (PKIX) Ed25519 key of a
// file, as `openssl pkey -pubout` writes them.
func readPublicKeyFile(path string) ([]ed25519.PublicKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPublicKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxPublicKeyFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxPublicKeyFile)
	}
	var keys []ed25519.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			// Never the block's bytes: it may be a private key.
			return nil, fmt.Errorf("%s holds a %q PEM block; want only \"PUBLIC KEY\" blocks (openssl pkey -in key.pem -pubout)", path, block.Type)
		}
		parsed, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: key %d is not a valid PKIX public key", path, len(keys)+1)
		}
		key, ok := parsed.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%s: key %d is %T, want Ed25519", path, len(keys)+1, parsed)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no PEM \"PUBLIC KEY\" block", path)
	}
	return keys, nil
}
