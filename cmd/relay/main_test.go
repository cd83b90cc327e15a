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

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func testKeys(t *testing.T) hooks.KeyList {
	t.Helper()
	sign, err := (&signingConfig{keyID: "test"}).load(true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return sign.keys
}

// routes is the API on st, publishing keys, with the readiness check serve
// uses.
func routes(t *testing.T, st *redisstore.Store, keys hooks.KeyList) http.Handler {
	t.Helper()
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: "http://localhost:8080", HS256Secret: bytes.Repeat([]byte("k"), 32)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{
		Appender: &outbox.Appender{Store: st, Clock: clockSystem},
		Admin:    &outbox.Admin{Store: st, Clock: clockSystem},
		Auth:     auth,
		Ready:    ready(st),
		Keys:     hooks.KeysHandler(keys),
	})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestReadyWhenTheStoreAnswersAndCannotEvict(t *testing.T) {
	h := routes(t, redistest.Miniredis(t), testKeys(t))
	if code, body := get(t, h, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, body := get(t, h, "/readyz"); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("/readyz = %d %q", code, body)
	}
}

func TestNotReadyOnARedisThatMayEvictRows(t *testing.T) {
	srv := redistest.StartServer(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	h := routes(t, redistest.NewStore(t, srv.Client, redisstore.Options{}), testKeys(t))
	code, body := get(t, h, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "noeviction") {
		t.Fatalf("/readyz = %d %q, want 503 naming noeviction", code, body)
	}
	if strings.Contains(body, srv.Addr) {
		t.Fatalf("/readyz leaks the Redis address: %q", body)
	}
}

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
	cfg, err := parse([]string{"-redis", "redis://127.0.0.1:1", "-hook-key", keyFile, "-hook-key-id", "relay-1", "-published-keys", published})
	if err != nil {
		t.Fatal(err)
	}
	sign, err := cfg.signing.load(false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, routes(t, redistest.Miniredis(t), sign.keys), hooks.KeysPath)
	if code != http.StatusOK {
		t.Fatalf("%s = %d", hooks.KeysPath, code)
	}
	served, err := hookverify.ParseKeyList([]byte(body))
	if err != nil {
		t.Fatalf("served key list does not parse: %v", err)
	}
	if len(served.Keys) != 2 || served.Keys[0].KeyID != "relay-2" || served.Keys[1].KeyID != "relay-1" {
		t.Fatalf("served keys %+v, want relay-2 then relay-1", served.Keys)
	}
	key, err := hooks.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := hex.EncodeToString(key.Public().(ed25519.PublicKey)); served.Keys[1].PublicKey != want {
		t.Fatal("the published signing key is not the key file's")
	}
	if sign.signer.KeyID() != "relay-1" {
		t.Fatalf("signing with %s, want relay-1", sign.signer.KeyID())
	}
}

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
	_, err := (&signingConfig{keyID: "relay-1"}).load(false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "RELAY_HOOK_KEY_FILE") {
		t.Fatalf("load without a key on a real Redis = %v", err)
	}
	dev, err := (&signingConfig{keyID: "relay-1"}).load(true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil || !strings.HasPrefix(dev.signer.KeyID(), "dev-") {
		t.Fatalf("development key %v, %v", dev.signer, err)
	}
}

func TestConnectChoosesTheClientFromTheAddress(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		addr    string
		cluster bool
	}{
		{"redis://127.0.0.1:6379/0", false},
		{"127.0.0.1:7001, 127.0.0.1:7002", true},
		{"redis://user:secret@127.0.0.1:7001?addr=127.0.0.1:7002", true},
	} {
		c, closeFn, err := connect(tc.addr, log)
		if err != nil {
			t.Fatalf("%s: %v", tc.addr, err)
		}
		_, isCluster := c.(*redis.ClusterClient)
		closeFn()
		if isCluster != tc.cluster {
			t.Errorf("%s: cluster client %v, want %v", tc.addr, isCluster, tc.cluster)
		}
	}
	if _, _, err := connect("redis://127.0.0.1:notaport", log); err == nil {
		t.Error("a malformed URL was accepted")
	}
}

// Managed Redis: TLS (rediss://) and a username and password reach the
// client, for a single server and for a cluster alike.
func TestConnectTakesTLSAndCredentials(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	single, closeSingle, err := connect("rediss://relay:s3cret@redis.example.com:6380/0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSingle()
	o := single.(*redis.Client).Options()
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example.com" || o.Username != "relay" || o.Password != "s3cret" {
		t.Errorf("single server: TLS %v, user %q, password set %v", o.TLSConfig, o.Username, o.Password != "")
	}
	cl, closeCluster, err := connect("rediss://relay:s3cret@node1.example.com:6380?addr=node2.example.com:6380&addr=node3.example.com:6380", log)
	if err != nil {
		t.Fatal(err)
	}
	defer closeCluster()
	co := cl.(*redis.ClusterClient).Options()
	if co.TLSConfig == nil || co.Username != "relay" || co.Password != "s3cret" || len(co.Addrs) != 3 {
		t.Errorf("cluster: TLS %v, user %q, password set %v, seeds %v", co.TLSConfig, co.Username, co.Password != "", co.Addrs)
	}
}
