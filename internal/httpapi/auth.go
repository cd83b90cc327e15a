package httpapi

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"

	"github.com/hookrelay/relay/internal/store"
)

// Scope is a permission a token grants.
type Scope string

// The scopes relay knows. Admin implies every other scope.
const (
	ScopeOutcomesWrite  Scope = "outcomes:write"
	ScopeEndpointsWrite Scope = "endpoints:write"
	ScopeOutboxRead     Scope = "outbox:read"
	ScopeAdmin          Scope = "admin"
)

// Scopes returns every scope relay knows.
func Scopes() []Scope {
	return []Scope{ScopeOutcomesWrite, ScopeEndpointsWrite, ScopeOutboxRead, ScopeAdmin}
}

// Valid reports whether s is a scope relay knows.
func (s Scope) Valid() bool { return slices.Contains(Scopes(), s) }

// ValidNamespace reports whether ns is a well-formed namespace name, the
// only kind an ns claim may carry.
func ValidNamespace(ns string) bool {
	return store.Partition{Namespace: ns}.Validate() == nil
}

// Principal is who a verified token speaks for.
type Principal struct {
	Subject string
	Scopes  []Scope
	// Namespace, when set, is the only namespace the token may act on.
	Namespace string
}

// Allows reports whether p may act with scope s on namespace ns. A token
// bound to a namespace allows nothing on any other, admin included.
func (p Principal) Allows(s Scope, ns string) bool {
	if p.Namespace != "" && p.Namespace != ns {
		return false
	}
	return p.has(s)
}

func (p Principal) has(s Scope) bool {
	return slices.Contains(p.Scopes, ScopeAdmin) || slices.Contains(p.Scopes, s)
}

// PrincipalFrom is the principal Require stored in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	if x := exchangeFrom(ctx); x != nil && x.principal != nil {
		return *x.principal, true
	}
	p, ok := ctx.Value(principalKey).(Principal)
	return p, ok
}

// MaxTokenBytes is the longest token relay parses; longer ones are refused
// unread, so a huge header costs no decoding.
const MaxTokenBytes = 8 << 10

// MaxLeeway bounds the clock skew tolerated on exp, nbf and iat.
const MaxLeeway = 30 * time.Second

// MinHS256Secret is the shortest HS256 secret: HMAC-SHA256 is no stronger
// than its key, and RFC 7518 asks for at least the hash size.
const MinHS256Secret = 32

// ErrInvalidToken marks every reason Verify refuses a token. The wrapped
// text names the reason (expired, wrong audience...) and is safe to log; it
// never holds the token or a key.
var ErrInvalidToken = errors.New("invalid token")

var errTokenTooLarge = fmt.Errorf("%w: larger than %d bytes", ErrInvalidToken, MaxTokenBytes)

// EdDSAKey is an Ed25519 public key that verifies tokens. With an ID, only
// tokens whose kid header names it are checked against it.
type EdDSAKey struct {
	ID  string
	Key ed25519.PublicKey
}

// AuthConfig configures token verification. At least one of HS256Secret and
// EdDSAKeys is needed; only the algorithms configured are accepted.
type AuthConfig struct {
	Audience    string
	Issuer      string // checked when set
	HS256Secret []byte
	EdDSAKeys   []EdDSAKey
	Leeway      time.Duration
	Now         func() time.Time // time.Now when nil
}

// Auth verifies bearer tokens and mints HS256 ones.
type Auth struct {
	audience string
	issuer   string
	secret   []byte
	keys     []EdDSAKey
	// keyed: some key has an ID, so a kid header must name one.
	keyed  bool
	leeway time.Duration
	now    func() time.Time
	parser *jwt.Parser
	cache  verified
}

// verified remembers tokens that verified, until they expire: a producer
// sends one token with thousands of requests, and verifying it again each
// time (HMAC or Ed25519 and a JSON parse) was a tenth of the API's CPU. The
// key is the whole token, so only the very bytes that verified are
// believed; an entry lasts no longer than the token would pass Verify.
type verified struct {
	mu      sync.Mutex
	entries map[string]verifiedEntry
}

type verifiedEntry struct {
	p     Principal
	until time.Time
}

// maxVerified bounds the cache; when full it starts afresh, which costs a
// verification per token and nothing else.
const maxVerified = 1024

// get and put copy the scopes: a caller changing the principal it was
// given must not change what the next request with the token is granted.
func (v *verified) get(raw string, now time.Time) (Principal, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.entries[raw]
	if !ok || !now.Before(e.until) {
		return Principal{}, false
	}
	p := e.p
	p.Scopes = slices.Clone(p.Scopes)
	return p, true
}

func (v *verified) put(raw string, p Principal, until time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.entries == nil || len(v.entries) >= maxVerified {
		v.entries = make(map[string]verifiedEntry)
	}
	p.Scopes = slices.Clone(p.Scopes)
	v.entries[raw] = verifiedEntry{p: p, until: until}
}

// NewAuth checks cfg and returns an Auth for it.
func NewAuth(cfg AuthConfig) (*Auth, error) {
	if cfg.Audience == "" {
		return nil, errors.New("auth: an audience is required")
	}
	if len(cfg.HS256Secret) == 0 && len(cfg.EdDSAKeys) == 0 {
		return nil, errors.New("auth: no HS256 secret and no EdDSA public key")
	}
	if n := len(cfg.HS256Secret); n > 0 && n < MinHS256Secret {
		return nil, fmt.Errorf("auth: the HS256 secret is %d bytes, want at least %d", n, MinHS256Secret)
	}
	if cfg.Leeway < 0 || cfg.Leeway > MaxLeeway {
		return nil, fmt.Errorf("auth: leeway %v must be between 0 and %v", cfg.Leeway, MaxLeeway)
	}
	a := &Auth{audience: cfg.Audience, issuer: cfg.Issuer, leeway: cfg.Leeway, now: cfg.Now}
	if a.now == nil {
		a.now = time.Now
	}
	var methods []string
	if len(cfg.HS256Secret) > 0 {
		a.secret = slices.Clone(cfg.HS256Secret)
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	ids := map[string]bool{}
	for i, k := range cfg.EdDSAKeys {
		if len(k.Key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("auth: EdDSA key %d is %d bytes, want an Ed25519 public key of %d", i, len(k.Key), ed25519.PublicKeySize)
		}
		if k.ID != "" {
			if ids[k.ID] {
				return nil, fmt.Errorf("auth: two EdDSA keys have the id %q", k.ID)
			}
			ids[k.ID] = true
			a.keyed = true
		}
		a.keys = append(a.keys, EdDSAKey{ID: k.ID, Key: slices.Clone(k.Key)})
	}
	if len(a.keys) > 0 {
		methods = append(methods, jwt.SigningMethodEdDSA.Alg())
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithExpirationRequired(),
		jwt.WithAudience(cfg.Audience),
		jwt.WithLeeway(cfg.Leeway),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(a.now),
		jwt.WithStrictDecoding(),
	}
	if cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(cfg.Issuer))
	}
	a.parser = jwt.NewParser(opts...)
	return a, nil
}

// Verify checks raw's size, header, signature and claims and returns its
// principal. Scopes relay does not know are ignored.
func (a *Auth) Verify(raw string) (Principal, error) {
	if len(raw) > MaxTokenBytes {
		return Principal{}, errTokenTooLarge
	}
	now := a.now()
	if p, ok := a.cache.get(raw, now); ok {
		return p, nil
	}
	if err := a.checkHeader(raw); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	var c claims
	if _, err := a.parser.ParseWithClaims(raw, &c, a.key); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	p := Principal{Subject: c.Subject}
	if c.Namespace.set {
		p.Namespace = c.Namespace.ns
	}
	// RFC 6749 §3.3: scope tokens are separated by spaces (%x20) only;
	// strings.Fields would also split on no-break space, NEL and others.
	for f := range strings.SplitSeq(c.Scope, " ") {
		if s := Scope(f); s.Valid() && !slices.Contains(p.Scopes, s) {
			p.Scopes = append(p.Scopes, s)
		}
	}
	// exp is required, so it is set here. The token passes Verify until
	// exp plus the leeway, and nbf and iat are in the past already.
	a.cache.put(raw, p, c.ExpiresAt.Add(a.leeway))
	return p, nil
}

// key checks the header and picks the verification key. The signing method
// was already checked against the configured ones; the switch on its type
// makes sure a key is only ever used with its own algorithm.
func (a *Auth) key(t *jwt.Token) (any, error) {
	typ, _ := t.Header["typ"].(string)
	if !validTyp(typ) {
		return nil, errors.New(`typ header must be "JWT" or "at+jwt"`)
	}
	if _, ok := t.Header["crit"]; ok {
		// RFC 7515: a recipient must refuse extensions it does not know.
		return nil, errors.New("crit header is not supported")
	}
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		if t.Method != jwt.SigningMethodHS256 || len(a.secret) == 0 {
			return nil, errors.New("algorithm not configured")
		}
		return a.secret, nil
	case *jwt.SigningMethodEd25519:
		if len(a.keys) == 0 {
			return nil, errors.New("algorithm not configured")
		}
		rawKid, hasKid := t.Header["kid"]
		kid, ok := rawKid.(string)
		if hasKid && !ok {
			return nil, errors.New("kid header must be a string")
		}
		if hasKid && a.keyed {
			for _, k := range a.keys {
				if k.ID == kid {
					return k.Key, nil
				}
			}
			return nil, errors.New("unknown kid")
		}
		// No kid, or keys without ids: any configured key may verify.
		if len(a.keys) == 1 {
			return a.keys[0].Key, nil
		}
		set := jwt.VerificationKeySet{}
		for _, k := range a.keys {
			set.Keys = append(set.Keys, k.Key)
		}
		return set, nil
	}
	return nil, errors.New("algorithm not configured")
}

// validTyp accepts the JWT and access-token types, with or without the
// "application/" prefix RFC 7515 lets producers drop.
func validTyp(typ string) bool {
	t := strings.ToLower(typ)
	t = strings.TrimPrefix(t, "application/")
	return t == "jwt" || t == "at+jwt"
}

// Require answers 401 unless the request carries a valid bearer token, and
// 403 unless its principal has scope and, on a route with an {ns}
// parameter, may act on that namespace. It stores the principal for
// PrincipalFrom. Use it on routes (chi's With, Group or a mounted router),
// not as a top-level Use: it must run after routing to see {ns}.
func (a *Auth) Require(scope Scope) func(http.Handler) http.Handler {
	return a.RequireAny(scope)
}

// RequireAny is Require for a route that any one of scopes opens.
func (a *Auth) RequireAny(scopes ...Scope) func(http.Handler) http.Handler {
	if len(scopes) == 0 {
		panic("httpapi: RequireAny of no scope")
	}
	names := make([]string, len(scopes))
	for i, s := range scopes {
		if !s.Valid() {
			panic(fmt.Sprintf("httpapi: Require of unknown scope %q", s))
		}
		names[i] = string(s)
	}
	wanted := strings.Join(names, " ")
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			acc := accessFrom(r.Context())
			raw, sent, detail := bearer(r)
			if detail != "" {
				unauthorized(w, r, sent, detail)
				return
			}
			p, err := a.Verify(raw)
			if err != nil {
				if acc != nil {
					acc.authError = err.Error()
				}
				unauthorized(w, r, true, verifyDetail(err))
				return
			}
			if acc != nil {
				acc.subject = p.Subject
			}
			ns, namespaced, routed := routeNamespace(r)
			if !routed {
				// Misuse: before routing {ns} is unknown, and guessing would
				// let a namespace-bound token act anywhere.
				WriteProblem(w, r, NewProblem(SlugInternal, ""))
				return
			}
			i := slices.IndexFunc(scopes, p.has)
			if i < 0 {
				w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, wanted))
				WriteProblem(w, r, NewProblem(SlugForbidden, "the token lacks the scope "+strings.Join(names, " or ")))
				return
			}
			if namespaced && !p.Allows(scopes[i], ns) {
				WriteProblem(w, r, NewProblem(SlugForbidden, "the token is bound to another namespace"))
				return
			}
			if x := exchangeFrom(r.Context()); x != nil {
				x.principal = &p
				next.ServeHTTP(w, r)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey, p)))
		})
	}
}

// bearer extracts the token. detail is non-empty when there is none to
// verify; sent tells whether the client tried to send a bearer token.
func bearer(r *http.Request) (token string, sent bool, detail string) {
	values := r.Header.Values("Authorization")
	switch {
	case len(values) == 0:
		return "", false, "a bearer token is required"
	case len(values) > 1:
		return "", true, "send one Authorization header"
	}
	scheme, rest, _ := strings.Cut(values[0], " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false, `the Authorization header must be "Bearer <token>"`
	}
	token = strings.Trim(rest, " \t")
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", true, `the Authorization header must be "Bearer <token>"`
	}
	return token, true, ""
}

// verifyDetail tells the client why its token was refused in terms it can
// act on, without echoing any of it.
func verifyDetail(err error) string {
	switch {
	case errors.Is(err, errTokenTooLarge):
		return fmt.Sprintf("the token is larger than %d bytes", MaxTokenBytes)
	case errors.Is(err, jwt.ErrTokenExpired):
		return "the token has expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return "the token is not valid yet"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "the token is not meant for this relay (aud)"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "the token's issuer is not trusted (iss)"
	}
	return "the token is invalid"
}

func unauthorized(w http.ResponseWriter, r *http.Request, sent bool, detail string) {
	if sent {
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	} else {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	WriteProblem(w, r, NewProblem(SlugUnauthorized, detail))
}

// routeNamespace is the {ns} path parameter. routed is false when chi has
// not routed the request yet.
func routeNamespace(r *http.Request) (ns string, namespaced, routed bool) {
	if rctx := chi.RouteContext(r.Context()); rctx != nil {
		if len(rctx.RoutePatterns) == 0 {
			return "", false, false
		}
		namespaced = slices.Contains(rctx.URLParams.Keys, "ns")
		return rctx.URLParam("ns"), namespaced, true
	}
	ns = r.PathValue("ns")
	return ns, ns != "", true
}

// CanMint reports whether a holds a secret to mint tokens with: one that
// verifies with public keys alone holds none.
func (a *Auth) CanMint() bool { return len(a.secret) > 0 }

// Mint signs an HS256 token for p with a's secret, audience and issuer.
func (a *Auth) Mint(p Principal, ttl time.Duration) (string, error) {
	if len(a.secret) == 0 {
		return "", errors.New("auth: minting needs an HS256 secret")
	}
	return MintHS256(a.secret, a.audience, a.issuer, p, ttl, a.now())
}

// MintHS256 signs a token for p with an HS256 secret of at least 32 bytes.
func MintHS256(secret []byte, audience, issuer string, p Principal, ttl time.Duration, now time.Time) (string, error) {
	if len(secret) < MinHS256Secret {
		return "", fmt.Errorf("auth: the HS256 secret is %d bytes, want at least %d", len(secret), MinHS256Secret)
	}
	return mint(jwt.SigningMethodHS256, secret, "", audience, issuer, p, ttl, now)
}

// MintEdDSA signs a token for p with an Ed25519 private key; kid, when set,
// goes in the header so a verifier holding several keys picks this one.
func MintEdDSA(key ed25519.PrivateKey, kid, audience, issuer string, p Principal, ttl time.Duration, now time.Time) (string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return "", fmt.Errorf("auth: an Ed25519 private key is %d bytes, not %d", ed25519.PrivateKeySize, len(key))
	}
	return mint(jwt.SigningMethodEdDSA, key, kid, audience, issuer, p, ttl, now)
}

func mint(method jwt.SigningMethod, key any, kid, audience, issuer string, p Principal, ttl time.Duration, now time.Time) (string, error) {
	if audience == "" {
		return "", errors.New("auth: an audience is required")
	}
	if p.Subject == "" {
		return "", errors.New("auth: a subject is required")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("auth: ttl %v must be positive", ttl)
	}
	if len(p.Scopes) == 0 {
		return "", errors.New("auth: at least one scope is required")
	}
	scopes := make([]string, 0, len(p.Scopes))
	for _, s := range p.Scopes {
		if !s.Valid() {
			return "", fmt.Errorf("auth: unknown scope %q", s)
		}
		if !slices.Contains(scopes, string(s)) {
			scopes = append(scopes, string(s))
		}
	}
	var jti [16]byte
	_, _ = rand.Read(jti[:]) // crypto/rand.Read never fails since Go 1.24.
	c := jwt.MapClaims{
		"sub":   p.Subject,
		"aud":   audience,
		"iat":   now.Unix(),
		"exp":   now.Add(ttl).Unix(),
		"jti":   hex.EncodeToString(jti[:]),
		"scope": strings.Join(scopes, " "),
	}
	if issuer != "" {
		c["iss"] = issuer
	}
	if p.Namespace != "" {
		if !ValidNamespace(p.Namespace) {
			return "", fmt.Errorf("auth: namespace %q must match [a-z0-9][a-z0-9_-]{0,62}", p.Namespace)
		}
		c["ns"] = p.Namespace
	}
	t := jwt.NewWithClaims(method, c)
	if kid != "" {
		t.Header["kid"] = kid
	}
	s, err := t.SignedString(key)
	if err != nil {
		return "", fmt.Errorf("auth: sign token: %w", err)
	}
	return s, nil
}
