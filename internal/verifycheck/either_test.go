package verifycheck_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

func TestRequestSchemeNamesWhatTheHeadersClaim(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		h    http.Header
		want hookverify.Scheme
	}{
		{http.Header{"X-Mkit-Hook-Version": {"2"}}, hookverify.SchemeMkitV2},
		{http.Header{"X-Mkit-Hook-Version": {"1"}}, hookverify.SchemeMkit},
		{http.Header{"Webhook-Signature": {"v1,x"}}, hookverify.SchemeStandard},
		{http.Header{"Webhook-Signature": {"v1a,x v1a,y"}}, hookverify.SchemeStandardV1a},
		// Only a v1a first entry names v1a: "v1ax" is not one.
		{http.Header{"Webhook-Signature": {"v1ax,x"}}, hookverify.SchemeStandard},
		{http.Header{"Webhook-Id": {"msg_1"}}, hookverify.SchemeUnsigned},
		// The mkit-hook claim wins: carrying both headers does not choose
		// the check.
		{http.Header{"X-Mkit-Hook-Version": {"2"}, "Webhook-Signature": {"v1,x"}}, hookverify.SchemeMkitV2},
	} {
		h, want := c.h, c.want
		if got := hookverify.RequestScheme(h); got != want {
			t.Errorf("%v: %s, want %s", h, got, want)
		}
	}
}

// One verifier for both schemes: each request is checked by the verifier
// of its scheme, and a scheme without one is refused.
func TestEitherVerifierChecksEachRequestWithItsScheme(t *testing.T) {
	t.Parallel()
	b := setup(t)
	std := standardVerifier(&b.now, secret(1))
	mkitReq := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
		for k, v := range b.sign(t, body) {
			r.Header[k] = v
		}
		return r
	}
	stdReq := func(secrets ...string) *http.Request {
		h, err := signing.SignStandard("msg_1", secrets, []byte(body), b.now)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
		for k, v := range h {
			r.Header[k] = v
		}
		return r
	}
	both := &hookverify.EitherVerifier{Mkit: b.v, Standard: std}
	if err := both.Check(); err != nil {
		t.Fatal(err)
	}
	if err := both.VerifyRequest(mkitReq(), []byte(body)); err != nil {
		t.Errorf("mkit-hook: %v", err)
	}
	if err := both.VerifyRequest(stdReq(secret(1)), []byte(body)); err != nil {
		t.Errorf("standard: %v", err)
	}
	if err := both.VerifyRequest(stdReq(secret(2)), []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("standard, another secret: %v, want ErrBadSignature", err)
	}
	// A Standard Webhooks signature does not stand in for a forged
	// mkit-hook request.
	forged := stdReq(secret(1))
	forged.Header.Set(hookverify.HeaderMkitVersion, "2")
	if err := both.VerifyRequest(forged, []byte(body)); !errors.Is(err, hookverify.ErrMissingHeader) {
		t.Errorf("standard signature under an mkit-hook claim: %v, want the mkit-hook check", err)
	}
	unsigned := httptest.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	if err := both.VerifyRequest(unsigned, []byte(body)); !errors.Is(err, hookverify.ErrNoScheme) {
		t.Errorf("unsigned: %v, want ErrNoScheme", err)
	}
	mkitOnly := &hookverify.EitherVerifier{Mkit: b.v}
	if err := mkitOnly.VerifyRequest(stdReq(secret(1)), []byte(body)); !errors.Is(err, hookverify.ErrNoScheme) {
		t.Errorf("standard without its verifier: %v, want ErrNoScheme", err)
	}
	stdOnly := &hookverify.EitherVerifier{Standard: std}
	if err := stdOnly.VerifyRequest(mkitReq(), []byte(body)); !errors.Is(err, hookverify.ErrNoScheme) {
		t.Errorf("mkit-hook without its verifier: %v, want ErrNoScheme", err)
	}
	// A v1a request goes to the Standard verifier too.
	std.PublicKeys = []string{v1aPublic(1)}
	h, err := signing.SignStandardV1a("msg_1", []string{v1aPrivate(1)}, []byte(body), b.now)
	if err != nil {
		t.Fatal(err)
	}
	v1a := httptest.NewRequest(http.MethodPost, endpoint, strings.NewReader(body))
	for k, v := range h {
		v1a.Header[k] = v
	}
	if got := hookverify.RequestScheme(v1a.Header); got != hookverify.SchemeStandardV1a {
		t.Fatalf("v1a request named %s", got)
	}
	if err := both.VerifyRequest(v1a, []byte(body)); err != nil {
		t.Errorf("standard v1a: %v", err)
	}
}

func TestEitherVerifierCheckRefusesWhatCannotVerify(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, v := range map[string]*hookverify.EitherVerifier{
		"neither":          {},
		"a bad secret":     {Mkit: b.v, Standard: &hookverify.StandardVerifier{Secrets: []string{"whsec_typo"}}},
		"no namespace":     {Mkit: &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience}},
		"a bad audience":   {Mkit: &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: "hooks.example.com", Namespaces: []string{"acme"}}},
		"standard no keys": {Standard: &hookverify.StandardVerifier{}},
	} {
		if err := v.Check(); !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
}
