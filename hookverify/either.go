package hookverify

import (
	"net/http"
	"strings"
)

// Scheme is the signing scheme a request's headers claim, as RequestScheme
// names it.
type Scheme string

// The schemes RequestScheme tells apart.
const (
	// SchemeMkitV2: X-Mkit-Hook-Version is "2", what relay signs.
	SchemeMkitV2 Scheme = "mkit-hook-v2"
	// SchemeMkit: X-Mkit-Hook-Version is present but not "2"; MkitVerifier
	// refuses it.
	SchemeMkit Scheme = "mkit-hook"
	// SchemeStandard: a webhook-signature header and no mkit-hook version.
	SchemeStandard Scheme = "standard-webhooks"
	// SchemeStandardV1a: the same, its first signature a v1a (Ed25519)
	// one. StandardVerifier checks both; the name tells them apart in logs.
	SchemeStandardV1a Scheme = "standard-webhooks-v1a"
	// SchemeUnsigned: neither.
	SchemeUnsigned Scheme = "unsigned"
)

// RequestScheme names the scheme h claims, for routing and for logs; the
// claim is not verified. An mkit-hook version header wins over a
// webhook-signature, so a request cannot pick the weaker check by carrying
// both.
func RequestScheme(h http.Header) Scheme {
	switch {
	case h.Get(HeaderMkitVersion) == MkitVersion:
		return SchemeMkitV2
	case h.Get(HeaderMkitVersion) != "":
		return SchemeMkit
	case strings.HasPrefix(h.Get(HeaderStandardSignature), "v1a,"):
		return SchemeStandardV1a
	case h.Get(HeaderStandardSignature) != "":
		return SchemeStandard
	}
	return SchemeUnsigned
}

// EitherVerifier verifies each request with the scheme its headers name
// (RequestScheme): mkit-hook with Mkit, Standard Webhooks with Standard. A
// receiver whose relay endpoints use both schemes serves them at one URL
// with it. A request of a scheme whose verifier is nil, or unsigned, is
// refused with ErrNoScheme; it is safe for concurrent use.
type EitherVerifier struct {
	Mkit     *MkitVerifier
	Standard *StandardVerifier
}

// VerifyRequest lets EitherVerifier serve as a Middleware's Verifier.
func (v *EitherVerifier) VerifyRequest(r *http.Request, body []byte) error {
	switch RequestScheme(r.Header) {
	case SchemeMkitV2, SchemeMkit:
		if v.Mkit != nil {
			return v.Mkit.VerifyRequest(r, body)
		}
	case SchemeStandard, SchemeStandardV1a:
		if v.Standard != nil {
			return v.Standard.VerifyRequest(r, body)
		}
	}
	return errorf(ErrNoScheme, "%s", RequestScheme(r.Header))
}

// Check validates the configuration without a request: at least one
// verifier, and each one set passes its own Check. Errors match ErrConfig.
func (v *EitherVerifier) Check() error {
	if v.Mkit == nil && v.Standard == nil {
		return errorf(ErrConfig, "no verifier: set Mkit, Standard or both")
	}
	if v.Mkit != nil {
		if err := v.Mkit.Check(); err != nil {
			return err
		}
	}
	if v.Standard != nil {
		return v.Standard.Check()
	}
	return nil
}
