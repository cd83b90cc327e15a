package signing_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/signing"
	"github.com/zeebo/blake3"
)

// The test vectors receivers in any language test against. Regenerate with
//
//	go test ./internal/signing -run TestSignatureVectors -update-vectors
//
// and check the canonical string against docs/signing.md by
// hand before committing.
var updateVectors = flag.Bool("update-vectors", false, "rewrite "+vectorsPath)

const vectorsPath = "../../api/testdata/webhook-signatures.json"

// vectorFile is api/testdata/webhook-signatures.json. hookverify's tests
// read the same file with their own type.
type vectorFile struct {
	Description string         `json:"description"`
	Mkit        mkitVector     `json:"mkitHookV2"`
	Standard    standardVector `json:"standardWebhooks"`
	StandardV1a v1aVector      `json:"standardWebhooksV1a"`
}

type mkitVector struct {
	SeedHex      string          `json:"seedHex"`
	PublicKeyHex string          `json:"publicKeyHex"`
	KeyID        string          `json:"keyId"`
	Namespace    string          `json:"namespace"`
	Endpoint     string          `json:"endpoint"`
	Body         string          `json:"body"`
	CreatedMs    int64           `json:"createdMs"`
	ValidityMs   int64           `json:"validityMs"`
	NonceHex     string          `json:"nonceHex"`
	VerifyAtMs   int64           `json:"verifyAtMs"`
	Audience     string          `json:"audience"`
	Path         string          `json:"path"`
	Canonical    string          `json:"canonical"`
	CanonicalB3  string          `json:"canonicalBlake3Hex"`
	KeyList      signing.KeyList `json:"keyList"`
	Headers      mkitHeaderOrder `json:"headers"`
}

// mkitHeaderOrder lists the headers in the order of the signed fields.
type mkitHeaderOrder struct {
	Version   string `json:"X-Mkit-Hook-Version"`
	KeyID     string `json:"X-Mkit-Hook-Key-Id"`
	Namespace string `json:"X-Mkit-Hook-Namespace"`
	Audience  string `json:"X-Mkit-Hook-Audience"`
	CreatedAt string `json:"X-Mkit-Hook-Created-At"`
	ExpiresAt string `json:"X-Mkit-Hook-Expires-At"`
	Nonce     string `json:"X-Mkit-Hook-Nonce"`
	Digest    string `json:"X-Mkit-Hook-Digest"`
	Signature string `json:"X-Mkit-Hook-Signature"`
}

type standardVector struct {
	Secret        string              `json:"secret"`
	MsgID         string              `json:"msgId"`
	Timestamp     int64               `json:"timestamp"`
	Body          string              `json:"body"`
	VerifyAt      int64               `json:"verifyAt"`
	SignedContent string              `json:"signedContent"`
	Headers       standardHeaderOrder `json:"headers"`
}

type v1aVector struct {
	PrivateKey    string              `json:"privateKey"`
	PublicKey     string              `json:"publicKey"`
	MsgID         string              `json:"msgId"`
	Timestamp     int64               `json:"timestamp"`
	Body          string              `json:"body"`
	VerifyAt      int64               `json:"verifyAt"`
	SignedContent string              `json:"signedContent"`
	Headers       standardHeaderOrder `json:"headers"`
}

type standardHeaderOrder struct {
	ID        string `json:"webhook-id"`
	Timestamp string `json:"webhook-timestamp"`
	Signature string `json:"webhook-signature"`
}

func (h mkitHeaderOrder) header() http.Header {
	return http.Header{
		"X-Mkit-Hook-Version": {h.Version}, "X-Mkit-Hook-Key-Id": {h.KeyID},
		"X-Mkit-Hook-Namespace": {h.Namespace}, "X-Mkit-Hook-Audience": {h.Audience}, "X-Mkit-Hook-Created-At": {h.CreatedAt},
		"X-Mkit-Hook-Expires-At": {h.ExpiresAt}, "X-Mkit-Hook-Nonce": {h.Nonce},
		"X-Mkit-Hook-Digest": {h.Digest}, "X-Mkit-Hook-Signature": {h.Signature},
	}
}

// vectorInputs are the fixed inputs the file is generated from.
func vectorInputs() vectorFile {
	seed := make([]byte, 32)
	for i := range seed {
		seed[i] = byte(i + 1) // 0x01..0x20
	}
	nonce := make([]byte, 32)
	for i := range nonce {
		nonce[i] = byte(0xa0 + i) // 0xa0..0xbf
	}
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(0x40 + i) // 0x40..0x5f
	}
	v1aSeed := make([]byte, 32)
	for i := range v1aSeed {
		v1aSeed[i] = byte(0x60 + i) // 0x60..0x7f
	}
	const body = `{"type":"outcome.committed","timestamp":"2025-11-30T00:00:00Z","data":{"reservation_id":"r-7f3a","namespace":"acme","audience":"https://relay.example.com","repository":"acme/widgets","occurred_unix_ms":1764460800000,"committed":{"bytes_stored":1024,"new_to_repo":512,"new_to_store":256,"refs":[{"name":"refs/heads/main","new":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","deleted":false}]}}}`
	return vectorFile{
		Description: "Signatures of relay webhooks for fixed inputs (see docs/signing.md). " +
			"mkitHookV2: Ed25519 key from seedHex; canonical is the exact string whose BLAKE3 is signed " +
			"(nine fields joined by \\n, no final newline: mkit-hook:v2, key id, namespace, audience, path, " +
			"body digest, created ms, expiry ms, nonce); the endpoint's query is not signed. A receiver " +
			"accepts only the namespaces it names, and the body's data.namespace is the signed one. " +
			"standardWebhooks: HMAC-SHA256 over signedContent with the base64-decoded bytes after whsec_. " +
			"standardWebhooksV1a: Ed25519 over the same signedContent; privateKey is whsk_ and the base64 of the " +
			"64-byte private key (seed, then public key), publicKey whpk_ and the base64 of the 32-byte public key. " +
			"Bodies are the exact ASCII bytes of the body strings. A verifier given the headers, path and body " +
			"at verifyAtMs / verifyAt must accept, and must reject any single change to them.",
		Mkit: mkitVector{
			SeedHex:    hex.EncodeToString(seed),
			KeyID:      "relay-2025-11",
			Namespace:  "acme",
			Endpoint:   "https://Hooks.Example.COM:443/relay/in?attempt=ignored",
			Body:       body,
			CreatedMs:  1_764_460_800_000,
			ValidityMs: 300_000,
			NonceHex:   hex.EncodeToString(nonce),
			VerifyAtMs: 1_764_460_801_000,
		},
		Standard: standardVector{
			Secret:    "whsec_" + base64.StdEncoding.EncodeToString(secret),
			MsgID:     "msg_r-7f3a_billing",
			Timestamp: 1_764_460_800,
			Body:      body,
			VerifyAt:  1_764_460_801,
		},
		StandardV1a: v1aVector{
			PrivateKey: "whsk_" + base64.StdEncoding.EncodeToString(ed25519.NewKeyFromSeed(v1aSeed)),
			MsgID:      "msg_r-7f3a_billing",
			Timestamp:  1_764_460_800,
			Body:       body,
			VerifyAt:   1_764_460_801,
		},
	}
}

// signVectors fills the outputs of v from its inputs with relay's signers.
func signVectors(t *testing.T, v vectorFile) vectorFile {
	t.Helper()
	m := &v.Mkit
	seed, err := hex.DecodeString(m.SeedHex)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := hex.DecodeString(m.NonceHex)
	if err != nil {
		t.Fatal(err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	s := sigSigner(t, m.KeyID, key, signing.WithValidity(time.Duration(m.ValidityMs)*time.Millisecond), signing.WithRand(bytes.NewReader(nonce)))
	ep := sigURL(t, m.Endpoint)
	h, err := s.Sign(ep, m.Namespace, []byte(m.Body), time.UnixMilli(m.CreatedMs))
	if err != nil {
		t.Fatal(err)
	}
	m.PublicKeyHex = s.PublicKey().PublicKey
	if m.Audience, err = signing.Origin(ep); err != nil {
		t.Fatal(err)
	}
	m.Path = signing.SignedPath(ep)
	m.Headers = mkitHeaderOrder{
		Version: h.Get("X-Mkit-Hook-Version"), KeyID: h.Get("X-Mkit-Hook-Key-Id"),
		Namespace: h.Get("X-Mkit-Hook-Namespace"), Audience: h.Get("X-Mkit-Hook-Audience"), CreatedAt: h.Get("X-Mkit-Hook-Created-At"),
		ExpiresAt: h.Get("X-Mkit-Hook-Expires-At"), Nonce: h.Get("X-Mkit-Hook-Nonce"),
		Digest: h.Get("X-Mkit-Hook-Digest"), Signature: h.Get("X-Mkit-Hook-Signature"),
	}
	if got := m.Headers.header(); len(got) != len(h) {
		t.Fatalf("signer wrote %d headers, the vector holds %d", len(h), len(got))
	}
	m.Canonical = strings.Join([]string{"mkit-hook:v2", m.KeyID, m.Namespace, m.Audience, m.Path, m.Headers.Digest,
		m.Headers.CreatedAt, m.Headers.ExpiresAt, m.Headers.Nonce}, "\n")
	sum := blake3.Sum256([]byte(m.Canonical))
	m.CanonicalB3 = hex.EncodeToString(sum[:])
	if m.KeyList, err = signing.NewKeyList(s.PublicKey()); err != nil {
		t.Fatal(err)
	}

	sv := &v.Standard
	sh, err := signing.SignStandard(sv.MsgID, []string{sv.Secret}, []byte(sv.Body), time.Unix(sv.Timestamp, 0))
	if err != nil {
		t.Fatal(err)
	}
	sv.SignedContent = sv.MsgID + "." + sh.Get("webhook-timestamp") + "." + sv.Body
	sv.Headers = standardHeaderOrder{ID: sh.Get("webhook-id"), Timestamp: sh.Get("webhook-timestamp"), Signature: sh.Get("webhook-signature")}

	av := &v.StandardV1a
	ah, err := signing.SignStandardV1a(av.MsgID, []string{av.PrivateKey}, []byte(av.Body), time.Unix(av.Timestamp, 0))
	if err != nil {
		t.Fatal(err)
	}
	if av.PublicKey, err = signing.StandardPublicKey(av.PrivateKey); err != nil {
		t.Fatal(err)
	}
	av.SignedContent = av.MsgID + "." + ah.Get("webhook-timestamp") + "." + av.Body
	av.Headers = standardHeaderOrder{ID: ah.Get("webhook-id"), Timestamp: ah.Get("webhook-timestamp"), Signature: ah.Get("webhook-signature")}
	return v
}

func encodeVectors(t *testing.T, v vectorFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestSignatureVectors: signing the file's inputs gives exactly the file's
// headers, and the file's own outputs agree with each other (the signature
// verifies over BLAKE3 of canonical; the HMAC is over signedContent).
func TestSignatureVectors(t *testing.T) {
	if *updateVectors {
		if err := os.WriteFile(vectorsPath, encodeVectors(t, signVectors(t, vectorInputs())), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", vectorsPath)
	}
	raw, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatalf("%v (generate it with -update-vectors)", err)
	}
	var file vectorFile
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	got := signVectors(t, file)
	if g, w := encodeVectors(t, got), encodeVectors(t, file); !bytes.Equal(g, w) {
		t.Errorf("signing the vector inputs gives\n%s\nthe file holds\n%s", g, w)
	}
	if !bytes.Equal(encodeVectors(t, file), raw) {
		t.Error("the file is not in its canonical encoding; regenerate it with -update-vectors")
	}

	m := file.Mkit
	pub, _ := hex.DecodeString(m.PublicKeyHex)
	sig, _ := hex.DecodeString(m.Headers.Signature)
	sum := blake3.Sum256([]byte(m.Canonical))
	if hex.EncodeToString(sum[:]) != m.CanonicalB3 || !ed25519.Verify(pub, sum[:], sig) {
		t.Error("mkit signature does not verify over BLAKE3 of the canonical string")
	}
	if strings.Count(m.Canonical, "\n") != 8 || strings.HasSuffix(m.Canonical, "\n") {
		t.Error("canonical string is not nine fields without a final newline")
	}
	// The namespace is signed, and is the one the body names.
	if fields := strings.Split(m.Canonical, "\n"); fields[0] != "mkit-hook:v2" || fields[2] != m.Namespace || m.Headers.Namespace != m.Namespace {
		t.Errorf("canonical fields %q do not sign namespace %q", fields, m.Namespace)
	}
	var body struct {
		Data struct {
			Namespace string `json:"namespace"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(m.Body), &body); err != nil || body.Data.Namespace != m.Namespace {
		t.Errorf("the body's data.namespace is %q (%v), want %q", body.Data.Namespace, err, m.Namespace)
	}
	s := file.Standard
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s.Secret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(s.SignedContent))
	if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); s.Headers.Signature != want {
		t.Errorf("webhook-signature %s, HMAC of signedContent is %s", s.Headers.Signature, want)
	}
	a := file.StandardV1a
	priv, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(a.PrivateKey, "whsk_"))
	apub, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(a.PublicKey, "whpk_"))
	asig, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(a.Headers.Signature, "v1a,"))
	if len(priv) != ed25519.PrivateKeySize || !bytes.Equal(priv[32:], apub) || !strings.HasPrefix(a.Headers.Signature, "v1a,") ||
		!ed25519.Verify(apub, []byte(a.SignedContent), asig) {
		t.Error("v1a signature does not verify over signedContent with publicKey, the private key's public half")
	}
	if a.SignedContent != s.SignedContent {
		t.Error("v1a signs other content than v1 for the same message")
	}
}
