package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hookrelay/relay/internal/hooks"
)

// signingConfig is the mkit-hook v2 signing key and the other public keys
// published beside it.
type signingConfig struct {
	keyFile   string
	keyID     string
	published string
}

func (c *signingConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.keyFile, "hook-key", os.Getenv("RELAY_HOOK_KEY_FILE"),
		"PEM Ed25519 private key (relay keygen writes one) signing mkit-hook v2 webhooks of every namespace; required with a real Redis (env RELAY_HOOK_KEY_FILE)")
	fs.StringVar(&c.keyID, "hook-key-id", envOr("RELAY_HOOK_KEY_ID", "relay-1"),
		"key id of the signing key, 1-64 of [A-Za-z0-9._-] (env RELAY_HOOK_KEY_ID)")
	fs.StringVar(&c.published, "published-keys", os.Getenv("RELAY_PUBLISHED_KEYS"),
		"JSON key list of other public keys to publish beside the signing key: the next one before a rotation, the previous one after it (env RELAY_PUBLISHED_KEYS)")
}

// signing is the signer and the key list relay publishes.
type signing struct {
	signer *hooks.MkitSigner
	keys   hooks.KeyList
}

// load reads the signing key and the other published keys. Without a key
// file it makes a throwaway key, only in development (dev true: an embedded
// store), since receivers cannot trust a key that changes at every start.
func (c *signingConfig) load(dev bool, log *slog.Logger) (signing, error) {
	s, err := c.signer(dev, log)
	if err != nil {
		return signing{}, fmt.Errorf("signing key: %w", err)
	}
	var keys []hooks.PublicKey
	if c.published != "" {
		other, err := readKeyList(c.published)
		if err != nil {
			return signing{}, err
		}
		keys = other.Keys
	}
	list, err := hooks.NewKeyList(append(keys, s.PublicKey())...)
	if err != nil {
		return signing{}, fmt.Errorf("published keys: %w", err)
	}
	return signing{signer: s, keys: list}, nil
}

func (c *signingConfig) signer(dev bool, log *slog.Logger) (*hooks.MkitSigner, error) {
	if c.keyFile == "" {
		if !dev {
			return nil, errors.New("no signing key: set RELAY_HOOK_KEY_FILE (relay keygen makes one); a throwaway key is for development only")
		}
		key, err := hooks.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		// A fresh id per key, so a receiver holding an old list says
		// "unknown key" rather than "bad signature".
		id := "dev-" + hex.EncodeToString(key.Public().(ed25519.PublicKey)[:4])
		log.Warn("NO SIGNING KEY CONFIGURED: signing with a throwaway key that changes at every start", "key_id", id)
		return hooks.NewMkitSigner(id, key)
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

// readKeyList reads an operator's key list strictly: version 1 and no
// unknown field, so a misspelt notAfterMs is an error, not a key that never
// expires.
func readKeyList(path string) (hooks.KeyList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return hooks.KeyList{}, fmt.Errorf("published keys: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var list hooks.KeyList
	if err := dec.Decode(&list); err != nil {
		return hooks.KeyList{}, fmt.Errorf("published keys %s: %w", path, err)
	}
	if dec.More() {
		return hooks.KeyList{}, fmt.Errorf("published keys %s: data after the key list", path)
	}
	if list.Version != hooks.KeyListVersion {
		return hooks.KeyList{}, fmt.Errorf("published keys %s: version %d, want %d", path, list.Version, hooks.KeyListVersion)
	}
	if _, err := hooks.NewKeyList(list.Keys...); err != nil {
		return hooks.KeyList{}, fmt.Errorf("published keys %s: %w", path, err)
	}
	return list, nil
}

// keygen writes a new Ed25519 signing key as PEM, to a file created 0600 or
// to stdout. With -out it prints the key's public key list entry, to add to
// the published keys before relay signs with the key.
func keygen(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("relay keygen", flag.ContinueOnError)
	out := fs.String("out", "", "file to create (0600); stdout when empty")
	keyID := fs.String("key-id", "relay-1", "key id to print the public key list entry for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs, args); err != nil {
		return err
	}
	key, err := hooks.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	pub, err := hooks.NewPublicKey(*keyID, key.Public().(ed25519.PublicKey))
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
	if err := f.Close(); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	entry, err := json.Marshal(pub)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "%s\n", entry)
	return err
}
