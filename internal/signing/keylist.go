package signing

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// KeysPath is where relay publishes its mkit-hook public key list.
const KeysPath = "/.well-known/mkit-hook-keys.json"

// KeyListVersion is the only key list version.
const KeyListVersion = 1

// AlgEd25519 is the only key algorithm of mkit-hook.
const AlgEd25519 = "ed25519"

// KeyList is the public key list receivers verify mkit-hook signatures
// against. Rotation is two steps: publish the new key beside the old one,
// then sign with the new one; drop the old key once no signature made with
// it can still be valid (MaxValidity later) and caches have expired.
type KeyList struct {
	Version int         `json:"version"`
	Keys    []PublicKey `json:"keys"`
}

// PublicKey is one entry of a KeyList. The optional bounds (Unix ms,
// inclusive) let a receiver refuse a key before or after its service.
type PublicKey struct {
	KeyID       string `json:"keyId"`
	Alg         string `json:"alg"`
	PublicKey   string `json:"publicKey"` // 64 lowercase hex
	NotBeforeMs *int64 `json:"notBeforeMs,omitempty"`
	NotAfterMs  *int64 `json:"notAfterMs,omitempty"`
}

// NewPublicKey is the list entry for pub published as keyID.
func NewPublicKey(keyID string, pub ed25519.PublicKey) (PublicKey, error) {
	if err := checkKeyID(keyID); err != nil {
		return PublicKey{}, err
	}
	if len(pub) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("%w: Ed25519 public key must be %d bytes", ErrInvalidSigner, ed25519.PublicKeySize)
	}
	return PublicKey{KeyID: keyID, Alg: AlgEd25519, PublicKey: hex.EncodeToString(pub)}, nil
}

// ValidFrom returns k with notBeforeMs set to t.
func (k PublicKey) ValidFrom(t time.Time) PublicKey {
	ms := t.UnixMilli()
	k.NotBeforeMs = &ms
	return k
}

// ValidUntil returns k with notAfterMs set to t.
func (k PublicKey) ValidUntil(t time.Time) PublicKey {
	ms := t.UnixMilli()
	k.NotAfterMs = &ms
	return k
}

// NewKeyList returns a version 1 list of keys, checked the way receivers
// parse it (hookverify.ParseKeyList): at least one key, valid key ids, alg
// ed25519, 64 lowercase hex, bounds in order, no key id twice.
func NewKeyList(keys ...PublicKey) (KeyList, error) {
	if len(keys) == 0 {
		return KeyList{}, fmt.Errorf("%w: key list has no keys", ErrInvalidSigner)
	}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if err := checkPublicKey(k); err != nil {
			return KeyList{}, fmt.Errorf("key %d: %w", i+1, err)
		}
		if seen[k.KeyID] {
			return KeyList{}, fmt.Errorf("%w: key id %s appears twice", ErrInvalidSigner, k.KeyID)
		}
		seen[k.KeyID] = true
	}
	return KeyList{Version: KeyListVersion, Keys: append([]PublicKey(nil), keys...)}, nil
}

func checkPublicKey(k PublicKey) error {
	if err := checkKeyID(k.KeyID); err != nil {
		return err
	}
	if k.Alg != AlgEd25519 {
		return fmt.Errorf("%w: key %s: alg must be %s", ErrInvalidSigner, k.KeyID, AlgEd25519)
	}
	if !isLowerHex(k.PublicKey, 2*ed25519.PublicKeySize) {
		return fmt.Errorf("%w: key %s: publicKey must be %d lowercase hex digits", ErrInvalidSigner, k.KeyID, 2*ed25519.PublicKeySize)
	}
	if k.NotBeforeMs != nil && k.NotAfterMs != nil && *k.NotBeforeMs > *k.NotAfterMs {
		return fmt.Errorf("%w: key %s: notBeforeMs is after notAfterMs", ErrInvalidSigner, k.KeyID)
	}
	return nil
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

// KeysHandler serves list as JSON to GET and HEAD, cacheable for 300 s (a
// rotation must publish the new key at least that long before signing with
// it). It encodes the list once; other methods get 405.
func KeysHandler(list KeyList) http.Handler {
	body, err := json.Marshal(list)
	if err != nil {
		// A KeyList holds strings and integers only; Marshal cannot fail.
		panic(fmt.Sprintf("signing: encode key list: %v", err))
	}
	body = append(body, '\n')
	length := strconv.Itoa(len(body))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Cache-Control", "max-age=300")
		h.Set("Content-Length", length)
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(body)
		}
	})
}
