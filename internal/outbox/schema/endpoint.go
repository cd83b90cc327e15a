package schema

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/hookrelay/relay/internal/store"
)

// Scheme is how deliveries to an endpoint are signed.
type Scheme string

// Signing schemes.
const (
	// SchemeMkitHookV2 signs with relay's Ed25519 key, naming the
	// endpoint's namespace; it needs no secret.
	SchemeMkitHookV2 Scheme = "mkit-hook-v2"
	// SchemeStandardWebhooks signs with HMAC-SHA256 under whsec_ secrets.
	SchemeStandardWebhooks Scheme = "standard-webhooks"
	// SchemeStandardWebhooksV1a signs with Ed25519 under the endpoint's own
	// key pair, relay generated: receivers verify with its public key and
	// hold nothing that can sign.
	SchemeStandardWebhooksV1a Scheme = "standard-webhooks-v1a"
)

// Endpoint limits.
const (
	MaxURLBytes = 2048
	MaxSecrets  = 4
	// MaxSigningKeys bounds a v1a endpoint's key pairs: the current one and
	// the one it replaced, which signs beside it until the next rotation.
	MaxSigningKeys    = 2
	MinMaxInFlight    = 1
	MaxMaxInFlight    = 16
	MaxDisabledReason = 64
	// MinRateLimit and MaxRateLimit bound an endpoint's rate_limit, in
	// calls per second.
	MinRateLimit = 1
	MaxRateLimit = 10000
	// SecretPrefix starts every Standard Webhooks secret.
	SecretPrefix = "whsec_"
	// MinSecretBytes and MaxSecretBytes bound the random bytes of a
	// secret.
	MinSecretBytes, MaxSecretBytes = 24, 64
)

// Secret is a Standard Webhooks signing secret, "whsec_" and the base64 of
// 24 to 64 random bytes. It formats as a redacted placeholder, so printing an
// Endpoint never leaks it; string(s) is the secret.
type Secret string

// String redacts the secret.
func (Secret) String() string { return SecretPrefix + "[redacted]" }

// GoString redacts the secret.
func (s Secret) GoString() string { return s.String() }

// Valid reports whether s is a secret: the prefix, and the base64 of
// MinSecretBytes to MaxSecretBytes.
func (s Secret) Valid() bool {
	raw, ok := strings.CutPrefix(string(s), SecretPrefix)
	if !ok {
		return false
	}
	key, err := base64.StdEncoding.Strict().DecodeString(raw)
	return err == nil && len(key) >= MinSecretBytes && len(key) <= MaxSecretBytes
}

// NewSecret generates a Standard Webhooks secret of 32 random bytes.
func NewSecret() (Secret, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	return Secret(SecretPrefix + base64.StdEncoding.EncodeToString(key)), nil
}

// Endpoint is an endpoint's configuration, the value of its row.
type Endpoint struct {
	// URL is an absolute http or https URL without credentials or fragment.
	// Whether plain http is allowed is the channel's policy, not the row's.
	URL    string `json:"url"`
	Scheme Scheme `json:"scheme"`
	// Secrets sign standard-webhooks deliveries, the first one current;
	// several during rotation. The mkit-hook-v2 scheme has none.
	Secrets []Secret `json:"secrets,omitempty"`
	// SigningKeys sign standard-webhooks-v1a deliveries, the first one
	// current; two during rotation. Other schemes have none, so rows
	// written before the scheme existed read as they were.
	SigningKeys []SigningKey `json:"signing_keys,omitempty"`
	// Kinds filters outcomes by kind; empty receives every outcome kind.
	// Operator events go only to an endpoint that names them (KindEvents,
	// or an event's own kind).
	Kinds []Kind `json:"kinds,omitempty"`
	// Enabled endpoints are delivered to. A disabled one keeps its rows, and
	// keeps accumulating new ones, until it is enabled again.
	Enabled bool `json:"enabled"`
	// MaxInFlight is how many calls one fire keeps open, 1 to 16.
	MaxInFlight int `json:"max_in_flight"`
	// DisabledReason says why a disabled endpoint is, e.g. "gone" after a
	// 410; empty while enabled.
	DisabledReason string `json:"disabled_reason,omitempty"`
	// DisabledMs is when the endpoint was disabled; 0 while enabled.
	DisabledMs int64 `json:"disabled_ms,omitempty"`
	CreatedMs  int64 `json:"created_ms"`
	UpdatedMs  int64 `json:"updated_ms"`
	// CreatedSeq is the namespace's first sequence number after the
	// endpoint was created: an outcome at a lower one was accepted before
	// it, even in the same millisecond. A row without it (0) is dated by
	// CreatedMs instead.
	CreatedSeq uint64 `json:"created_seq,omitempty"`
	// TimeoutMs bounds each call to the endpoint, MinTimeoutMs to
	// MaxTimeoutMs; 0 is the driver's default.
	TimeoutMs int `json:"timeout_ms,omitempty"`
	// Headers are sent with every attempt, lower-case names to values (see
	// validateHeaders); relay's own headers always win.
	Headers map[string]HeaderValue `json:"headers,omitempty"`
	// RateLimit is the most calls per second the whole cluster makes to
	// the endpoint, MinRateLimit to MaxRateLimit; 0 (rows written before it
	// existed) is unlimited.
	RateLimit int `json:"rate_limit,omitempty"`
}

// WithDefaults fills the fields a request may leave out: the mkit-hook-v2
// scheme and one call in flight.
func (e Endpoint) WithDefaults() Endpoint {
	if e.Scheme == "" {
		e.Scheme = SchemeMkitHookV2
	}
	if e.MaxInFlight == 0 {
		e.MaxInFlight = MinMaxInFlight
	}
	return e
}

// Accepts reports whether the endpoint's filter takes outcomes of kind k.
func (e *Endpoint) Accepts(k Kind) bool {
	if k.IsEvent() {
		return slices.Contains(e.Kinds, k) || slices.Contains(e.Kinds, KindEvents)
	}
	return len(e.Kinds) == 0 || slices.Contains(e.Kinds, k)
}

// TakesAll reports whether the endpoint's filter takes every outcome kind.
func (e *Endpoint) TakesAll() bool { return len(e.Kinds) == 0 }

// TakesEvents reports whether the endpoint receives any operator event.
// relay sends no event about such an endpoint: it would go to the
// endpoint it is about, failing as it does.
func (e *Endpoint) TakesEvents() bool {
	return slices.ContainsFunc(e.Kinds, Kind.IsEvent)
}

// Validate reports the first rule the endpoint breaks, as an error matching
// ErrInvalid. The text never contains the URL or a secret.
func (e *Endpoint) Validate() error {
	if err := validateURL(e.URL); err != nil {
		return err
	}
	switch e.Scheme {
	case SchemeMkitHookV2:
		if len(e.Secrets) != 0 {
			return invalidf("scheme mkit-hook-v2 takes no secrets")
		}
	case SchemeStandardWebhooksV1a:
		if len(e.Secrets) != 0 {
			return invalidf("scheme standard-webhooks-v1a takes no secrets")
		}
		if len(e.SigningKeys) == 0 || len(e.SigningKeys) > MaxSigningKeys {
			return invalidf("scheme standard-webhooks-v1a needs 1 to %d signing keys", MaxSigningKeys)
		}
		for i, k := range e.SigningKeys {
			if _, ok := k.private(); !ok {
				return invalidf("signing_keys[%d] must be %q followed by the base64 of an Ed25519 private key", i, SigningKeyPrefix)
			}
			if slices.Contains(e.SigningKeys[:i], k) {
				return invalidf("signing_keys[%d] repeats an earlier key", i)
			}
		}
	case SchemeStandardWebhooks:
		if len(e.Secrets) == 0 || len(e.Secrets) > MaxSecrets {
			return invalidf("scheme standard-webhooks needs 1 to %d secrets", MaxSecrets)
		}
		for i, s := range e.Secrets {
			if !s.Valid() {
				return invalidf("secrets[%d] must be %q followed by the base64 of %d to %d bytes", i, SecretPrefix, MinSecretBytes, MaxSecretBytes)
			}
			if slices.Contains(e.Secrets[:i], s) {
				return invalidf("secrets[%d] repeats an earlier secret", i)
			}
		}
	default:
		return invalidf("scheme must be %q, %q or %q", SchemeMkitHookV2, SchemeStandardWebhooks, SchemeStandardWebhooksV1a)
	}
	if e.Scheme != SchemeStandardWebhooksV1a && len(e.SigningKeys) != 0 {
		return invalidf("signing keys are only for scheme %s", SchemeStandardWebhooksV1a)
	}
	for i, k := range e.Kinds {
		if !k.Valid() && !k.validEvent() {
			return invalidf("kinds[%d] must be one of committed, aborted, expired, read_served, relay.* or relay.<event type>", i)
		}
		if slices.Contains(e.Kinds[:i], k) {
			return invalidf("kinds[%d] repeats an earlier kind", i)
		}
	}
	switch {
	case e.MaxInFlight < MinMaxInFlight || e.MaxInFlight > MaxMaxInFlight:
		return invalidf("max_in_flight must be %d to %d", MinMaxInFlight, MaxMaxInFlight)
	case e.Enabled && e.DisabledReason != "":
		return invalidf("disabled_reason must be empty while the endpoint is enabled")
	case e.Enabled && e.DisabledMs != 0:
		return invalidf("disabled_ms must be 0 while the endpoint is enabled")
	case e.DisabledMs < 0:
		return invalidf("disabled_ms must not be negative")
	case e.DisabledReason != "" && !validToken(e.DisabledReason, MaxDisabledReason):
		return invalidf("disabled_reason must be a token of at most %d bytes", MaxDisabledReason)
	case e.CreatedMs < 0 || e.UpdatedMs < e.CreatedMs:
		return invalidf("created_ms must not be negative nor after updated_ms")
	case e.TimeoutMs != 0 && (e.TimeoutMs < MinTimeoutMs || e.TimeoutMs > MaxTimeoutMs):
		return invalidf("timeout_ms must be %d to %d", MinTimeoutMs, MaxTimeoutMs)
	case e.RateLimit != 0 && (e.RateLimit < MinRateLimit || e.RateLimit > MaxRateLimit):
		return invalidf("rate_limit must be %d to %d", MinRateLimit, MaxRateLimit)
	}
	return validateHeaders(e.Headers)
}

func validateURL(raw string) error {
	if raw == "" {
		return invalidf("url must not be empty")
	}
	if len(raw) > MaxURLBytes {
		return invalidf("url must be at most %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return invalidf("url does not parse")
	case u.Scheme != "https" && u.Scheme != "http":
		return invalidf("url must be an absolute http or https URL")
	case u.Opaque != "" || u.Hostname() == "":
		return invalidf("url must name a host")
	case u.User != nil:
		return invalidf("url must not carry credentials")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return invalidf("url must not carry a fragment")
	}
	return nil
}

// ValidateNewURL reports the first rule the URL of an endpoint being
// registered breaks: those of Validate, and that it is written as a URI
// holds it, each byte one RFC 3986 allows unencoded and each '%' starting
// a %-escape. Its path and query go onto the request line as written, where
// a space would end the request target and let the rest pass for the
// line's version. Endpoint rows stored before the rule still read (the
// channel refuses to send to them). The text never contains the URL.
func ValidateNewURL(raw string) error {
	if err := validateURL(raw); err != nil {
		return err
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return invalidf("url holds a '%%' that does not start a %%-escape: write it as %%25")
			}
		case c >= 0x80 || !isURIByte[c]:
			return invalidf("url holds a space, a control byte, a byte that is not ASCII or one of \"<>\\^`{|}: percent-encode it")
		}
	}
	return nil
}

// isURIByte: the bytes RFC 3986 allows in a URI unencoded (unreserved,
// gen-delims and sub-delims), '%' aside.
var isURIByte = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "-._~:/?#[]@!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// EncodeEndpoint is version 1 and the endpoint's JSON. An invalid endpoint is
// an error matching ErrInvalid.
func EncodeEndpoint(e *Endpoint) (store.Value, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return append([]byte{codecV1}, body...), nil
}

// DecodeEndpoint decodes an endpoint row. Only the exact bytes EncodeEndpoint
// writes (or wrote) are accepted: unknown fields, other spellings of field
// names, whitespace, trailing data and invalid endpoints are corrupt.
// Callers guard writes with the row's bytes, never a re-encoding.
func DecodeEndpoint(v store.Value) (Endpoint, error) {
	if len(v) == 0 || v[0] != codecV1 {
		return Endpoint{}, corruptf("endpoint: unknown version")
	}
	dec := json.NewDecoder(bytes.NewReader(v[1:]))
	dec.DisallowUnknownFields()
	var e Endpoint
	if err := dec.Decode(&e); err != nil {
		return Endpoint{}, corruptf("endpoint: bad JSON")
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		return Endpoint{}, corruptf("endpoint: trailing data")
	}
	canon, err := json.Marshal(&e)
	if err != nil || !bytes.Equal(canon, v[1:]) {
		return Endpoint{}, corruptf("endpoint: not canonical")
	}
	if err := e.Validate(); err != nil {
		return Endpoint{}, corruptf("endpoint: %v", err)
	}
	return e, nil
}
