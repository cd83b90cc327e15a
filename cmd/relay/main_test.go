package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/signing"
)

func TestUnknownCommandIsAClearError(t *testing.T) {
	err := run(context.Background(), []string{"frobnicate"}, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "unknown command (known: serve,") {
		t.Fatalf("run = %v", err)
	}
}

// A key made by 'relay keygen' signs, and the key list relay serves holds
// its public key beside the other keys an operator publishes: the entry
// keygen printed for the next key, before relay signs with it.
func TestKeygenKeyIsPublishedBesideOtherKeys(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "signing.pem")
	if err := keygen([]string{"-out", keyFile}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if err := keygen([]string{"-out", keyFile}, io.Discard); err == nil {
		t.Fatal("keygen overwrote an existing key file")
	}
	var entry bytes.Buffer
	if err := keygen([]string{"-out", filepath.Join(dir, "next.pem"), "-key-id", "relay-2"}, &entry); err != nil {
		t.Fatal(err)
	}
	published := filepath.Join(dir, "published.json")
	list := `{"version":1,"keys":[` + strings.TrimSpace(entry.String()) + `]}`
	if err := os.WriteFile(published, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := parse([]string{"-redis", "", "-hook-key", keyFile, "-hook-key-id", "relay-1", "-published-keys", published})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, signing.KeysPath, nil))
	code, body := rec.Code, rec.Body.String()
	if code != http.StatusOK {
		t.Fatalf("%s = %d", signing.KeysPath, code)
	}
	served, err := hookverify.ParseKeyList([]byte(body))
	if err != nil {
		t.Fatalf("served key list does not parse: %v", err)
	}
	if len(served.Keys) != 2 || served.Keys[0].KeyID != "relay-2" || served.Keys[1].KeyID != "relay-1" {
		t.Fatalf("served keys %+v, want relay-2 then relay-1", served.Keys)
	}
	key, err := signing.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(key.Public().(ed25519.PublicKey)); served.Keys[1].PublicKey != want {
		t.Fatal("the published signing key is not the key file's")
	}
}

func TestAMalformedDeliveryConcurrencyIsAClearError(t *testing.T) {
	t.Setenv("RELAY_DELIVERY_CONCURRENCY", "lots")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "RELAY_DELIVERY_CONCURRENCY") {
		t.Fatalf("parse: %v, want an error naming the variable", err)
	}
	c, err := parse([]string{"--delivery-concurrency", "8"})
	if err != nil || c.Delivery.Concurrency != 8 {
		t.Fatalf("the flag overrides a malformed variable: %+v %v", c.Delivery, err)
	}
	t.Setenv("RELAY_DELIVERY_CONCURRENCY", "16")
	if c, err := parse(nil); err != nil || c.Delivery.Concurrency != 16 {
		t.Fatalf("from the variable: %+v %v", c.Delivery, err)
	}
}

func TestAMalformedDeliverySlowConcurrencyIsAClearError(t *testing.T) {
	t.Setenv("RELAY_DELIVERY_SLOW_CONCURRENCY", "lots")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "RELAY_DELIVERY_SLOW_CONCURRENCY") {
		t.Fatalf("parse: %v, want an error naming the variable", err)
	}
	c, err := parse([]string{"--delivery-slow-concurrency", "32"})
	if err != nil || c.Delivery.SlowConcurrency != 32 {
		t.Fatalf("the flag overrides a malformed variable: %+v %v", c.Delivery, err)
	}
	t.Setenv("RELAY_DELIVERY_SLOW_CONCURRENCY", "512")
	if c, err := parse(nil); err != nil || c.Delivery.SlowConcurrency != 512 {
		t.Fatalf("from the variable: %+v %v", c.Delivery, err)
	}
}
