package verifycheck_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
)

// FuzzMkitVerify: arbitrary header values, path and body never panic, and
// whatever is accepted once is a replay the second time.
func FuzzMkitVerify(f *testing.F) {
	vec := loadVectors(f)
	keys, err := hookverify.ParseKeyList(vec.Mkit.KeyList)
	if err != nil {
		f.Fatal(err)
	}
	h := vec.Mkit.Headers
	f.Add(h["X-Mkit-Hook-Version"], h["X-Mkit-Hook-Key-Id"], h["X-Mkit-Hook-Namespace"], h["X-Mkit-Hook-Audience"], h["X-Mkit-Hook-Created-At"],
		h["X-Mkit-Hook-Expires-At"], h["X-Mkit-Hook-Nonce"], h["X-Mkit-Hook-Digest"], h["X-Mkit-Hook-Signature"],
		vec.Mkit.Path, []byte(vec.Mkit.Body))
	f.Add("2", "relay-2025-11", "Acme", "https://hooks.example.com", "+1", "-1", "", "body:", "00", "", []byte(nil))
	now := time.UnixMilli(vec.Mkit.VerifyAtMs)
	f.Fuzz(func(t *testing.T, version, keyID, ns, aud, created, expires, nonce, digest, sig, path string, body []byte) {
		v := &hookverify.MkitVerifier{Keys: keys, Audience: vec.Mkit.Audience, AcceptAnyNamespace: true, Now: func() time.Time { return now }}
		header := http.Header{
			"X-Mkit-Hook-Version": {version}, "X-Mkit-Hook-Key-Id": {keyID}, "X-Mkit-Hook-Namespace": {ns}, "X-Mkit-Hook-Audience": {aud},
			"X-Mkit-Hook-Created-At": {created}, "X-Mkit-Hook-Expires-At": {expires}, "X-Mkit-Hook-Nonce": {nonce},
			"X-Mkit-Hook-Digest": {digest}, "X-Mkit-Hook-Signature": {sig},
		}
		if err := v.Verify(header, path, body); err != nil {
			return
		}
		if err := v.Verify(header, path, body); !errors.Is(err, hookverify.ErrReplay) {
			t.Fatalf("accepted request verified again: %v", err)
		}
	})
}
