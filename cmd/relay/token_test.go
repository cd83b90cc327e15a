package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/envflag"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/signing"
)

const testSecret = "a-test-secret-that-is-32-bytes!!"

// clearAuthEnv keeps the developer's environment out of the test.
func clearAuthEnv(t *testing.T) {
	for _, v := range []string{"RELAY_JWT_SECRET", "RELAY_JWT_PUBLIC_KEYS", "RELAY_JWT_ISSUER", "RELAY_JWT_AUDIENCE", "RELAY_JWT_LEEWAY", "RELAY_PUBLIC_URL", "RELAY_LISTEN"} {
		t.Setenv(v, "")
	}
}

// serveAuth is the API auth settings relay serve reads from the
// environment.
func serveAuth(t *testing.T) app.Auth {
	t.Helper()
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Auth
}

func mintCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := token(args, &out); err != nil {
		t.Fatalf("relay token %v: %v", args, err)
	}
	s := out.String()
	tok, ok := strings.CutSuffix(s, "\n")
	if !ok || strings.ContainsAny(tok, "\n ") || strings.Count(tok, ".") != 2 {
		t.Fatalf("relay token printed %q, want one token and a newline", s)
	}
	return tok
}

func verifier(t *testing.T, cfg httpapi.AuthConfig) *httpapi.Auth {
	t.Helper()
	a, err := httpapi.NewAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestTokenMintsWhatServeVerifies(t *testing.T) {
	clearAuthEnv(t)
	t.Setenv("RELAY_JWT_SECRET", testSecret)
	tok := mintCLI(t, "--scope", "outcomes:write", "--scope", "outbox:read endpoints:write", "--ns", "acme", "--sub", "deploy-bot", "--ttl", "10m")

	// serve in development: audience from the listen address.
	c := serveAuth(t)
	auth, devSecret, err := c.Load(true, "http://127.0.0.1:8080", slog.New(slog.DiscardHandler))
	if err != nil || devSecret != nil {
		t.Fatalf("load: %v, dev secret %v", err, devSecret != nil)
	}
	p, err := auth.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	want := []httpapi.Scope{httpapi.ScopeOutcomesWrite, httpapi.ScopeOutboxRead, httpapi.ScopeEndpointsWrite}
	if p.Subject != "deploy-bot" || p.Namespace != "acme" || !slices.Equal(p.Scopes, want) {
		t.Fatalf("principal %+v", p)
	}
	claims := jwt.MapClaims{}
	if _, _, err := jwt.NewParser().ParseUnverified(tok, claims); err != nil {
		t.Fatal(err)
	}
	iat, _ := claims["iat"].(float64)
	exp, _ := claims["exp"].(float64)
	if exp-iat != 600 {
		t.Fatalf("exp - iat = %v, want 600 s", exp-iat)
	}
}

func TestTokenAudienceFollowsServe(t *testing.T) {
	clearAuthEnv(t)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "http://127.0.0.1:8080"},
		{[]string{"--public-url", "https://Relay.Example.com/"}, nil, "https://relay.example.com"},
		{nil, map[string]string{"RELAY_PUBLIC_URL": "https://relay.example.com"}, "https://relay.example.com"},
		{nil, map[string]string{"RELAY_LISTEN": "0.0.0.0:9000"}, "http://localhost:9000"},
		{[]string{"--jwt-audience", "relay-api", "--public-url", "https://relay.example.com"}, nil, "relay-api"},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		tok := mintCLI(t, append([]string{"--jwt-secret", testSecret, "--scope", "admin"}, c.args...)...)
		if _, err := verifier(t, httpapi.AuthConfig{Audience: c.want, HS256Secret: []byte(testSecret)}).Verify(tok); err != nil {
			t.Errorf("%v %v: token not for %s: %v", c.args, c.env, c.want, err)
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
}

func TestTokenCarriesTheIssuer(t *testing.T) {
	clearAuthEnv(t)
	tok := mintCLI(t, "--jwt-secret", testSecret, "--scope", "admin", "--jwt-issuer", "ops")
	cfg := httpapi.AuthConfig{Audience: "http://127.0.0.1:8080", HS256Secret: []byte(testSecret), Issuer: "ops"}
	if _, err := verifier(t, cfg).Verify(tok); err != nil {
		t.Fatal(err)
	}
	cfg.Issuer = "someone-else"
	if _, err := verifier(t, cfg).Verify(tok); err == nil {
		t.Fatal("issuer not in the token")
	}
}

// A key written by relay keygen signs EdDSA tokens that serve verifies with
// the public key file, the kid choosing among keys.
func TestTokenSignsEdDSAWithAKeyFile(t *testing.T) {
	clearAuthEnv(t)
	t.Setenv("RELAY_JWT_SECRET", testSecret) // --key takes over from the env secret
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "issuer.pem")
	if err := keygen([]string{"-out", keyFile}, io.Discard); err != nil {
		t.Fatal(err)
	}
	key, err := signing.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	pubFile := writePublicKeys(t, dir, "issuer.pub", key.Public().(ed25519.PublicKey))
	otherFile := writePublicKeys(t, dir, "other.pub", other)

	tok := mintCLI(t, "--key", keyFile, "--kid", "k2", "--scope", "admin")
	c := app.Auth{PublicKeys: "k1=" + otherFile + ", k2=" + pubFile, Leeway: app.DefaultLeeway}
	auth, _, err := c.Load(false, "http://127.0.0.1:8080", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Verify(tok); err != nil {
		t.Fatalf("EdDSA token refused: %v", err)
	}
	wrongKid := mintCLI(t, "--key", keyFile, "--kid", "k1", "--scope", "admin")
	if _, err := auth.Verify(wrongKid); err == nil {
		t.Fatal("a token whose kid names another key verified")
	}
	// The env secret was not used: an HS256 verifier refuses the token.
	if _, err := verifier(t, httpapi.AuthConfig{Audience: "http://127.0.0.1:8080", HS256Secret: []byte(testSecret)}).Verify(tok); err == nil {
		t.Fatal("token verified as HS256")
	}
}

func writePublicKeys(t *testing.T, dir, name string, keys ...ed25519.PublicKey) string {
	t.Helper()
	var buf bytes.Buffer
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		pem.Encode(&buf, &pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenRefusesWhatItCannotMint(t *testing.T) {
	clearAuthEnv(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "k.pem")
	if err := keygen([]string{"-out", keyFile}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--jwt-secret", testSecret}, "--scope"},
		{[]string{"--jwt-secret", testSecret, "--scope", "outcomes:write root"}, `unknown scope "root"`},
		{[]string{"--jwt-secret", testSecret, "--scope", "outcome:write"}, "outcomes:write, endpoints:write, outbox:read, admin"},
		{[]string{"--jwt-secret", testSecret, "--scope", "admin", "--ns", "Acme"}, `--ns "Acme" is not a namespace`},
		{[]string{"--jwt-secret", testSecret, "--scope", "admin", "--ttl", "0s"}, "--ttl"},
		{[]string{"--jwt-secret", testSecret, "--scope", "admin", "--sub", ""}, "--sub"},
		{[]string{"--jwt-secret", "too-short", "--scope", "admin"}, "at least 32"},
		{[]string{"--scope", "admin"}, "RELAY_JWT_SECRET"},
		{[]string{"--jwt-secret", testSecret, "--key", keyFile, "--scope", "admin"}, "not both"},
		{[]string{"--key", filepath.Join(dir, "missing.pem"), "--scope", "admin"}, "missing.pem"},
		{[]string{"--jwt-secret", testSecret, "--scope", "admin", "--public-url", "https://relay.example.com/path"}, "origin"},
		{[]string{"--jwt-secret", testSecret, "--scope", "admin", "extra"}, "1 unexpected argument(s)"},
	} {
		var out bytes.Buffer
		err := token(c.args, &out)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("relay token %v: error %v, want one naming %q", c.args, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("relay token %v printed %q on failure", c.args, out.String())
		}
		if err != nil && strings.Contains(err.Error(), testSecret) {
			t.Errorf("relay token %v: the error shows the secret", c.args)
		}
	}
}

func TestDevelopmentGetsAThrowawaySecretAndRealUseNeedsAKey(t *testing.T) {
	clearAuthEnv(t)
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	c := serveAuth(t)

	auth, devSecret, err := c.Load(true, "http://127.0.0.1:8080", logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(devSecret) != 32 {
		t.Fatalf("dev secret of %d bytes", len(devSecret))
	}
	// serve mints the dev admin token with it.
	p := httpapi.Principal{Subject: "dev", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}
	tok, err := httpapi.MintHS256(devSecret, "http://127.0.0.1:8080", "", p, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Verify(tok); err != nil {
		t.Fatalf("dev admin token refused: %v", err)
	}
	if !strings.Contains(log.String(), "NO JWT KEY CONFIGURED") {
		t.Fatalf("no warning: %s", log.String())
	}
	if _, again, _ := c.Load(true, "http://127.0.0.1:8080", logger); bytes.Equal(again, devSecret) {
		t.Fatal("the throwaway secret repeats")
	}

	_, _, err = c.Load(false, "https://relay.example.com", logger)
	if err == nil || !strings.Contains(err.Error(), "RELAY_JWT_SECRET") || !strings.Contains(err.Error(), "RELAY_JWT_PUBLIC_KEYS") {
		t.Fatalf("real use without a key: %v", err)
	}
}

func TestAuthConfigFromFlagsAndEnvironment(t *testing.T) {
	clearAuthEnv(t)
	t.Setenv("RELAY_JWT_SECRET", testSecret)
	t.Setenv("RELAY_JWT_AUDIENCE", "relay-api")
	t.Setenv("RELAY_JWT_LEEWAY", "20s")
	fs := envflag.New("serve")
	c := app.Defaults().Auth
	authFlags(fs, &c)
	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if strings.Contains(help.String(), testSecret) {
		t.Fatalf("-help shows the secret: %s", help.String())
	}
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	auth, _, err := c.Load(false, "https://relay.example.com", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := httpapi.Principal{Subject: "x", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}
	// The audience is RELAY_JWT_AUDIENCE, not the public URL.
	ours, _ := httpapi.MintHS256([]byte(testSecret), "relay-api", "", p, time.Hour, time.Now())
	theirs, _ := httpapi.MintHS256([]byte(testSecret), "https://relay.example.com", "", p, time.Hour, time.Now())
	if _, err := auth.Verify(ours); err != nil {
		t.Fatalf("token for relay-api: %v", err)
	}
	if _, err := auth.Verify(theirs); err == nil {
		t.Fatal("token for the public URL accepted despite RELAY_JWT_AUDIENCE")
	}
	// 20 s of leeway from the environment.
	late, _ := httpapi.MintHS256([]byte(testSecret), "relay-api", "", p, time.Second, time.Now().Add(-15*time.Second))
	if _, err := auth.Verify(late); err != nil {
		t.Fatalf("token 14 s past exp with 20 s leeway: %v", err)
	}
}

func TestAuthConfigRefusesBadSettings(t *testing.T) {
	clearAuthEnv(t)
	dir := t.TempDir()
	priv := filepath.Join(dir, "priv.pem")
	if err := keygen([]string{"-out", priv}, io.Discard); err != nil {
		t.Fatal(err)
	}
	k1, _, _ := ed25519.GenerateKey(rand.Reader)
	k2, _, _ := ed25519.GenerateKey(rand.Reader)
	two := writePublicKeys(t, dir, "two.pub", k1, k2)
	empty := filepath.Join(dir, "empty.pub")
	os.WriteFile(empty, []byte("not pem\n"), 0o644)
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"short secret", []string{"--jwt-secret", "short"}, nil, "at least 32"},
		{"leeway over 30s", []string{"--jwt-secret", testSecret, "--jwt-leeway", "31s"}, nil, "leeway"},
		{"malformed env leeway", nil, map[string]string{"RELAY_JWT_SECRET": testSecret, "RELAY_JWT_LEEWAY": "five"}, "RELAY_JWT_LEEWAY"},
		{"private key as public", []string{"--jwt-public-keys", priv}, nil, `"PRIVATE KEY"`},
		{"kid for two keys", []string{"--jwt-public-keys", "k=" + two}, nil, "holds 2 keys"},
		{"no PEM", []string{"--jwt-public-keys", empty}, nil, "no PEM"},
		{"missing file", []string{"--jwt-public-keys", filepath.Join(dir, "nope.pub")}, nil, "nope.pub"},
		{"only commas", []string{"--jwt-public-keys", " , "}, nil, "no key file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			fs := envflag.New("serve")
			fs.SetOutput(io.Discard)
			cfg := app.Defaults().Auth
			authFlags(fs, &cfg)
			// A malformed variable is refused as the flags are read, the
			// rest as the verifier is built.
			err := fs.Parse(c.args)
			if err == nil {
				_, _, err = cfg.Load(false, "https://relay.example.com", log)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load: %v, want an error naming %q", err, c.want)
			}
			if strings.Contains(err.Error(), "BEGIN") || strings.Contains(err.Error(), testSecret) {
				t.Fatalf("error shows key material: %v", err)
			}
		})
	}

	// A good --jwt-leeway overrides a malformed environment.
	t.Setenv("RELAY_JWT_SECRET", testSecret)
	t.Setenv("RELAY_JWT_LEEWAY", "five")
	fs := envflag.New("serve")
	cfg := app.Defaults().Auth
	authFlags(fs, &cfg)
	if err := fs.Parse([]string{"--jwt-leeway", "2s"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cfg.Load(false, "https://relay.example.com", log); err != nil {
		t.Fatalf("flag did not override the env: %v", err)
	}
}

// Several keys in one file, without kids, all verify.
func TestAPublicKeyFileMayHoldSeveralKeys(t *testing.T) {
	clearAuthEnv(t)
	dir := t.TempDir()
	pubA, privA, _ := ed25519.GenerateKey(rand.Reader)
	pubB, privB, _ := ed25519.GenerateKey(rand.Reader)
	file := writePublicKeys(t, dir, "keys.pub", pubA, pubB)
	c := app.Auth{PublicKeys: file, Leeway: app.DefaultLeeway}
	auth, _, err := c.Load(false, "https://relay.example.com", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	p := httpapi.Principal{Subject: "x", Scopes: []httpapi.Scope{httpapi.ScopeOutboxRead}}
	for _, k := range []ed25519.PrivateKey{privA, privB} {
		tok, err := httpapi.MintEdDSA(k, "", "https://relay.example.com", "", p, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := auth.Verify(tok); err != nil {
			t.Fatalf("key refused: %v", err)
		}
	}
}

func TestTokenConsolePrintsALinkAtThePublicURL(t *testing.T) {
	clearAuthEnv(t)
	var out bytes.Buffer
	args := []string{"--jwt-secret", testSecret, "--scope", "outbox:read", "--ns", "acme", "--public-url", "https://Relay.Example.com/", "--jwt-audience", "relay-api", "--console"}
	if err := token(args, &out); err != nil {
		t.Fatal(err)
	}
	link, ok := strings.CutSuffix(out.String(), "\n")
	tok, found := strings.CutPrefix(link, "https://relay.example.com/console/#token=")
	if !ok || !found || strings.ContainsAny(tok, "\n ") {
		t.Fatalf("relay token --console printed %q, want the console at the public URL with the token in the fragment", out.String())
	}
	p, err := verifier(t, httpapi.AuthConfig{Audience: "relay-api", HS256Secret: []byte(testSecret)}).Verify(tok)
	if err != nil || p.Namespace != "acme" {
		t.Fatalf("the link's token: %+v, %v", p, err)
	}
}

// On the embedded default relay token --console cannot sign (the server's
// secret is its own) and says what to do: ask the server, with the token
// it printed, for a link; done as it says, the link opens that namespace's
// pages read-only and no other's.
func TestTokenConsoleOnTheDevelopmentServerSaysHowToGetALinkAndThatWorks(t *testing.T) {
	clearAuthEnv(t)
	p, admin := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	t.Setenv("RELAY_LISTEN", p.Addr)
	var out bytes.Buffer
	err := token([]string{"--console", "--scope", "outbox:read", "--ns", "acme"}, &out)
	want := "/v1/namespaces/acme/console-links"
	if err == nil || !strings.Contains(err.Error(), "http://"+p.Addr+want) || !strings.Contains(err.Error(), `{"access": "read"}`) {
		t.Fatalf("relay token --console on the embedded default: %v, want it to say where to ask for a link", err)
	}
	p.Must(t, http.StatusCreated, http.MethodPut, "/v1/namespaces/acme/endpoints/billing", admin, map[string]any{"url": "https://billing.example.com/hooks"})
	link := p.Must(t, http.StatusCreated, http.MethodPost, want, admin, map[string]any{"access": "read"})
	u, _ := link["url"].(string)
	prefix := "http://" + p.Addr + "/console/#token="
	if !strings.HasPrefix(u, prefix) {
		t.Fatalf("link %q, want it at %s", u, prefix)
	}
	tok, err := url.QueryUnescape(strings.TrimPrefix(u, prefix))
	if err != nil {
		t.Fatal(err)
	}
	p.Must(t, http.StatusOK, http.MethodGet, "/v1/namespaces/acme/endpoints/billing", tok, nil)
	p.Must(t, http.StatusForbidden, http.MethodGet, "/v1/namespaces/other/endpoints", tok, nil)
	p.Must(t, http.StatusForbidden, http.MethodPut, "/v1/namespaces/acme/endpoints/billing", tok, map[string]any{"url": "https://evil.example.com/hooks"})
}
