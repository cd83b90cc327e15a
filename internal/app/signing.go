package app

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/hookrelay/relay/internal/signing"
)

// signingKeys is the signer and the key list relay publishes.
type signingKeys struct {
	signer *signing.MkitSigner
	keys   signing.KeyList
}

// load reads the signing key and the other published keys. Without a key
// file it makes a throwaway key, only in development (dev true: an embedded
// store), since receivers cannot trust a key that changes at every start.
func (c Signing) load(dev bool, log *slog.Logger) (signingKeys, error) {
	s, err := c.signer(dev, log)
	if err != nil {
		return signingKeys{}, fmt.Errorf("signing key: %w", err)
	}
	var keys []signing.PublicKey
	if c.PublishedKeys != "" {
		other, err := readKeyList(c.PublishedKeys)
		if err != nil {
			return signingKeys{}, err
		}
		keys = other.Keys
	}
	list, err := signing.NewKeyList(append(keys, s.PublicKey())...)
	if err != nil {
		return signingKeys{}, fmt.Errorf("published keys: %w", err)
	}
	return signingKeys{signer: s, keys: list}, nil
}

func (c Signing) signer(dev bool, log *slog.Logger) (*signing.MkitSigner, error) {
	if c.KeyFile == "" {
		if !dev {
			return nil, errors.New("no signing key: set RELAY_HOOK_KEY_FILE (relay keygen makes one); a throwaway key is for development only")
		}
		key, err := signing.GenerateKey(rand.Reader)
		if err != nil {
			return nil, err
		}
		// A fresh id per key, so a receiver holding an old list says
		// "unknown key" rather than "bad signature".
		id := "dev-" + hex.EncodeToString(key.Public().(ed25519.PublicKey)[:4])
		log.Warn("NO SIGNING KEY CONFIGURED: signing with a throwaway key that changes at every start", "key_id", id)
		return signing.NewMkitSigner(id, key)
	}
	if err := signing.CheckKeyFileMode(c.KeyFile); errors.Is(err, signing.ErrKeyFileMode) {
		log.Warn("signing key file is readable by others; chmod 600 it", "path", c.KeyFile)
	}
	key, err := signing.LoadKey(c.KeyFile)
	if err != nil {
		return nil, err
	}
	return signing.NewMkitSigner(c.KeyID, key)
}

// readKeyList reads an operator's key list strictly: version 1 and no
// unknown field, so a misspelt notAfterMs is an error, not a key that never
// expires.
func readKeyList(path string) (signing.KeyList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return signing.KeyList{}, fmt.Errorf("published keys: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var list signing.KeyList
	if err := dec.Decode(&list); err != nil {
		return signing.KeyList{}, fmt.Errorf("published keys %s: %w", path, err)
	}
	if dec.More() {
		return signing.KeyList{}, fmt.Errorf("published keys %s: data after the key list", path)
	}
	if list.Version != signing.KeyListVersion {
		return signing.KeyList{}, fmt.Errorf("published keys %s: version %d, want %d", path, list.Version, signing.KeyListVersion)
	}
	if _, err := signing.NewKeyList(list.Keys...); err != nil {
		return signing.KeyList{}, fmt.Errorf("published keys %s: %w", path, err)
	}
	return list, nil
}
