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

	"github.com/hookrelay/relay/internal/hooks"
)

// signing is the signer and the key list relay publishes.
type signing struct {
	signer *hooks.MkitSigner
	keys   hooks.KeyList
}

// load reads the signing key and the other published keys. Without a key
// file it makes a throwaway key, only in development (dev true: an embedded
// store), since receivers cannot trust a key that changes at every start.
func (c Signing) load(dev bool, log *slog.Logger) (signing, error) {
	s, err := c.signer(dev, log)
	if err != nil {
		return signing{}, fmt.Errorf("signing key: %w", err)
	}
	var keys []hooks.PublicKey
	if c.PublishedKeys != "" {
		other, err := readKeyList(c.PublishedKeys)
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

func (c Signing) signer(dev bool, log *slog.Logger) (*hooks.MkitSigner, error) {
	if c.KeyFile == "" {
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
	if err := hooks.CheckKeyFileMode(c.KeyFile); errors.Is(err, hooks.ErrKeyFileMode) {
		log.Warn("signing key file is readable by others; chmod 600 it", "path", c.KeyFile)
	}
	key, err := hooks.LoadKey(c.KeyFile)
	if err != nil {
		return nil, err
	}
	return hooks.NewMkitSigner(c.KeyID, key)
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
