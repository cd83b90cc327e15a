package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/hookrelay/relay/internal/httpapi"
)

const audience = "https://relay.example.com"

var (
	secret = []byte("test-secret-of-exactly-32-bytes!")
	t0     = time.Unix(1_700_000_000, 0)
)

// authFor builds an Auth with the HS256 secret, a 5 s leeway and the clock
// stopped at t0, then applies mod.
func authFor(t testing.TB, mod func(*httpapi.AuthConfig)) *httpapi.Auth {
	t.Helper()
	cfg := httpapi.AuthConfig{
		Audience:    audience,
		HS256Secret: secret,
		Leeway:      5 * time.Second,
		Now:         func() time.Time { return t0 },
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := httpapi.NewAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// claims is a valid claim set; mod changes it (a nil value deletes).
func claims(mod map[string]any) jwt.MapClaims {
	c := jwt.MapClaims{
		"sub":   "ci-bot",
		"aud":   audience,
		"iat":   t0.Add(-time.Minute).Unix(),
		"exp":   t0.Add(time.Hour).Unix(),
		"scope": "outcomes:write",
	}
	for k, v := range mod {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

// sign signs c with method and key; header entries are set (nil deletes).
func sign(t *testing.T, method jwt.SigningMethod, key any, header map[string]any, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	for k, v := range header {
		if v == nil {
			delete(tok.Header, k)
		} else {
			tok.Header[k] = v
		}
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hs(t *testing.T, mod map[string]any) string {
	t.Helper()
	return sign(t, jwt.SigningMethodHS256, secret, nil, claims(mod))
}

// unsigned builds a token from raw header and claims JSON with the given
// signature bytes, for shapes the library refuses to produce.
func unsigned(header, payload string, sig []byte) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(sig)
}

func mustRefuse(t *testing.T, a *httpapi.Auth, raw string) error {
	t.Helper()
	p, err := a.Verify(raw)
	if err == nil {
		t.Fatalf("Verify accepted the token: %+v", p)
	}
	if !errors.Is(err, httpapi.ErrInvalidToken) {
		t.Fatalf("Verify error %v does not wrap ErrInvalidToken", err)
	}
	return err
}

func mustAccept(t *testing.T, a *httpapi.Auth, raw string) httpapi.Principal {
	t.Helper()
	p, err := a.Verify(raw)
	if err != nil {
		t.Fatalf("Verify refused a valid token: %v", err)
	}
	return p
}

func TestAValidTokenYieldsItsPrincipal(t *testing.T) {
	a := authFor(t, nil)
	p := mustAccept(t, a, hs(t, map[string]any{"scope": "outbox:read  outcomes:write outbox:read", "ns": "acme"}))
	if p.Subject != "ci-bot" || p.Namespace != "acme" {
		t.Fatalf("principal %+v", p)
	}
	if !slices.Equal(p.Scopes, []httpapi.Scope{httpapi.ScopeOutboxRead, httpapi.ScopeOutcomesWrite}) {
		t.Fatalf("scopes %v, want outbox:read and outcomes:write once each", p.Scopes)
	}
}

func TestUnknownScopesAreIgnored(t *testing.T) {
	p := mustAccept(t, authFor(t, nil), hs(t, map[string]any{"scope": "outcomes:write root superuser admin:all"}))
	if !slices.Equal(p.Scopes, []httpapi.Scope{httpapi.ScopeOutcomesWrite}) {
		t.Fatalf("scopes %v, want only outcomes:write", p.Scopes)
	}
}

func TestExpiredTokenIsRefused(t *testing.T) {
	a := authFor(t, nil)
	err := mustRefuse(t, a, hs(t, map[string]any{"exp": t0.Add(-time.Minute).Unix()}))
	if !errors.Is(err, jwt.ErrTokenExpired) {
		t.Fatalf("error %v, want expired", err)
	}
}

func TestTokenWithoutExpIsRefused(t *testing.T) {
	mustRefuse(t, authFor(t, nil), hs(t, map[string]any{"exp": nil}))
}

// exp 0 is refused by rule, not because 1970 is past: at a clock of 1 s
// with 5 s of leeway the library alone would accept it.
func TestExpZeroIsRefusedWhateverTheClock(t *testing.T) {
	a := authFor(t, func(c *httpapi.AuthConfig) { c.Now = func() time.Time { return time.Unix(1, 0) } })
	mustAccept(t, a, hs(t, map[string]any{"iat": nil, "exp": 3}))
	mustRefuse(t, a, hs(t, map[string]any{"iat": nil, "exp": 0}))
}

func TestAudience(t *testing.T) {
	a := authFor(t, nil)
	err := mustRefuse(t, a, hs(t, map[string]any{"aud": "https://other.example.com"}))
	if !errors.Is(err, jwt.ErrTokenInvalidAudience) {
		t.Fatalf("error %v, want invalid audience", err)
	}
	mustRefuse(t, a, hs(t, map[string]any{"aud": nil}))
	mustRefuse(t, a, hs(t, map[string]any{"aud": []string{"https://a.example.com", "https://b.example.com"}}))
	mustAccept(t, a, hs(t, map[string]any{"aud": []string{"https://other.example.com", audience}}))
}

func TestAlgNoneIsRefused(t *testing.T) {
	a := authFor(t, nil)
	mustRefuse(t, a, sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, nil, claims(nil)))
	payload, _ := json.Marshal(claims(nil))
	mustRefuse(t, a, unsigned(`{"alg":"none","typ":"JWT"}`, string(payload), nil))
	mustRefuse(t, a, unsigned(`{"alg":"NONE","typ":"JWT"}`, string(payload), nil))
}

// The classic confusion: an attacker who knows an Ed25519 public key signs
// HS256 with its bytes as the HMAC secret. Keys are pinned to their
// algorithm, so it fails whether or not HS256 is configured.
func TestHS256SignedWithThePublicKeyIsRefused(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	forged := sign(t, jwt.SigningMethodHS256, []byte(pub), nil, claims(nil))
	genuine := sign(t, jwt.SigningMethodEdDSA, priv, nil, claims(nil))

	edOnly := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{Key: pub}}
	})
	mustAccept(t, edOnly, genuine)
	mustRefuse(t, edOnly, forged)

	both := authFor(t, func(c *httpapi.AuthConfig) { c.EdDSAKeys = []httpapi.EdDSAKey{{Key: pub}} })
	mustAccept(t, both, genuine)
	mustAccept(t, both, hs(t, nil))
	mustRefuse(t, both, forged)
}

func TestRS256IsRefused(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	a := authFor(t, nil)
	mustRefuse(t, a, sign(t, jwt.SigningMethodRS256, key, nil, claims(nil)))
	// Nor another HMAC: only what is configured.
	mustRefuse(t, a, sign(t, jwt.SigningMethodHS512, secret, nil, claims(nil)))
}

func TestEdDSAOnlyConfigRefusesHS256(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	a := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{Key: pub}}
	})
	mustRefuse(t, a, hs(t, nil))
}

func TestIssuerIsCheckedWhenConfigured(t *testing.T) {
	a := authFor(t, func(c *httpapi.AuthConfig) { c.Issuer = "https://idp.example.com" })
	mustAccept(t, a, hs(t, map[string]any{"iss": "https://idp.example.com"}))
	err := mustRefuse(t, a, hs(t, map[string]any{"iss": "https://evil.example.com"}))
	if !errors.Is(err, jwt.ErrTokenInvalidIssuer) {
		t.Fatalf("error %v, want invalid issuer", err)
	}
	mustRefuse(t, a, hs(t, nil))

	// Without an issuer configured, any issuer passes.
	mustAccept(t, authFor(t, nil), hs(t, map[string]any{"iss": "https://whoever.example.com"}))
}

func TestTokenWithoutSubjectIsRefused(t *testing.T) {
	a := authFor(t, nil)
	mustRefuse(t, a, hs(t, map[string]any{"sub": nil}))
	mustRefuse(t, a, hs(t, map[string]any{"sub": ""}))
}

func TestTypHeader(t *testing.T) {
	a := authFor(t, nil)
	for _, typ := range []string{"JWT", "jwt", "at+jwt", "AT+JWT", "application/at+jwt"} {
		mustAccept(t, a, sign(t, jwt.SigningMethodHS256, secret, map[string]any{"typ": typ}, claims(nil)))
	}
	for _, typ := range []any{nil, "", "JOSE", "dpop+jwt", "application/json", 1} {
		t.Run(fmt.Sprintf("typ %v", typ), func(t *testing.T) {
			mustRefuse(t, a, sign(t, jwt.SigningMethodHS256, secret, map[string]any{"typ": typ}, claims(nil)))
		})
	}
}

// Header parameters relay does not read may be named as registered, or as
// their issuer likes: x5t#S256 (RFC 7515 §4.1.8) is not lower-case ASCII.
func TestHeaderParametersRelayDoesNotReadAreAccepted(t *testing.T) {
	a := authFor(t, nil)
	mustAccept(t, a, sign(t, jwt.SigningMethodHS256, secret, map[string]any{"x5t#S256": "thumbprint", "Note": "ünïcode"}, claims(nil)))
}

func TestCritHeaderIsRefused(t *testing.T) {
	mustRefuse(t, authFor(t, nil), sign(t, jwt.SigningMethodHS256, secret, map[string]any{"crit": []string{"b64"}, "b64": false}, claims(nil)))
}

func TestLeewayIsHonoured(t *testing.T) {
	a := authFor(t, nil) // 5 s
	mustAccept(t, a, hs(t, map[string]any{"exp": t0.Add(-4 * time.Second).Unix()}))
	mustRefuse(t, a, hs(t, map[string]any{"exp": t0.Add(-6 * time.Second).Unix()}))
	mustAccept(t, a, hs(t, map[string]any{"nbf": t0.Add(4 * time.Second).Unix()}))
	err := mustRefuse(t, a, hs(t, map[string]any{"nbf": t0.Add(6 * time.Second).Unix()}))
	if !errors.Is(err, jwt.ErrTokenNotValidYet) {
		t.Fatalf("error %v, want not valid yet", err)
	}
	mustAccept(t, a, hs(t, map[string]any{"iat": t0.Add(4 * time.Second).Unix()}))
	mustRefuse(t, a, hs(t, map[string]any{"iat": t0.Add(6 * time.Second).Unix()}))

	strict := authFor(t, func(c *httpapi.AuthConfig) { c.Leeway = 0 })
	mustRefuse(t, strict, hs(t, map[string]any{"exp": t0.Add(-time.Second).Unix()}))
}

func TestNamespaceClaimMustBeAValidNamespace(t *testing.T) {
	a := authFor(t, nil)
	for _, ns := range []any{"", "Acme", "-acme", "a/b", strings.Repeat("a", 64), 7} {
		mustRefuse(t, a, hs(t, map[string]any{"ns": ns}))
	}
	mustAccept(t, a, hs(t, map[string]any{"ns": "acme_1-x"}))
}

func TestEdDSAKidSelectsTheKey(t *testing.T) {
	pubA, privA, _ := ed25519.GenerateKey(rand.Reader)
	pubB, privB, _ := ed25519.GenerateKey(rand.Reader)
	a := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{ID: "a", Key: pubA}, {ID: "b", Key: pubB}}
	})
	mustAccept(t, a, sign(t, jwt.SigningMethodEdDSA, privA, map[string]any{"kid": "a"}, claims(nil)))
	mustAccept(t, a, sign(t, jwt.SigningMethodEdDSA, privB, map[string]any{"kid": "b"}, claims(nil)))
	// The kid picks the key: B's signature under A's kid does not verify.
	mustRefuse(t, a, sign(t, jwt.SigningMethodEdDSA, privB, map[string]any{"kid": "a"}, claims(nil)))
	// Without a kid every configured key is tried.
	mustAccept(t, a, sign(t, jwt.SigningMethodEdDSA, privB, nil, claims(nil)))
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	mustRefuse(t, a, sign(t, jwt.SigningMethodEdDSA, stranger, nil, claims(nil)))
}

func TestUnknownKidIsRefused(t *testing.T) {
	pubA, privA, _ := ed25519.GenerateKey(rand.Reader)
	a := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{ID: "a", Key: pubA}}
	})
	mustAccept(t, a, sign(t, jwt.SigningMethodEdDSA, privA, map[string]any{"kid": "a"}, claims(nil)))
	mustRefuse(t, a, sign(t, jwt.SigningMethodEdDSA, privA, map[string]any{"kid": "c"}, claims(nil)))
	mustRefuse(t, a, sign(t, jwt.SigningMethodEdDSA, privA, map[string]any{"kid": 1}, claims(nil)))
}

func TestNewAuthRefusesUnsafeConfigurations(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	for name, cfg := range map[string]httpapi.AuthConfig{
		"no key":          {Audience: audience},
		"short secret":    {Audience: audience, HS256Secret: secret[:31]},
		"no audience":     {HS256Secret: secret},
		"leeway over 30s": {Audience: audience, HS256Secret: secret, Leeway: 31 * time.Second},
		"negative leeway": {Audience: audience, HS256Secret: secret, Leeway: -time.Second},
		"short key":       {Audience: audience, EdDSAKeys: []httpapi.EdDSAKey{{Key: pub[:31]}}},
		"duplicate kid":   {Audience: audience, EdDSAKeys: []httpapi.EdDSAKey{{ID: "k", Key: pub}, {ID: "k", Key: pub}}},
	} {
		if _, err := httpapi.NewAuth(cfg); err == nil {
			t.Errorf("%s: NewAuth accepted it", name)
		} else if strings.Contains(err.Error(), string(secret[:8])) {
			t.Errorf("%s: error %q shows the secret", name, err)
		}
	}
	if _, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: audience, HS256Secret: secret, Leeway: 30 * time.Second}); err != nil {
		t.Fatalf("30 s leeway refused: %v", err)
	}
}

func TestPrincipalAllows(t *testing.T) {
	writer := httpapi.Principal{Subject: "w", Scopes: []httpapi.Scope{httpapi.ScopeOutcomesWrite}}
	admin := httpapi.Principal{Subject: "a", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}
	bound := httpapi.Principal{Subject: "b", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}, Namespace: "acme"}
	for _, c := range []struct {
		p    httpapi.Principal
		s    httpapi.Scope
		ns   string
		want bool
	}{
		{writer, httpapi.ScopeOutcomesWrite, "acme", true},
		{writer, httpapi.ScopeOutboxRead, "acme", false},
		{writer, httpapi.ScopeAdmin, "acme", false},
		{admin, httpapi.ScopeOutboxRead, "acme", true},
		{admin, httpapi.ScopeEndpointsWrite, "other", true},
		{bound, httpapi.ScopeOutcomesWrite, "acme", true},
		{bound, httpapi.ScopeOutcomesWrite, "other", false},
		{bound, httpapi.ScopeAdmin, "", false},
	} {
		if got := c.p.Allows(c.s, c.ns); got != c.want {
			t.Errorf("%s Allows(%s, %q) = %v, want %v", c.p.Subject, c.s, c.ns, got, c.want)
		}
	}
}

// router serves a few routes behind Require, each answering with the
// subject of the principal Require stored.
func router(a *httpapi.Auth, log *slog.Logger) http.Handler {
	r := chi.NewRouter()
	r.Use(httpapi.AssignRequestID, httpapi.AccessLog(log), httpapi.Recover(log))
	whoami := func(w http.ResponseWriter, r *http.Request) {
		p, ok := httpapi.PrincipalFrom(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, p.Subject)
	}
	r.Route("/v1/namespaces/{ns}", func(r chi.Router) {
		r.With(a.Require(httpapi.ScopeOutcomesWrite)).Post("/outcomes", whoami)
		r.With(a.RequireAny(httpapi.ScopeEndpointsWrite, httpapi.ScopeOutboxRead)).Get("/endpoints", whoami)
	})
	r.With(a.Require(httpapi.ScopeAdmin)).Post("/v1/admin/namespaces/{ns}/replay", whoami)
	r.With(a.Require(httpapi.ScopeOutboxRead)).Get("/v1/whoami", whoami)
	return r
}

func call(h http.Handler, method, path string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	RequestID string `json:"request_id"`
}

func problemOf(t *testing.T, rec *httptest.ResponseRecorder, status int, slug httpapi.Slug) problemBody {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p problemBody
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", rec.Body, err)
	}
	if p.Type != "urn:hookrelay:problem:"+string(slug) || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want %s", p, slug)
	}
	if p.RequestID == "" || p.RequestID != rec.Header().Get("X-Request-Id") {
		t.Fatalf("problem request_id %q, header %q", p.RequestID, rec.Header().Get("X-Request-Id"))
	}
	return p
}

func TestRequireAnswers401WithTheRightChallenge(t *testing.T) {
	h := router(authFor(t, nil), slog.New(slog.DiscardHandler))
	const path = "/v1/namespaces/acme/outcomes"
	for _, c := range []struct {
		name      string
		header    []string
		challenge string
	}{
		{"no token", nil, "Bearer"},
		{"another scheme", []string{"Authorization", "Basic dXNlcjpwYXNz"}, "Bearer"},
		{"bearer without a token", []string{"Authorization", "Bearer"}, `Bearer error="invalid_token"`},
		{"bearer with blanks", []string{"Authorization", "Bearer   "}, `Bearer error="invalid_token"`},
		{"two tokens", []string{"Authorization", "Bearer a b"}, `Bearer error="invalid_token"`},
		{"two headers", append(bearer(hs(t, nil)), bearer(hs(t, nil))...), `Bearer error="invalid_token"`},
		{"garbage", bearer("not.a.jwt"), `Bearer error="invalid_token"`},
		{"expired", bearer(hs(t, map[string]any{"exp": t0.Add(-time.Hour).Unix()})), `Bearer error="invalid_token"`},
		{"wrong audience", bearer(hs(t, map[string]any{"aud": "https://other.example.com"})), `Bearer error="invalid_token"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := call(h, http.MethodPost, path, c.header...)
			problemOf(t, rec, http.StatusUnauthorized, httpapi.SlugUnauthorized)
			if got := rec.Header().Get("WWW-Authenticate"); got != c.challenge {
				t.Fatalf("WWW-Authenticate %q, want %q", got, c.challenge)
			}
		})
	}
	// The same route opens with a good token: the refusals above were the
	// tokens' doing.
	if rec := call(h, http.MethodPost, path, bearer(hs(t, nil))...); rec.Code != http.StatusOK || rec.Body.String() != "ci-bot" {
		t.Fatalf("valid token: %d %s", rec.Code, rec.Body)
	}
}

func TestExpiredTokenDetailSaysSo(t *testing.T) {
	h := router(authFor(t, nil), slog.New(slog.DiscardHandler))
	tok := hs(t, map[string]any{"exp": t0.Add(-time.Hour).Unix()})
	p := problemOf(t, call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(tok)...), http.StatusUnauthorized, httpapi.SlugUnauthorized)
	if !strings.Contains(p.Detail, "expired") {
		t.Fatalf("detail %q", p.Detail)
	}
}

func TestWrongScopeIsForbidden(t *testing.T) {
	h := router(authFor(t, nil), slog.New(slog.DiscardHandler))
	tok := hs(t, map[string]any{"scope": "outbox:read endpoints:write"})
	rec := call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(tok)...)
	p := problemOf(t, rec, http.StatusForbidden, httpapi.SlugForbidden)
	if !strings.Contains(p.Detail, "outcomes:write") {
		t.Fatalf("detail %q does not name the scope", p.Detail)
	}
	if got := rec.Header().Get("WWW-Authenticate"); !strings.Contains(got, "insufficient_scope") {
		t.Fatalf("WWW-Authenticate %q", got)
	}
	problemOf(t, call(h, http.MethodPost, "/v1/admin/namespaces/acme/replay", bearer(tok)...), http.StatusForbidden, httpapi.SlugForbidden)
	// Either scope of RequireAny opens the route.
	for _, scope := range []string{"outbox:read", "endpoints:write"} {
		if rec := call(h, http.MethodGet, "/v1/namespaces/acme/endpoints", bearer(hs(t, map[string]any{"scope": scope}))...); rec.Code != http.StatusOK {
			t.Fatalf("GET endpoints with %s: %d", scope, rec.Code)
		}
	}
	problemOf(t, call(h, http.MethodGet, "/v1/namespaces/acme/endpoints", bearer(hs(t, nil))...), http.StatusForbidden, httpapi.SlugForbidden)
}

// Require keeps the principal in the request's exchange when
// AssignRequestID made one, and in a context of its own when not: alone,
// it still hands the handler who called.
func TestRequireAloneStillGivesThePrincipal(t *testing.T) {
	a := authFor(t, nil)
	r := chi.NewRouter()
	r.With(a.Require(httpapi.ScopeOutboxRead)).Get("/v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		p, ok := httpapi.PrincipalFrom(r.Context())
		if !ok {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, p.Subject)
	})
	rec := call(r, http.MethodGet, "/v1/whoami", bearer(hs(t, map[string]any{"sub": "alone", "scope": "outbox:read"}))...)
	if rec.Code != http.StatusOK || rec.Body.String() != "alone" {
		t.Fatalf("alone: %d %q", rec.Code, rec.Body)
	}
	rec = call(router(a, slog.New(slog.DiscardHandler)), http.MethodGet, "/v1/whoami", bearer(hs(t, map[string]any{"sub": "chained", "scope": "outbox:read"}))...)
	if rec.Code != http.StatusOK || rec.Body.String() != "chained" {
		t.Fatalf("behind AssignRequestID: %d %q", rec.Code, rec.Body)
	}
}

func TestAdminImpliesEveryScope(t *testing.T) {
	h := router(authFor(t, nil), slog.New(slog.DiscardHandler))
	tok := hs(t, map[string]any{"scope": "admin"})
	for _, r := range [][2]string{
		{http.MethodPost, "/v1/namespaces/acme/outcomes"},
		{http.MethodGet, "/v1/namespaces/acme/endpoints"},
		{http.MethodPost, "/v1/admin/namespaces/acme/replay"},
		{http.MethodGet, "/v1/whoami"},
	} {
		if rec := call(h, r[0], r[1], bearer(tok)...); rec.Code != http.StatusOK {
			t.Errorf("%s %s with admin: %d %s", r[0], r[1], rec.Code, rec.Body)
		}
	}
}

func TestNamespaceBoundTokenActsOnlyOnItsNamespace(t *testing.T) {
	h := router(authFor(t, nil), slog.New(slog.DiscardHandler))
	for _, scope := range []string{"outcomes:write", "admin"} {
		tok := hs(t, map[string]any{"scope": scope, "ns": "acme"})
		if rec := call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(tok)...); rec.Code != http.StatusOK {
			t.Fatalf("%s token on its own namespace: %d %s", scope, rec.Code, rec.Body)
		}
		p := problemOf(t, call(h, http.MethodPost, "/v1/namespaces/globex/outcomes", bearer(tok)...), http.StatusForbidden, httpapi.SlugForbidden)
		if !strings.Contains(p.Detail, "namespace") {
			t.Fatalf("detail %q", p.Detail)
		}
	}
	admin := hs(t, map[string]any{"scope": "admin", "ns": "acme"})
	problemOf(t, call(h, http.MethodPost, "/v1/admin/namespaces/globex/replay", bearer(admin)...), http.StatusForbidden, httpapi.SlugForbidden)
	if rec := call(h, http.MethodPost, "/v1/admin/namespaces/acme/replay", bearer(admin)...); rec.Code != http.StatusOK {
		t.Fatalf("bound admin on its namespace: %d", rec.Code)
	}
}

// padded returns a validly signed token of about n bytes.
func padded(t *testing.T, n int) string {
	t.Helper()
	tok := hs(t, map[string]any{"pad": ""})
	// base64 grows 4/3; the rest of the token is small.
	return hs(t, map[string]any{"pad": strings.Repeat("x", max(0, (n-len(tok))*3/4))})
}

// A huge token is refused before it is decoded. It is validly signed, so
// only the size check can refuse it.
func TestOversizedTokenIsRefusedUnread(t *testing.T) {
	a := authFor(t, nil)
	h := router(a, slog.New(slog.DiscardHandler))
	small := padded(t, httpapi.MaxTokenBytes-100)
	if len(small) > httpapi.MaxTokenBytes {
		t.Fatalf("test token of %d bytes is over the limit", len(small))
	}
	if rec := call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(small)...); rec.Code != http.StatusOK {
		t.Fatalf("token of %d bytes: %d %s", len(small), rec.Code, rec.Body)
	}
	huge := padded(t, 1<<20+1024)
	if len(huge) < 1<<20 {
		t.Fatalf("test token is only %d bytes", len(huge))
	}
	p := problemOf(t, call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(huge)...), http.StatusUnauthorized, httpapi.SlugUnauthorized)
	if !strings.Contains(p.Detail, "larger than") {
		t.Fatalf("detail %q", p.Detail)
	}
	mustRefuse(t, a, huge)
	mustRefuse(t, a, padded(t, httpapi.MaxTokenBytes+100))
}

// Require placed before routing cannot see {ns}; it fails closed rather
// than let a namespace-bound token through.
func TestRequireBeforeRoutingFailsClosed(t *testing.T) {
	a := authFor(t, nil)
	r := chi.NewRouter()
	r.Use(httpapi.AssignRequestID, a.Require(httpapi.ScopeOutcomesWrite))
	r.Post("/v1/namespaces/{ns}/outcomes", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "reached") })
	tok := hs(t, map[string]any{"ns": "acme"})
	rec := call(r, http.MethodPost, "/v1/namespaces/globex/outcomes", bearer(tok)...)
	problemOf(t, rec, http.StatusInternalServerError, httpapi.SlugInternal)
}

func TestMintedTokensVerify(t *testing.T) {
	a := authFor(t, func(c *httpapi.AuthConfig) { c.Issuer = "relay" })
	want := httpapi.Principal{Subject: "ops", Scopes: []httpapi.Scope{httpapi.ScopeAdmin, httpapi.ScopeOutboxRead}, Namespace: "acme"}
	tok, err := a.Mint(want, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := mustAccept(t, a, tok)
	if got.Subject != want.Subject || got.Namespace != want.Namespace || !slices.Equal(got.Scopes, want.Scopes) {
		t.Fatalf("principal %+v, want %+v", got, want)
	}
	c := jwt.MapClaims{}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, c)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Header["typ"] != "JWT" || parsed.Header["alg"] != "HS256" {
		t.Fatalf("header %v", parsed.Header)
	}
	if c["aud"] != audience || c["iss"] != "relay" || c["scope"] != "admin outbox:read" || c["ns"] != "acme" {
		t.Fatalf("claims %v", c)
	}
	if c["iat"] != float64(t0.Unix()) || c["exp"] != float64(t0.Add(time.Hour).Unix()) {
		t.Fatalf("iat %v exp %v", c["iat"], c["exp"])
	}
	jti, _ := c["jti"].(string)
	again, _ := a.Mint(want, time.Hour)
	c2 := jwt.MapClaims{}
	jwt.NewParser().ParseUnverified(again, c2)
	if len(jti) < 16 || c2["jti"] == jti {
		t.Fatalf("jti %q then %q: want random ids", jti, c2["jti"])
	}
	// The token ends when its ttl does (plus leeway).
	later := authFor(t, func(c *httpapi.AuthConfig) {
		c.Issuer = "relay"
		c.Now = func() time.Time { return t0.Add(time.Hour + 6*time.Second) }
	})
	mustRefuse(t, later, tok)
}

func TestMintEdDSACarriesTheKid(t *testing.T) {
	pubA, _, _ := ed25519.GenerateKey(rand.Reader)
	pubB, privB, _ := ed25519.GenerateKey(rand.Reader)
	a := authFor(t, func(c *httpapi.AuthConfig) {
		c.HS256Secret = nil
		c.EdDSAKeys = []httpapi.EdDSAKey{{ID: "a", Key: pubA}, {ID: "b", Key: pubB}}
	})
	p := httpapi.Principal{Subject: "ops", Scopes: []httpapi.Scope{httpapi.ScopeOutboxRead}}
	tok, err := httpapi.MintEdDSA(privB, "b", audience, "", p, time.Minute, t0)
	if err != nil {
		t.Fatal(err)
	}
	mustAccept(t, a, tok)
	wrongKid, _ := httpapi.MintEdDSA(privB, "a", audience, "", p, time.Minute, t0)
	mustRefuse(t, a, wrongKid)
	if _, err := a.Mint(p, time.Minute); err == nil {
		t.Fatal("Mint without an HS256 secret succeeded")
	}
}

func TestMintRefusesWhatCouldNotVerify(t *testing.T) {
	ok := httpapi.Principal{Subject: "ops", Scopes: []httpapi.Scope{httpapi.ScopeOutboxRead}}
	for name, c := range map[string]struct {
		secret []byte
		aud    string
		p      httpapi.Principal
		ttl    time.Duration
	}{
		"short secret":  {secret[:16], audience, ok, time.Hour},
		"no audience":   {secret, "", ok, time.Hour},
		"no subject":    {secret, audience, httpapi.Principal{Scopes: ok.Scopes}, time.Hour},
		"no scope":      {secret, audience, httpapi.Principal{Subject: "ops"}, time.Hour},
		"unknown scope": {secret, audience, httpapi.Principal{Subject: "ops", Scopes: []httpapi.Scope{"root"}}, time.Hour},
		"bad namespace": {secret, audience, httpapi.Principal{Subject: "ops", Scopes: ok.Scopes, Namespace: "Acme"}, time.Hour},
		"zero ttl":      {secret, audience, ok, 0},
	} {
		if _, err := httpapi.MintHS256(c.secret, c.aud, "", c.p, c.ttl, t0); err == nil {
			t.Errorf("%s: minted", name)
		}
	}
}

// The access log names the subject of an authenticated request and why a
// refused one failed, never the token.
func TestAccessLogNamesTheSubjectNotTheToken(t *testing.T) {
	var buf bytes.Buffer
	h := router(authFor(t, nil), slog.New(slog.NewJSONHandler(&buf, nil)))
	good := hs(t, nil)
	call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(good)...)
	bad := hs(t, map[string]any{"aud": "https://other.example.com"})
	call(h, http.MethodPost, "/v1/namespaces/acme/outcomes", bearer(bad)...)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log lines: %q", buf.String())
	}
	var first, second map[string]any
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first["subject"] != "ci-bot" || first["status"] != float64(200) {
		t.Fatalf("first line %v", first)
	}
	if _, ok := second["subject"]; ok || second["status"] != float64(401) || !strings.Contains(second["auth_error"].(string), "audience") {
		t.Fatalf("second line %v", second)
	}
	for _, tok := range []string{good, bad} {
		for _, part := range strings.Split(tok, ".") {
			if strings.Contains(buf.String(), part) {
				t.Fatalf("log holds part of a token: %s", buf.String())
			}
		}
	}
}

func TestVerifyIsSafeForConcurrentUse(t *testing.T) {
	a := authFor(t, nil)
	good, bad := hs(t, nil), hs(t, map[string]any{"aud": "https://other.example.com"})
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 32 {
		wg.Go(func() {
			if _, err := a.Verify(good); err != nil {
				errs <- fmt.Sprintf("%d: good token refused: %v", i, err)
			}
			if _, err := a.Verify(bad); err == nil {
				errs <- fmt.Sprintf("%d: bad token accepted", i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestAVerifiedTokenIsNotBelievedPastItsExpiry(t *testing.T) {
	now := t0
	a := authFor(t, func(c *httpapi.AuthConfig) { c.Now = func() time.Time { return now } })
	raw := hs(t, map[string]any{"exp": t0.Add(time.Minute).Unix()})
	mustAccept(t, a, raw)
	now = t0.Add(time.Minute + 4*time.Second) // within the 5 s leeway
	mustAccept(t, a, raw)
	now = t0.Add(time.Minute + 5*time.Second)
	mustRefuse(t, a, raw)
	// A token differing in one byte of its signature is verified afresh.
	now = t0
	mustAccept(t, a, raw)
	flip := byte('A')
	if raw[len(raw)-2] == 'A' {
		flip = 'B'
	}
	tampered := raw[:len(raw)-2] + string(flip) + raw[len(raw)-1:]
	mustRefuse(t, a, tampered)
}
