package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hookrelay/relay/internal/hooks"
)

// signingConfig is the mkit-hook v1 signing key and the public keys
// published beside it.
type signingConfig struct {
	keyFile   string
	keyID     string
	published string
}

func (c *signingConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.keyFile, "signing-key", os.Getenv("RELAY_SIGNING_KEY_FILE"),
		"PEM Ed25519 private key (relay keygen writes one) signing mkit-hook v1 webhooks; empty generates a throwaway key (env RELAY_SIGNING_KEY_FILE)")
	fs.StringVar(&c.keyID, "signing-key-id", envOr("RELAY_SIGNING_KEY_ID", "relay-1"),
		"key id of the signing key, 1-64 of [A-Za-z0-9._-] (env RELAY_SIGNING_KEY_ID)")
	fs.StringVar(&c.published, "published-keys", os.Getenv("RELAY_PUBLISHED_KEYS"),
		"JSON key list of earlier public keys to keep publishing during a rotation (env RELAY_PUBLISHED_KEYS)")
}

// signer loads the signing key, or makes a throwaway one when none is
// configured: fine for development, useless to receivers across restarts.
func (c *signingConfig) signer(log *slog.Logger) (*hooks.MkitSigner, error) {
	if c.keyFile == "" {
		key, err := hooks.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		log.Warn("NO SIGNING KEY CONFIGURED: signing with a throwaway key that changes at every start. Run 'relay keygen' and set RELAY_SIGNING_KEY_FILE.")
		return hooks.NewMkitSigner("dev-"+c.keyID, key)
	}
	if err := hooks.CheckKeyFileMode(c.keyFile); errors.Is(err, hooks.ErrKeyFileMode) {
		log.Warn("signing key file is readable by others; chmod 600 it", "path", c.keyFile)
	}
	key, err := hooks.LoadKey(c.keyFile)
	if err != nil {
		return nil, err
	}
	return hooks.NewMkitSigner(c.keyID, key)
}

// keyList is what relay publishes: the earlier keys, then the signing key.
func (c *signingConfig) keyList(log *slog.Logger) (hooks.KeyList, error) {
	s, err := c.signer(log)
	if err != nil {
		return hooks.KeyList{}, fmt.Errorf("signing key: %w", err)
	}
	var keys []hooks.PublicKey
	if c.published != "" {
		data, err := os.ReadFile(c.published)
		if err != nil {
			return hooks.KeyList{}, fmt.Errorf("published keys: %w", err)
		}
		var earlier hooks.KeyList
		if err := json.Unmarshal(data, &earlier); err != nil {
			return hooks.KeyList{}, fmt.Errorf("published keys %s: not a key list: %w", c.published, err)
		}
		keys = append(keys, earlier.Keys...)
	}
	list, err := hooks.NewKeyList(append(keys, s.PublicKey())...)
	if err != nil {
		return hooks.KeyList{}, fmt.Errorf("published keys: %w", err)
	}
	return list, nil
}

// keygen writes a new Ed25519 signing key as PEM, to a file created 0600 or
// to stdout.
func keygen(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("relay keygen", flag.ContinueOnError)
	out := fs.String("out", "", "file to create (0600); stdout when empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := hooks.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pem, err := hooks.EncodeKeyPEM(key)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(pem)
		return err
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	if _, err := f.Write(pem); err != nil {
		f.Close()
		return fmt.Errorf("keygen: %w", err)
	}
	return f.Close()
}
