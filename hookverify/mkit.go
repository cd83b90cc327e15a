package hookverify

import (
	"crypto/ed25519"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zeebo/blake3"
)

// The mkit-hook v2 request headers.
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

// MkitVersion is the one X-Mkit-Hook-Version accepted. Version 1 signed no
// namespace, so a receiver could not tell one tenant's webhooks from
// another's; it is refused.
const MkitVersion = "2"

// Limits of mkit-hook.
const (
	// MaxWindow is the longest validity window (expires-at minus
	// created-at) a receiver accepts.
	MaxWindow = 300 * time.Second
	// MaxClockLead is how far the sender's clock may run ahead of the
	// receiver's.
	MaxClockLead = 30 * time.Second
)

var mkitHeaders = [...]string{
	HeaderMkitVersion, HeaderMkitKeyID, HeaderMkitNamespace, HeaderMkitAudience, HeaderMkitCreatedAt,
	HeaderMkitExpiresAt, HeaderMkitNonce, HeaderMkitDigest, HeaderMkitSignature,
}

// MkitVerifier checks mkit-hook v2 requests. Set the fields before the first
// Verify and use it by pointer; it is safe for concurrent use. To refresh
// the key list while it serves, call SetKeys (a KeyListRefresher does so on
// a schedule); its nonces are kept.
//
// One relay key signs the webhooks of every namespace (tenant) of a relay,
// and any tenant may register any URL, so a valid signature alone does not
// say the webhook is meant for this receiver: name the namespaces it takes
// in Namespaces. A verifier that names none refuses every request.
type MkitVerifier struct {
	// Keys is relay's public key list (see ParseKeyList and FetchKeyList).
	// Set it before the first Verify; SetKeys replaces it later.
	Keys KeyList
	// Audience is this receiver's own origin, e.g. "https://hooks.example.com"
	// (scheme, host and a non-default port; any path is ignored). Requests
	// signed for another origin are refused, so a request captured at one
	// receiver cannot be replayed to another.
	Audience string
	// Namespaces are the relay namespaces whose webhooks this receiver
	// takes; a request signed for any other is refused with ErrNamespace
	// before its nonce is recorded, so another tenant can neither pass its
	// webhooks off as this one's nor, by sending its reservation ids first,
	// have the real ones dropped as duplicates.
	Namespaces []string
	// AcceptAnyNamespace takes every namespace instead, for a receiver
	// shared by tenants on purpose. It then must look at the namespace
	// (X-Mkit-Hook-Namespace, or data.namespace, which Verify checks is the
	// same) and deduplicate by namespace and reservation id.
	AcceptAnyNamespace bool
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Nonces remembers accepted nonces until their signatures expire. When
	// nil, the verifier makes its own in-memory cache of
	// DefaultNonceCacheSize on first use; set it to share a cache between
	// verifiers (as when refreshing keys) or to size it.
	Nonces *NonceCache

	once   sync.Once
	nonces *NonceCache
	keys   atomic.Pointer[KeyList] // set by SetKeys; Keys until then
}

// SetKeys replaces the key list, safely while requests are verified: each
// request is checked against the list before or after, never a mix. Check
// the list first (ParseKeyList and FetchKeyList return only lists that
// pass); a list with no keys refuses every request.
func (v *MkitVerifier) SetKeys(list KeyList) {
	list.Keys = slices.Clone(list.Keys) // the caller may reuse its slice
	v.keys.Store(&list)
}

// CurrentKeys is the key list in effect: the last SetKeys, else Keys.
func (v *MkitVerifier) CurrentKeys() KeyList {
	return *v.currentKeys()
}

func (v *MkitVerifier) currentKeys() *KeyList {
	if k := v.keys.Load(); k != nil {
		return k
	}
	return &v.Keys
}

// Check validates the configuration without a request: the audience is an
// origin Origin accepts, the namespaces are named (well-formed) or any is
// accepted explicitly, and the key list holds at least one well-formed key,
// no key id twice. Call it at start so that a misconfigured receiver refuses
// to start instead of answering every request 500. Errors match ErrConfig.
func (v *MkitVerifier) Check() error {
	if _, err := origin(v.Audience); err != nil {
		return errorf(ErrConfig, "audience %q: %v", v.Audience, err)
	}
	if err := v.checkNamespaces(); err != nil {
		return err
	}
	keys := v.currentKeys()
	if len(keys.Keys) == 0 {
		return errorf(ErrConfig, "key list has no keys")
	}
	seen := make(map[string]bool, len(keys.Keys))
	for i, k := range keys.Keys {
		if err := checkPublicKey(k); err != nil {
			return errorf(ErrConfig, "key list entry %d: %v", i+1, err)
		}
		if seen[k.KeyID] {
			return errorf(ErrConfig, "key id %s appears twice in the key list", k.KeyID)
		}
		seen[k.KeyID] = true
	}
	return nil
}

func (v *MkitVerifier) checkNamespaces() error {
	switch {
	case v.AcceptAnyNamespace && len(v.Namespaces) > 0:
		return errorf(ErrConfig, "set Namespaces or AcceptAnyNamespace, not both")
	case v.AcceptAnyNamespace:
		return nil
	case len(v.Namespaces) == 0:
		return errorf(ErrConfig, "no namespace accepted: name the namespaces this receiver takes in Namespaces (or set AcceptAnyNamespace)")
	}
	for _, ns := range v.Namespaces {
		if !validNamespace(ns) {
			return errorf(ErrConfig, "namespace %q must be 1 to 63 of a-z 0-9 _ -, starting with a letter or digit", ns)
		}
	}
	return nil
}

// accepts reports whether ns, well-formed, is one this receiver takes.
func (v *MkitVerifier) accepts(ns string) bool {
	return v.AcceptAnyNamespace || slices.Contains(v.Namespaces, ns)
}

func (v *MkitVerifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *MkitVerifier) nonceCache() *NonceCache {
	if v.Nonces != nil {
		return v.Nonces
	}
	v.once.Do(func() { v.nonces = NewNonceCache(0, v.now) })
	return v.nonces
}

// VerifyRequest verifies r with the path it was received on; it lets
// MkitVerifier serve as a Middleware's Verifier.
func (v *MkitVerifier) VerifyRequest(r *http.Request, body []byte) error {
	return v.Verify(r.Header, r.URL.EscapedPath(), body)
}

// Verify checks an mkit-hook v2 request: h as net/http parsed it, path the
// escaped request path (without the query, which is not signed; behind a
// proxy that rewrites paths, pass the path the sender used), body the exact
// bytes received. Cheap checks come first, the signature after them, then
// that the body's data.namespace is the signed namespace; the nonce is
// recorded only once everything else passed, so neither a forged request
// nor another namespace's can burn a nonce.
func (v *MkitVerifier) Verify(h http.Header, path string, body []byte) error {
	vf, err := singleHeaders(h, HeaderMkitVersion)
	if err != nil {
		return err
	}
	switch vf[0] {
	case MkitVersion:
	case "1":
		return errorf(ErrVersion, "mkit-hook v1 is not accepted: it does not sign the namespace (relay signs v2)")
	default:
		return errorf(ErrVersion, "%s must be %s", HeaderMkitVersion, MkitVersion)
	}
	if err := otherSpellings(h); err != nil {
		return err
	}
	f, err := singleHeaders(h, mkitHeaders[1:]...)
	if err != nil {
		return err
	}
	keyID, namespace, audience, createdS, expiresS, nonce, digest, signature := f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]

	if !validKeyID(keyID) {
		return errorf(ErrMalformed, "%s must be 1 to 64 of A-Z a-z 0-9 . _ -", HeaderMkitKeyID)
	}
	key, pub, err := v.currentKeys().find(keyID)
	if err != nil {
		return err
	}
	now := v.now().UnixMilli()
	if key.NotBeforeMs != nil && now < *key.NotBeforeMs {
		return errorf(ErrKeyInactive, "key %s is not valid before %d", keyID, *key.NotBeforeMs)
	}
	if key.NotAfterMs != nil && now > *key.NotAfterMs {
		return errorf(ErrKeyInactive, "key %s is not valid after %d", keyID, *key.NotAfterMs)
	}
	want, err := origin(v.Audience)
	if err != nil {
		return errorf(ErrConfig, "audience %q: %v", v.Audience, err)
	}
	if audience != want {
		return errorf(ErrAudience, "request was signed for another origin")
	}
	if !validNamespace(namespace) {
		return errorf(ErrMalformed, "%s must be 1 to 63 of a-z 0-9 _ -, starting with a letter or digit", HeaderMkitNamespace)
	}
	if err := v.checkNamespaces(); err != nil {
		return err
	}
	if !v.accepts(namespace) {
		// Well-formed, so safe to name: the receiver's log says whose it was.
		return errorf(ErrNamespace, "%s is not a namespace this receiver takes", namespace)
	}
	created, ok := parseDecimal(createdS)
	if !ok {
		return errorf(ErrMalformed, "%s must be a decimal without sign or leading zeros", HeaderMkitCreatedAt)
	}
	expires, ok := parseDecimal(expiresS)
	if !ok {
		return errorf(ErrMalformed, "%s must be a decimal without sign or leading zeros", HeaderMkitExpiresAt)
	}
	if window := expires - created; window <= 0 || window > MaxWindow.Milliseconds() {
		return errorf(ErrWindow, "expires-at minus created-at must be 1 to %d ms", MaxWindow.Milliseconds())
	}
	// The key's bounds hold for the signing time too: a key retired at T
	// signs nothing after T, even for a receiver whose clock is behind.
	if key.NotBeforeMs != nil && created < *key.NotBeforeMs {
		return errorf(ErrKeyInactive, "request created before key %s became valid at %d", keyID, *key.NotBeforeMs)
	}
	if key.NotAfterMs != nil && created > *key.NotAfterMs {
		return errorf(ErrKeyInactive, "request created after key %s was retired at %d", keyID, *key.NotAfterMs)
	}
	if created > now+MaxClockLead.Milliseconds() {
		return errorf(ErrNotYetValid, "created-at is more than %d ms ahead of this receiver's clock", MaxClockLead.Milliseconds())
	}
	if now >= expires {
		return errorf(ErrExpired, "expired %d ms ago", now-expires)
	}
	if !isLowerHex(nonce, 64) {
		return errorf(ErrMalformed, "%s must be 64 lowercase hex digits", HeaderMkitNonce)
	}
	digestHex, ok := strings.CutPrefix(digest, "body:")
	if !ok || !isLowerHex(digestHex, 64) {
		return errorf(ErrMalformed, "%s must be body: and 64 lowercase hex digits", HeaderMkitDigest)
	}
	sum := blake3.Sum256(body)
	var got [32]byte
	hex.Decode(got[:], []byte(digestHex))
	if subtle.ConstantTimeCompare(sum[:], got[:]) != 1 {
		return errorf(ErrDigest, "body does not match %s", HeaderMkitDigest)
	}
	if !isLowerHex(signature, 2*ed25519.SignatureSize) {
		return errorf(ErrMalformed, "%s must be %d lowercase hex digits", HeaderMkitSignature, 2*ed25519.SignatureSize)
	}
	sig, _ := hex.DecodeString(signature)
	if path == "" {
		path = "/"
	}
	msg := blake3.Sum256(canonical(keyID, namespace, audience, path, digest, createdS, expiresS, nonce))
	if !ed25519.Verify(pub, msg[:], sig) {
		return errorf(ErrBadSignature, "signature does not verify with key %s", keyID)
	}
	// Signed, so relay wrote both; a handler reading data.namespace must
	// still read what was checked.
	if err := checkBodyNamespace(body, namespace); err != nil {
		return err
	}
	return v.nonceCache().Record(nonce, time.UnixMilli(expires))
}

// otherSpellings refuses a signed header held under a second, non-canonical
// spelling (possible in a Header built by hand, not by net/http): a handler
// reading that spelling would see a value that was not checked.
func otherSpellings(h http.Header) error {
	for name := range h {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if canon != name && slices.Contains(mkitHeaders[:], canon) {
			return errorf(ErrMalformed, "%s is repeated in another spelling", canon)
		}
	}
	return nil
}

// canonical is the signed string: nine fields joined by "\n", no final
// newline. relay's signer builds it separately, on purpose: the vectors in
// api/testdata check the two against each other.
func canonical(keyID, namespace, audience, path, digest, created, expires, nonce string) []byte {
	fields := [...]string{"mkit-hook:v2", keyID, namespace, audience, path, digest, created, expires, nonce}
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

// parseDecimal accepts only the canonical form of a non-negative int64:
// digits, no sign, no leading zero (but "0"), no overflow.
func parseDecimal(s string) (int64, bool) {
	if s == "" || len(s) > 19 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// Origin is the canonical origin of rawURL, as mkit-hook signs audiences:
// lowercase scheme://host[:port], the default port omitted, no user info,
// path or query. Use it to compare a configured URL with a signed audience.
// The spellings relay refuses to sign for are refused here too, so a
// configured audience never silently differs from what relay signs: a host
// ending with '.', a port with a leading zero, an IPv6 address not in its
// canonical form (RFC 5952, as 2001:db8::1) or with a zone. Every error
// matches ErrConfig.
func Origin(rawURL string) (string, error) {
	o, err := origin(rawURL)
	if err != nil {
		return "", errorf(ErrConfig, "origin %q: %v", rawURL, err)
	}
	return o, nil
}

// origin is Origin with a plain reason for its error.
func origin(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("not a URL")
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", errors.New("scheme must be http or https")
	}
	host := u.Hostname()
	if host == "" {
		return "", errors.New("no host")
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f {
			return "", errors.New("host must be printable ASCII (use the punycode form)")
		}
	}
	host = strings.ToLower(host)
	if strings.HasSuffix(host, ".") {
		return "", errors.New("host ends with '.' (relay does not sign for such a host)")
	}
	if strings.Contains(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" || a.String() != host {
			return "", errors.New("IPv6 address must be in its canonical form (as 2001:db8::1), without a zone")
		}
		host = "[" + host + "]"
	}
	port := u.Port()
	if _, ok := parseDecimal(port); port != "" && !ok {
		return "", errors.New("port is not a number without leading zeros")
	}
	if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		return scheme + "://" + host, nil
	}
	return scheme + "://" + host + ":" + port, nil
}

// singleHeaders returns the value of each named header, each present,
// non-empty and not repeated: a repeated signed header would leave it to
// chance which of the values was checked.
func singleHeaders(h http.Header, names ...string) ([]string, error) {
	f := make([]string, len(names))
	for i, name := range names {
		vals := h.Values(name)
		switch {
		case len(vals) == 0 || vals[0] == "":
			return nil, errorf(ErrMissingHeader, "%s", name)
		case len(vals) > 1:
			return nil, errorf(ErrMalformed, "%s is repeated", name)
		}
		f[i] = vals[0]
	}
	return f, nil
}
