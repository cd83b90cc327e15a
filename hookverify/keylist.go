package hookverify

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrKeyList marks a key list that ParseKeyList refuses.
var ErrKeyList = errors.New("hookverify: invalid key list")

// KeyList is relay's public key list, as served at
// /.well-known/mkit-hook-keys.json. Fetch it over HTTPS from the relay you
// trust and parse it with ParseKeyList.
type KeyList struct {
	Version int         `json:"version"`
	Keys    []PublicKey `json:"keys"`
}

// PublicKey is one Ed25519 key of a KeyList. NotBeforeMs and NotAfterMs
// (Unix ms, inclusive) bound both when a request signed with it is accepted
// (the receiver's clock) and when it may have been signed (its created-at).
type PublicKey struct {
	KeyID       string `json:"keyId"`
	Alg         string `json:"alg"`
	PublicKey   string `json:"publicKey"`
	NotBeforeMs *int64 `json:"notBeforeMs,omitempty"`
	NotAfterMs  *int64 `json:"notAfterMs,omitempty"`
}

// maxKeyList bounds what ParseKeyList accepts; real lists hold a few keys.
const maxKeyList = 1 << 20

// ParseKeyList decodes and checks a key list: version 1, at least one key,
// each with a valid key id (1–64 of [A-Za-z0-9._-]), alg "ed25519", a
// publicKey of 64 lowercase hex digits, notBeforeMs ≤ notAfterMs, and no
// key id twice. Unknown fields are ignored, so a later relay may add some;
// anything a receiver must understand comes with a new version.
func ParseKeyList(data []byte) (KeyList, error) {
	if len(data) > maxKeyList {
		return KeyList{}, fmt.Errorf("%w: larger than %d bytes", ErrKeyList, maxKeyList)
	}
	var raw struct {
		Version *int               `json:"version"`
		Keys    *[]json.RawMessage `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return KeyList{}, fmt.Errorf("%w: %w", ErrKeyList, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return KeyList{}, fmt.Errorf("%w: data after the JSON object", ErrKeyList)
	}
	if raw.Version == nil || *raw.Version != 1 {
		return KeyList{}, fmt.Errorf("%w: version must be 1", ErrKeyList)
	}
	if raw.Keys == nil || len(*raw.Keys) == 0 {
		return KeyList{}, fmt.Errorf("%w: no keys", ErrKeyList)
	}
	list := KeyList{Version: 1, Keys: make([]PublicKey, 0, len(*raw.Keys))}
	seen := make(map[string]bool, len(*raw.Keys))
	for i, m := range *raw.Keys {
		var k struct {
			KeyID       *string `json:"keyId"`
			Alg         *string `json:"alg"`
			PublicKey   *string `json:"publicKey"`
			NotBeforeMs *int64  `json:"notBeforeMs"`
			NotAfterMs  *int64  `json:"notAfterMs"`
		}
		if err := json.Unmarshal(m, &k); err != nil {
			return KeyList{}, fmt.Errorf("%w: key %d: %w", ErrKeyList, i+1, err)
		}
		if k.KeyID == nil || k.Alg == nil || k.PublicKey == nil {
			return KeyList{}, fmt.Errorf("%w: key %d: keyId, alg and publicKey are required", ErrKeyList, i+1)
		}
		pk := PublicKey{KeyID: *k.KeyID, Alg: *k.Alg, PublicKey: *k.PublicKey, NotBeforeMs: k.NotBeforeMs, NotAfterMs: k.NotAfterMs}
		if err := checkPublicKey(pk); err != nil {
			return KeyList{}, fmt.Errorf("%w: key %d: %w", ErrKeyList, i+1, err)
		}
		if seen[pk.KeyID] {
			return KeyList{}, fmt.Errorf("%w: key id %s appears twice", ErrKeyList, pk.KeyID)
		}
		seen[pk.KeyID] = true
		list.Keys = append(list.Keys, pk)
	}
	return list, nil
}

// checkPublicKey applies ParseKeyList's rules to one entry.
func checkPublicKey(k PublicKey) error {
	if !validKeyID(k.KeyID) {
		return errors.New("keyId must be 1 to 64 of A-Z a-z 0-9 . _ -")
	}
	if k.Alg != "ed25519" {
		return errors.New(`alg must be "ed25519"`)
	}
	if !isLowerHex(k.PublicKey, 2*ed25519.PublicKeySize) {
		return errors.New("publicKey must be 64 lowercase hex digits")
	}
	if k.NotBeforeMs != nil && k.NotAfterMs != nil && *k.NotBeforeMs > *k.NotAfterMs {
		return errors.New("notBeforeMs is after notAfterMs")
	}
	return nil
}

// find returns the key published as id and its decoded bytes.
func (l *KeyList) find(id string) (PublicKey, ed25519.PublicKey, error) {
	for _, k := range l.Keys {
		if k.KeyID != id {
			continue
		}
		if err := checkPublicKey(k); err != nil {
			return PublicKey{}, nil, errorf(ErrConfig, "key list entry %s: %v", id, err)
		}
		pub, _ := hex.DecodeString(k.PublicKey) // checked above
		return k, pub, nil
	}
	return PublicKey{}, nil, errorf(ErrUnknownKey, "%s", id)
}

func validKeyID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
