package verifycheck_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
)

// vectors is api/testdata/webhook-signatures.json as a receiver reads it;
// internal/signing's TestSignatureVectors proves relay signs exactly this.
type vectors struct {
	Mkit struct {
		Namespace  string            `json:"namespace"`
		Endpoint   string            `json:"endpoint"`
		Body       string            `json:"body"`
		VerifyAtMs int64             `json:"verifyAtMs"`
		Audience   string            `json:"audience"`
		Path       string            `json:"path"`
		KeyList    json.RawMessage   `json:"keyList"`
		Headers    map[string]string `json:"headers"`
	} `json:"mkitHookV2"`
	Standard struct {
		Secret   string            `json:"secret"`
		Body     string            `json:"body"`
		VerifyAt int64             `json:"verifyAt"`
		Headers  map[string]string `json:"headers"`
	} `json:"standardWebhooks"`
	StandardV1a struct {
		PublicKey  string            `json:"publicKey"`
		PrivateKey string            `json:"privateKey"`
		Body       string            `json:"body"`
		VerifyAt   int64             `json:"verifyAt"`
		Headers    map[string]string `json:"headers"`
	} `json:"standardWebhooksV1a"`
}

func loadVectors(t testing.TB) vectors {
	t.Helper()
	raw, err := os.ReadFile("../../api/testdata/webhook-signatures.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func header(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// change returns s with its last character replaced by another of the same
// kind (digit or lowercase hex letter), so the value stays well-formed.
func change(s string) string {
	last := s[len(s)-1]
	switch {
	case last == '9':
		last = '8'
	case last >= '0' && last <= '8':
		last++
	case last == 'f':
		last = 'e'
	default:
		last = 'a'
		if s[len(s)-1] == 'a' {
			last = 'b'
		}
	}
	return s[:len(s)-1] + string(last)
}

func TestMkitVectorVerifiesAndEverySingleChangeFails(t *testing.T) {
	t.Parallel()
	vec := loadVectors(t).Mkit
	keys, err := hookverify.ParseKeyList(vec.KeyList)
	if err != nil {
		t.Fatal(err)
	}
	// verify uses a fresh verifier (and nonce cache) of the vector's
	// namespace each time, so every refusal below is about the change alone.
	verify := func(h http.Header, audience, path string, body []byte, atMs int64) error {
		v := &hookverify.MkitVerifier{Keys: keys, Audience: audience, Namespaces: []string{vec.Namespace}, Now: func() time.Time { return time.UnixMilli(atMs) }}
		return v.Verify(h, path, body)
	}
	// verifyAny takes every namespace, so a changed namespace reaches the
	// signature check.
	verifyAny := func(h http.Header, body []byte) error {
		v := &hookverify.MkitVerifier{Keys: keys, Audience: vec.Audience, AcceptAnyNamespace: true, Now: func() time.Time { return time.UnixMilli(vec.VerifyAtMs) }}
		return v.Verify(h, vec.Path, body)
	}
	body := []byte(vec.Body)
	if err := verify(header(vec.Headers), vec.Endpoint, vec.Path, body, vec.VerifyAtMs); err != nil {
		t.Fatalf("vector refused: %v", err)
	}

	// Each header's last character changed, and the check that must refuse
	// it: a refusal for another reason (ErrConfig, say) would hide that this
	// field is not checked.
	onChange := map[string]error{
		"X-Mkit-Hook-Version":    hookverify.ErrVersion,      // 2 -> 3
		"X-Mkit-Hook-Key-Id":     hookverify.ErrUnknownKey,   // relay-2025-11 -> relay-2025-12
		"X-Mkit-Hook-Namespace":  hookverify.ErrNamespace,    // acme -> acma, not this receiver's
		"X-Mkit-Hook-Audience":   hookverify.ErrAudience,     // ...example.com -> ...example.coa
		"X-Mkit-Hook-Created-At": hookverify.ErrBadSignature, // 1 ms later: window still valid
		"X-Mkit-Hook-Expires-At": hookverify.ErrWindow,       // 1 ms later: window 300,001 ms
		"X-Mkit-Hook-Nonce":      hookverify.ErrBadSignature,
		"X-Mkit-Hook-Digest":     hookverify.ErrDigest,
		"X-Mkit-Hook-Signature":  hookverify.ErrBadSignature,
	}
	for name := range vec.Headers {
		h := header(vec.Headers)
		h.Del(name)
		if err := verify(h, vec.Audience, vec.Path, body, vec.VerifyAtMs); !errors.Is(err, hookverify.ErrMissingHeader) {
			t.Errorf("without %s: got %v, want ErrMissingHeader", name, err)
		}
		want, ok := onChange[name]
		if !ok {
			t.Errorf("header %s of the vector has no expected refusal", name)
			continue
		}
		h = header(vec.Headers)
		value := change(vec.Headers[name])
		h.Set(name, value)
		if err := verify(h, vec.Audience, vec.Path, body, vec.VerifyAtMs); !errors.Is(err, want) {
			t.Errorf("%s changed to %q: got %v, want %v", name, value, err, want)
		}
	}
	if len(vec.Headers) != len(onChange) {
		t.Errorf("vector has %d headers, want the %d of mkit-hook v2", len(vec.Headers), len(onChange))
	}
	if err := verifyAny(header(vec.Headers), body); err != nil {
		t.Errorf("vector refused by a receiver of any namespace: %v", err)
	}
	// The namespace is signed: a receiver of every namespace still refuses
	// the vector relabelled for another one.
	for _, ns := range []string{change(vec.Namespace), "victim", vec.Namespace + "-2"} {
		h := header(vec.Headers)
		h.Set("X-Mkit-Hook-Namespace", ns)
		if err := verifyAny(h, body); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("namespace relabelled %s: got %v, want ErrBadSignature", ns, err)
		}
	}
	expires, _ := strconv.ParseInt(vec.Headers["X-Mkit-Hook-Expires-At"], 10, 64)
	created, _ := strconv.ParseInt(vec.Headers["X-Mkit-Hook-Created-At"], 10, 64)
	for name, h := range map[string]http.Header{
		"expires sooner": header(vec.Headers),
		"created later":  header(vec.Headers),
	} {
		if name == "expires sooner" {
			h.Set("X-Mkit-Hook-Expires-At", strconv.FormatInt(expires-1, 10))
		} else {
			h.Set("X-Mkit-Hook-Created-At", strconv.FormatInt(created+1, 10))
		}
		if err := verify(h, vec.Audience, vec.Path, body, vec.VerifyAtMs); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("%s by 1 ms (window still valid): got %v, want ErrBadSignature", name, err)
		}
	}
	for i := range body {
		changed := []byte(vec.Body)
		changed[i] ^= 0x01
		if err := verify(header(vec.Headers), vec.Audience, vec.Path, changed, vec.VerifyAtMs); !errors.Is(err, hookverify.ErrDigest) {
			t.Fatalf("body byte %d changed: got %v, want ErrDigest", i, err)
		}
	}
	for _, path := range []string{vec.Path + "/", "/relay/IN", "/relay/in%20", "/"} {
		if err := verify(header(vec.Headers), vec.Audience, path, body, vec.VerifyAtMs); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("path %s: got %v, want ErrBadSignature", path, err)
		}
	}
	for _, aud := range []string{"https://hooks.example.org", "http://hooks.example.com", "https://hooks.example.com:8443"} {
		if err := verify(header(vec.Headers), aud, vec.Path, body, vec.VerifyAtMs); !errors.Is(err, hookverify.ErrAudience) {
			t.Errorf("receiver at %s: got %v, want ErrAudience", aud, err)
		}
	}
	if err := verify(header(vec.Headers), vec.Audience, vec.Path, body, expires); !errors.Is(err, hookverify.ErrExpired) {
		t.Errorf("at expiry: got %v, want ErrExpired", err)
	}
}

func TestStandardVectorVerifiesAndEverySingleChangeFails(t *testing.T) {
	t.Parallel()
	vec := loadVectors(t).Standard
	verify := func(h http.Header, secret string, body []byte) error {
		v := &hookverify.StandardVerifier{Secrets: []string{secret}, Now: func() time.Time { return time.Unix(vec.VerifyAt, 0) }}
		return v.Verify(h, body)
	}
	body := []byte(vec.Body)
	if err := verify(header(vec.Headers), vec.Secret, body); err != nil {
		t.Fatalf("vector refused: %v", err)
	}
	for name := range vec.Headers {
		h := header(vec.Headers)
		h.Del(name)
		if err := verify(h, vec.Secret, body); !errors.Is(err, hookverify.ErrMissingHeader) {
			t.Errorf("without %s: got %v, want ErrMissingHeader", name, err)
		}
		h = header(vec.Headers)
		h.Set(name, change(vec.Headers[name]))
		if err := verify(h, vec.Secret, body); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("%s changed: got %v, want ErrBadSignature", name, err)
		}
	}
	for i := range body {
		changed := []byte(vec.Body)
		changed[i] ^= 0x01
		if err := verify(header(vec.Headers), vec.Secret, changed); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Fatalf("body byte %d changed: got %v, want ErrBadSignature", i, err)
		}
	}
	if err := verify(header(vec.Headers), secret(7), body); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("other secret: got %v", err)
	}
}

func TestStandardV1aVectorVerifiesAndEverySingleChangeFails(t *testing.T) {
	t.Parallel()
	vec := loadVectors(t).StandardV1a
	verify := func(h http.Header, pub string, body []byte) error {
		v := &hookverify.StandardVerifier{PublicKeys: []string{pub}, Now: func() time.Time { return time.Unix(vec.VerifyAt, 0) }}
		return v.Verify(h, body)
	}
	body := []byte(vec.Body)
	if err := verify(header(vec.Headers), vec.PublicKey, body); err != nil {
		t.Fatalf("vector refused: %v", err)
	}
	for name := range vec.Headers {
		h := header(vec.Headers)
		h.Del(name)
		if err := verify(h, vec.PublicKey, body); !errors.Is(err, hookverify.ErrMissingHeader) {
			t.Errorf("without %s: got %v, want ErrMissingHeader", name, err)
		}
		h = header(vec.Headers)
		h.Set(name, change(vec.Headers[name]))
		if err := verify(h, vec.PublicKey, body); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("%s changed: got %v, want ErrBadSignature", name, err)
		}
	}
	for i := range body {
		changed := []byte(vec.Body)
		changed[i] ^= 0x01
		if err := verify(header(vec.Headers), vec.PublicKey, changed); !errors.Is(err, hookverify.ErrBadSignature) {
			t.Fatalf("body byte %d changed: got %v, want ErrBadSignature", i, err)
		}
	}
	if err := verify(header(vec.Headers), v1aPublic(7), body); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("other key: got %v", err)
	}
}
