package app

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAMisspeltPublishedKeyListIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "published.json")
	pub := strings.Repeat("ab", 32)
	for name, list := range map[string]string{
		"unknown field": `{"version":1,"keys":[{"keyId":"k","alg":"ed25519","publicKey":"` + pub + `","notAfter":1}]}`,
		"version 2":     `{"version":2,"keys":[{"keyId":"k","alg":"ed25519","publicKey":"` + pub + `"}]}`,
		"trailing data": `{"version":1,"keys":[{"keyId":"k","alg":"ed25519","publicKey":"` + pub + `"}]} {}`,
	} {
		if err := os.WriteFile(path, []byte(list), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeyList(path); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A relay on a real Redis does not sign with a throwaway key: receivers
// could never trust it.
func TestARealDeploymentNeedsASigningKey(t *testing.T) {
	_, err := (Signing{KeyID: "relay-1"}).load(false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "RELAY_HOOK_KEY_FILE") {
		t.Fatalf("load without a key on a real Redis = %v", err)
	}
	dev, err := (Signing{KeyID: "relay-1"}).load(true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || !strings.HasPrefix(dev.signer.KeyID(), "dev-") {
		t.Fatalf("development key %v, %v", dev.signer, err)
	}
}
