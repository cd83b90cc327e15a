package verifycheck_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/signing"
)

// nodeV1a runs verify_v1a.js, which checks v1a signatures with Node's
// built-in Ed25519 (crypto.verify), written from the specification and not
// from relay's code; it reports whether it accepted. It needs node only.
func nodeV1a(t *testing.T, publicKeys []string, h map[string]string, body []byte, now int64) bool {
	t.Helper()
	_, ok := runNode(t, map[string]any{
		"publicKeys": publicKeys, "headers": h, "bodyBase64": base64.StdEncoding.EncodeToString(body), "now": now,
	}, "verify_v1a.js")
	return ok
}

// needNodeOnly skips without node, and fails instead under
// RELAY_TEST_REQUIRE_REAL=1.
func needNodeOnly(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		if os.Getenv("RELAY_TEST_REQUIRE_REAL") == "1" {
			t.Fatal("node is not on PATH, and RELAY_TEST_REQUIRE_REAL=1")
		}
		t.Skip("node is not on PATH")
	}
}

func v1aHeaders(t *testing.T, msgID string, keys []string, body []byte, at time.Time) map[string]string {
	t.Helper()
	return webhookHeaders(t)(signing.SignStandardV1a(msgID, keys, body, at))
}

func TestNodeCryptoVerifiesRelaysV1aSignatures(t *testing.T) {
	t.Parallel()
	needNodeOnly(t)
	key, other := v1aPrivate(1), v1aPrivate(100)
	pub, otherPub := v1aPublic(1), v1aPublic(100)
	payload := []byte(body)
	h := v1aHeaders(t, "msg_r-7f3a_billing", []string{key}, payload, t0)
	if !nodeV1a(t, []string{pub}, h, payload, t0.Unix()) {
		t.Error("Node's Ed25519 rejects relay's v1a signature")
	}
	tampered := bytes.Clone(payload)
	tampered[len(tampered)/2] ^= 0x01
	if nodeV1a(t, []string{pub}, h, tampered, t0.Unix()) {
		t.Error("Node accepts a tampered body")
	}
	if nodeV1a(t, []string{otherPub}, h, payload, t0.Unix()) {
		t.Error("Node accepts another endpoint's key")
	}
	rotating := v1aHeaders(t, "msg_r-7f3a_billing", []string{other, key}, payload, t0)
	for _, p := range []string{pub, otherPub} {
		if !nodeV1a(t, []string{p}, rotating, payload, t0.Unix()) {
			t.Error("Node rejects a rotation signature")
		}
	}

	vec := loadVectors(t).StandardV1a
	if !nodeV1a(t, []string{vec.PublicKey}, vec.Headers, []byte(vec.Body), vec.VerifyAt) {
		t.Error("Node rejects the v1a test vector")
	}
	changed := map[string]string{}
	for k, v := range vec.Headers {
		changed[k] = v
	}
	changed["webhook-id"] = change(vec.Headers["webhook-id"])
	if nodeV1a(t, []string{vec.PublicKey}, changed, []byte(vec.Body), vec.VerifyAt) {
		t.Error("Node accepts the vector with another webhook-id")
	}
	// The vector's private key is the 64-byte form whose second half is the
	// public key it lists.
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(vec.PrivateKey, "whsk_"))
	if len(raw) != ed25519.PrivateKeySize || "whpk_"+base64.StdEncoding.EncodeToString(raw[32:]) != vec.PublicKey {
		t.Error("the vector's keys are not one pair")
	}
}
