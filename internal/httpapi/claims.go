package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A token's claims and header are read as strictly as a request body: no
// duplicate name, no case variant of a name relay reads, no null, and times
// only as numbers, so no claim can mean two things to two readers.

// claims is what relay reads from a token: the registered claims, scope
// and ns. Its UnmarshalJSON is the only way they are decoded.
type claims struct {
	jwt.RegisteredClaims
	Scope     string
	Namespace nsClaim
}

// nsClaim is the ns claim; set tells a token bound to a namespace from an
// unbound one.
type nsClaim struct {
	set bool
	ns  string
}

// readClaims are the claims relay reads, by their exact names.
var readClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "scope", "ns"}

// UnmarshalJSON decodes a token's claims as strictly as a request body:
// read loosely, they grant more than was signed. encoding/json keeps the
// last of duplicate names ("scope":"outbox:read","scope":"admin" would be
// admin) and matches names regardless of case ("Scope", "NS", "EXP",
// "ſcope"), and the library takes "exp":"1700003600" for a time. So the
// claims are one object with no duplicate name at any depth and only valid
// UTF-8, no name differs from a claim relay reads only in case, and each
// claim relay reads has its JSON type, with no null in it. Claims relay
// does not read may be named and valued as their issuer likes.
func (c *claims) UnmarshalJSON(b []byte) error {
	if _, p := checkStrictRules(b, jsonRules{openKeys: true, nullOK: true}); p != nil {
		return errors.New("claims: " + p.Detail)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return errors.New("claims must be a JSON object")
	}
	for name := range m {
		for _, known := range readClaims {
			if name != known && strings.EqualFold(name, known) {
				return fmt.Errorf("claim %q differs from %q only in case", truncate(name), known)
			}
		}
	}
	*c = claims{}
	for _, name := range readClaims {
		raw, ok := m[name]
		if !ok {
			continue
		}
		if p := checkStrict(raw); p != nil {
			return fmt.Errorf("%s claim: %s", name, p.Detail)
		}
		var err error
		switch name {
		case "iss":
			err = claimString(raw, &c.Issuer)
		case "sub":
			err = claimString(raw, &c.Subject)
		case "jti":
			err = claimString(raw, &c.ID)
		case "scope":
			err = claimString(raw, &c.Scope)
		case "ns":
			c.Namespace.set = true
			err = claimString(raw, &c.Namespace.ns)
		case "aud":
			err = c.Audience.UnmarshalJSON(raw)
		case "exp":
			c.ExpiresAt, err = claimDate(raw, false)
		case "nbf":
			c.NotBefore, err = claimDate(raw, true)
		case "iat":
			c.IssuedAt, err = claimDate(raw, true)
		}
		if err != nil {
			return fmt.Errorf("%s claim: %w", name, err)
		}
	}
	return nil
}

// claimString decodes a claim that must be a JSON string; null was
// refused before, or it would read as "".
func claimString(raw []byte, dst *string) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return errors.New("must be a string")
	}
	return nil
}

// maxClaimSeconds is 9999-12-31T23:59:59Z, the last second of a four-digit
// year: no genuine token time lies past it, and a larger one would wrap
// in the conversion to seconds.
const maxClaimSeconds = 253402300799

// claimDate decodes a NumericDate: a JSON number of seconds from 0 to
// maxClaimSeconds. RFC 7519 allows fractions; one is rounded against the
// token (up for nbf and iat, down for exp), so that it never widens the
// time the token is good for. raw is one JSON value, so ParseFloat takes
// exactly the numbers: a string ("1700003600"), which the library's
// NumericDate would read as a time, fails it.
func claimDate(raw []byte, up bool) (*jwt.NumericDate, error) {
	f, err := strconv.ParseFloat(string(raw), 64)
	if up {
		f = math.Ceil(f)
	} else {
		f = math.Floor(f)
	}
	if err != nil || f < 0 || f > maxClaimSeconds {
		return nil, errors.New("must be a number of seconds from 0 to the end of year 9999")
	}
	return jwt.NewNumericDate(time.Unix(int64(f), 0)), nil
}

// Validate runs after the library's checks (exp present, aud, iss, times).
func (c *claims) Validate() error {
	if c.Subject == "" {
		return errors.New("sub claim is required")
	}
	// exp 0 is in the past anyway; refused by rule, whatever the clock says.
	if c.ExpiresAt != nil && c.ExpiresAt.Unix() <= 0 {
		return errors.New("exp claim must be positive")
	}
	if c.Namespace.set && !ValidNamespace(c.Namespace.ns) {
		return errors.New("ns claim is not a valid namespace")
	}
	return nil
}

// readHeader are the header parameters relay reads, by their exact names.
var readHeader = []string{"alg", "typ", "kid", "crit"}

// checkHeader holds the JOSE header to strict rules before the library
// reads it into a map, where the last of duplicate names wins
// ({"alg":"none","alg":"HS256"}), null reads as a value and "ALG" beside
// "alg" goes unseen. So the header is one object with no duplicate name,
// no null and only valid UTF-8, and no name differs from one relay reads
// only in case; the others may be named as registered (x5t#S256) or as
// their issuer likes, as claims may.
func (a *Auth) checkHeader(raw string) error {
	seg, _, ok := strings.Cut(raw, ".")
	if !ok {
		return errors.New("the token has no header segment")
	}
	header, err := a.parser.DecodeSegment(seg)
	if err != nil {
		return errors.New("the header is not base64url")
	}
	if _, p := checkStrictRules(header, jsonRules{openKeys: true}); p != nil {
		return errors.New("header: " + p.Detail)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(header, &m); err != nil {
		return errors.New("the header must be a JSON object")
	}
	for name := range m {
		for _, known := range readHeader {
			if name != known && strings.EqualFold(name, known) {
				return fmt.Errorf("header parameter %q differs from %q only in case", truncate(name), known)
			}
		}
	}
	return nil
}
