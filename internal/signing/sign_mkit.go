package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/digest"
)

// Scheme is how an endpoint's webhooks are signed.
type Scheme string

// The signing schemes an endpoint may choose.
const (
	// SchemeMkit is mkit-hook v2: Ed25519 over a BLAKE3 digest that names
	// the endpoint's namespace, verified with relay's published public keys.
	// The default. (v1 signed no namespace: one relay key signs for every
	// tenant, so a v1 receiver could not tell whose webhook it got. relay
	// no longer signs it.)
	SchemeMkit Scheme = "mkit-hook-v2"
	// SchemeStandard is Standard Webhooks: HMAC-SHA256 with the endpoint's
	// whsec_ secret, so any Standard Webhooks / Svix library verifies it.
	SchemeStandard Scheme = "standard-webhooks"
	// SchemeStandardV1a is Standard Webhooks' asymmetric form: Ed25519
	// with the endpoint's own private key, verified with its whpk_ public
	// key, so receivers hold nothing that can sign.
	SchemeStandardV1a Scheme = "standard-webhooks-v1a"
)

// MaxValidity is the longest an mkit-hook signature may be valid.
// Receivers keep each nonce for the window, so the bound is also what bounds
// their replay cache.
const MaxValidity = 300 * time.Second

// The mkit-hook v2 request headers, in the order of the signed fields.
const (
	HeaderMkitVersion   = "X-Mkit-Hook-Version"
	HeaderMkitKeyID     = "X-Mkit-Hook-Key-Id"
	HeaderMkitNamespace = "X-Mkit-Hook-Namespace"
	HeaderMkitAudience  = "X-Mkit-Hook-Audience"
	HeaderMkitCreatedAt = "X-Mkit-Hook-Created-At"
	HeaderMkitExpiresAt = "X-Mkit-Hook-Expires-At"
	HeaderMkitNonce     = "X-Mkit-Hook-Nonce"
	HeaderMkitDigest    = "X-Mkit-Hook-Digest"
	HeaderMkitSignature = "X-Mkit-Hook-Signature"
)

// mkitPrefix is the first canonical field; it binds the signature to this
// scheme and version, so no v1 signature can pass for a v2 one.
const mkitPrefix = "mkit-hook:v2"

// mkitVersion is the X-Mkit-Hook-Version value of mkitPrefix.
const mkitVersion = "2"

// ErrInvalidSigner marks a signer, key or secret that breaks a documented
// rule (key id syntax, validity bound, key size, secret format, message id,
// namespace).
// The text names the rule, never the key or secret.
var ErrInvalidSigner = errors.New("signing: invalid signing configuration")

// ErrInvalidEndpoint marks an endpoint URL that cannot be signed for: not
// absolute http(s), no host, a host that is not ASCII, or an origin with
// more than one spelling (see Origin).
var ErrInvalidEndpoint = errors.New("signing: invalid endpoint URL")

// MkitSigner signs attempts with mkit-hook v2. Sign is safe for concurrent
// use when its random source is (crypto/rand is).
type MkitSigner struct {
	keyID    string
	key      ed25519.PrivateKey
	pub      ed25519.PublicKey
	validity time.Duration
	rand     io.Reader
}

// MkitOption configures an MkitSigner.
type MkitOption func(*MkitSigner)

// WithValidity sets how long each signature is valid: more than zero, at
// most MaxValidity, counted in whole milliseconds (the rest is dropped).
// The default is MaxValidity.
func WithValidity(d time.Duration) MkitOption {
	return func(s *MkitSigner) { s.validity = d }
}

// WithRand sets the source of nonces; tests inject a fixed one. The default
// is crypto/rand.
func WithRand(r io.Reader) MkitOption {
	return func(s *MkitSigner) { s.rand = r }
}

// NewMkitSigner returns a signer for key, published under keyID. The key id
// is 1–64 of [A-Za-z0-9._-]; the key must be a well-formed Ed25519 private
// key (its public half matching its seed), or every signature would fail.
func NewMkitSigner(keyID string, key ed25519.PrivateKey, opts ...MkitOption) (*MkitSigner, error) {
	if err := checkKeyID(keyID); err != nil {
		return nil, err
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: Ed25519 private key must be %d bytes", ErrInvalidSigner, ed25519.PrivateKeySize)
	}
	derived := ed25519.NewKeyFromSeed(key.Seed())
	if subtle.ConstantTimeCompare(derived, key) != 1 {
		return nil, fmt.Errorf("%w: Ed25519 private key's public half does not match its seed", ErrInvalidSigner)
	}
	s := &MkitSigner{
		keyID:    keyID,
		key:      derived,
		pub:      derived.Public().(ed25519.PublicKey),
		validity: MaxValidity,
		rand:     rand.Reader,
	}
	for _, o := range opts {
		o(s)
	}
	if s.rand == nil {
		s.rand = rand.Reader
	}
	s.validity = s.validity.Truncate(time.Millisecond)
	if s.validity <= 0 || s.validity > MaxValidity {
		return nil, fmt.Errorf("%w: validity must be at least 1ms and at most %v", ErrInvalidSigner, MaxValidity)
	}
	return s, nil
}

// KeyID is the id receivers look the public key up by.
func (s *MkitSigner) KeyID() string { return s.keyID }

// Validity is how long each signature is valid.
func (s *MkitSigner) Validity() time.Duration { return s.validity }

// PublicKey is this signer's entry for the public key list, without
// validity bounds.
func (s *MkitSigner) PublicKey() PublicKey {
	return PublicKey{KeyID: s.keyID, Alg: AlgEd25519, PublicKey: hex.EncodeToString(s.pub)}
}

// Sign returns the nine X-Mkit-Hook-* headers for one attempt of body to
// endpoint, an endpoint of namespace, created at now, with a fresh 32-byte
// nonce: a retry is never a replay of an earlier attempt. The namespace is
// signed because one key signs for every tenant: without it, a tenant
// registering another's URL would send webhooks that receiver takes as its
// own. The endpoint's query is not signed (only its origin and path are), so
// receivers must not trust query parameters for authorisation.
func (s *MkitSigner) Sign(endpoint *url.URL, namespace string, body []byte, now time.Time) (http.Header, error) {
	if err := CheckNamespace(namespace); err != nil {
		return nil, err
	}
	audience, err := Origin(endpoint)
	if err != nil {
		return nil, err
	}
	created := now.UnixMilli()
	if created < 0 {
		return nil, fmt.Errorf("signing: sign at %v: time before 1970 has no mkit-hook timestamp", now)
	}
	expires := created + s.validity.Milliseconds()
	var nonce [32]byte
	if _, err := io.ReadFull(s.rand, nonce[:]); err != nil {
		return nil, fmt.Errorf("signing: read nonce: %w", err)
	}
	bodySum := digest.Sum256(body)
	c := mkitCanonical{
		keyID:     s.keyID,
		namespace: namespace,
		audience:  audience,
		path:      SignedPath(endpoint),
		digest:    "body:" + hex.EncodeToString(bodySum[:]),
		created:   strconv.FormatInt(created, 10),
		expires:   strconv.FormatInt(expires, 10),
		nonce:     hex.EncodeToString(nonce[:]),
	}
	msg := digest.Sum256(c.bytes())
	sig := ed25519.Sign(s.key, msg[:])

	h := make(http.Header, 9)
	h[HeaderMkitVersion] = []string{mkitVersion}
	h[HeaderMkitKeyID] = []string{c.keyID}
	h[HeaderMkitNamespace] = []string{c.namespace}
	h[HeaderMkitAudience] = []string{c.audience}
	h[HeaderMkitCreatedAt] = []string{c.created}
	h[HeaderMkitExpiresAt] = []string{c.expires}
	h[HeaderMkitNonce] = []string{c.nonce}
	h[HeaderMkitDigest] = []string{c.digest}
	h[HeaderMkitSignature] = []string{hex.EncodeToString(sig)}
	return h, nil
}

// mkitCanonical holds the nine signed fields but the constant prefix.
//
// The signer builds the canonical string, the origin and the field checks
// itself rather than importing package hookverify: the two sides are kept
// independent on purpose, so the fixed vectors in api/testdata check each
// against the other instead of one shared mistake passing both.
type mkitCanonical struct {
	keyID, namespace, audience, path, digest, created, expires, nonce string
}

// bytes is the signed string: the nine fields joined by "\n", no final
// newline. No field can hold a newline (each is validated or encoded), so
// the join is unambiguous.
func (c *mkitCanonical) bytes() []byte {
	fields := [...]string{mkitPrefix, c.keyID, c.namespace, c.audience, c.path, c.digest, c.created, c.expires, c.nonce}
	n := len(fields) - 1
	for _, f := range fields {
		n += len(f)
	}
	b := make([]byte, 0, n)
	for i, f := range fields {
		if i > 0 {
			b = append(b, '\n')
		}
		b = append(b, f...)
	}
	return b
}

// Origin is the audience signed for endpoint: lowercase scheme://host[:port],
// the default port (80 for http, 443 for https) omitted, no user info, path
// or query. Receivers compare it with their own origin. Spellings a
// receiver could write differently are refused rather than signed: a host
// ending with '.', a port with a leading zero, an IPv6 address not in its
// canonical form (RFC 5952, as 2001:db8::1) or with a zone.
func Origin(endpoint *url.URL) (string, error) {
	if endpoint == nil {
		return "", fmt.Errorf("%w: no URL", ErrInvalidEndpoint)
	}
	scheme := strings.ToLower(endpoint.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", fmt.Errorf("%w: scheme must be http or https", ErrInvalidEndpoint)
	}
	host := endpoint.Hostname()
	if host == "" {
		return "", fmt.Errorf("%w: no host", ErrInvalidEndpoint)
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%w: host must be printable ASCII (use the punycode form)", ErrInvalidEndpoint)
		}
	}
	host = strings.ToLower(host)
	if strings.HasSuffix(host, ".") {
		return "", fmt.Errorf("%w: host ends with '.'", ErrInvalidEndpoint)
	}
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" || a.String() != host {
			return "", fmt.Errorf("%w: IPv6 address must be in its canonical form (as 2001:db8::1), without a zone", ErrInvalidEndpoint)
		}
		host = "[" + host + "]"
	}
	port := endpoint.Port()
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", fmt.Errorf("%w: port is not a number", ErrInvalidEndpoint)
		}
	}
	if len(port) > 1 && port[0] == '0' {
		return "", fmt.Errorf("%w: port has a leading zero", ErrInvalidEndpoint)
	}
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		return scheme + "://" + host, nil
	}
	return scheme + "://" + host + ":" + port, nil
}

// SignedPath is the path signed for endpoint: its escaped path, "/" when
// empty, exactly what the HTTP client sends on the request line before any
// query.
func SignedPath(endpoint *url.URL) string {
	if p := endpoint.EscapedPath(); p != "" {
		return p
	}
	return "/"
}

// CheckNamespace enforces relay's namespace syntax, [a-z0-9][a-z0-9_-]{0,62},
// on the namespace a signature names: one spelling per namespace, safe in a
// header and the canonical string.
func CheckNamespace(ns string) error {
	if len(ns) == 0 || len(ns) > 63 {
		return fmt.Errorf("%w: namespace must be 1 to 63 characters", ErrInvalidSigner)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || i > 0 && (c == '_' || c == '-')) {
			return fmt.Errorf("%w: namespace must be a-z 0-9 _ -, starting with a letter or digit", ErrInvalidSigner)
		}
	}
	return nil
}

// checkKeyID enforces 1–64 of [A-Za-z0-9._-], so a key id is safe in a
// header, a log line and the canonical string.
func checkKeyID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("%w: key id must be 1 to 64 characters", ErrInvalidSigner)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: key id may hold only A-Z a-z 0-9 . _ -", ErrInvalidSigner)
		}
	}
	return nil
}
