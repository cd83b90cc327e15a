package verifycheck_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

func TestMkitAcceptsRelaysRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	b.now = b.now.Add(time.Second)
	if err := b.v.Verify(h, "/in", []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := b.v.Verify(h, "/in", []byte(body)); !errors.Is(err, hookverify.ErrReplay) {
		t.Errorf("same request again: got %v, want ErrReplay", err)
	}
}

// check asserts that Verify refuses h with want, and that the error text
// carries neither the signature nor the body.
func check(t *testing.T, v *hookverify.MkitVerifier, h http.Header, path, body string, want error) {
	t.Helper()
	err := v.Verify(h, path, []byte(body))
	if !errors.Is(err, want) {
		t.Errorf("got %v, want %v", err, want)
		return
	}
	if sig := h.Get("X-Mkit-Hook-Signature"); len(sig) > 16 && strings.Contains(err.Error(), sig[:16]) {
		t.Errorf("error %q carries the signature", err)
	}
	if len(body) > 8 && strings.Contains(err.Error(), body[:8]) {
		t.Errorf("error %q carries the body", err)
	}
}

func TestMkitRefusesEachMissingHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{
		"X-Mkit-Hook-Version", "X-Mkit-Hook-Key-Id", "X-Mkit-Hook-Namespace", "X-Mkit-Hook-Audience", "X-Mkit-Hook-Created-At",
		"X-Mkit-Hook-Expires-At", "X-Mkit-Hook-Nonce", "X-Mkit-Hook-Digest", "X-Mkit-Hook-Signature",
	} {
		t.Run(name, func(t *testing.T) {
			h := b.sign(t, body)
			h.Del(name)
			check(t, b.v, h, "/in", body, hookverify.ErrMissingHeader)
			h = b.sign(t, body)
			h.Set(name, "")
			check(t, b.v, h, "/in", body, hookverify.ErrMissingHeader)
			h = b.sign(t, body)
			h.Add(name, h.Get(name))
			check(t, b.v, h, "/in", body, hookverify.ErrMalformed)
		})
	}
}

func TestMkitRefusesOtherVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, version := range []string{"1", "3", "0", "02", "2 ", "v2", "2.0"} {
		f := b.fields(body)
		f.version = version
		check(t, b.v, forge(b.key, f), "/in", body, hookverify.ErrVersion)
	}
}

// A request exactly as relay signed mkit-hook v1, by a trusted key, is
// refused: v1 names no namespace. Relabelled as v2, its signature no longer
// verifies, since v2 signs another string.
func TestMkitRefusesV1SignedRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	v1 := forgeV1(b.key, b.fields(body))
	check(t, b.v, v1, "/in", body, hookverify.ErrVersion)
	if err := b.v.Verify(v1, "/in", []byte(body)); err == nil || !strings.Contains(err.Error(), "v1") {
		t.Errorf("refusal %v does not say v1 is not accepted", err)
	}
	relabelled := v1.Clone()
	relabelled.Set("X-Mkit-Hook-Version", "2")
	relabelled.Set("X-Mkit-Hook-Namespace", namespace)
	check(t, b.v, relabelled, "/in", body, hookverify.ErrBadSignature)
	anyNS := &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience, AcceptAnyNamespace: true, Now: b.v.Now}
	check(t, anyNS, v1, "/in", body, hookverify.ErrVersion)
}

func TestMkitRefusesUnknownOrMalformedKeyID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := b.fields(body)
	f.keyID = "relay-2"
	check(t, b.v, forge(seedKey(9), f), "/in", body, hookverify.ErrUnknownKey)
	for _, id := range []string{"relay/1", strings.Repeat("k", 65), "relay 1"} {
		f.keyID = id
		check(t, b.v, forge(b.key, f), "/in", body, hookverify.ErrMalformed)
	}
	// The right id with another key's signature.
	check(t, b.v, forge(seedKey(9), b.fields(body)), "/in", body, hookverify.ErrBadSignature)
}

func TestMkitRefusesKeyOutsideItsBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	notBefore, notAfter := t0.Add(-time.Hour), t0.Add(time.Hour)
	b.v.Keys = keyList(t, b.signer.PublicKey().ValidFrom(notBefore).ValidUntil(notAfter))
	for _, tc := range []struct {
		now  time.Time
		want error
	}{
		{notBefore.Add(-time.Millisecond), hookverify.ErrKeyInactive},
		{notBefore, nil},
		{notAfter, nil},
		{notAfter.Add(time.Millisecond), hookverify.ErrKeyInactive},
	} {
		b.now = tc.now
		h := b.sign(t, body)
		if err := b.v.Verify(h, "/in", []byte(body)); !errors.Is(err, tc.want) {
			t.Errorf("at %+dms from the bounds: got %v, want %v", tc.now.Sub(t0).Milliseconds(), err, tc.want)
		}
	}
}

func TestMkitRefusesSignatureCreatedOutsideKeyBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	notBefore, notAfter := t0, t0.Add(time.Hour)
	b.v.Keys = keyList(t, b.signer.PublicKey().ValidFrom(notBefore).ValidUntil(notAfter))
	// The receiver's clock is always within the key's bounds here, and the
	// request within its window and clock lead: only created-at can decide.
	for _, tc := range []struct {
		name             string
		created, verifAt time.Time
		want             error
	}{
		{"signed at retirement", notAfter, notAfter.Add(-10 * time.Second), nil},
		{"signed after retirement, receiver clock behind", notAfter.Add(time.Millisecond), notAfter.Add(-10 * time.Second), hookverify.ErrKeyInactive},
		{"signed at activation", notBefore, notBefore.Add(10 * time.Second), nil},
		{"signed before activation, receiver clock ahead", notBefore.Add(-time.Millisecond), notBefore.Add(10 * time.Second), hookverify.ErrKeyInactive},
	} {
		b.now = tc.created
		h := b.sign(t, body)
		b.now = tc.verifAt
		if err := b.v.Verify(h, "/in", []byte(body)); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestMkitCheckValidatesConfigurationWithoutARequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := func() *hookverify.MkitVerifier {
		return &hookverify.MkitVerifier{Keys: keyList(t, b.signer.PublicKey()), Audience: audience, Namespaces: []string{namespace}}
	}
	if err := good().Check(); err != nil {
		t.Fatalf("good configuration: %v", err)
	}
	twoKeys := good()
	twoKeys.Keys = keyList(t, b.signer.PublicKey(), signing.PublicKey{KeyID: "relay-2", Alg: "ed25519", PublicKey: strings.Repeat("ab", 32)})
	if err := twoKeys.Check(); err != nil {
		t.Errorf("two keys: %v", err)
	}
	for name, mutate := range map[string]func(v *hookverify.MkitVerifier){
		"no namespace":        func(v *hookverify.MkitVerifier) { v.Namespaces = nil },
		"empty namespace":     func(v *hookverify.MkitVerifier) { v.Namespaces = []string{""} },
		"namespace in caps":   func(v *hookverify.MkitVerifier) { v.Namespaces = []string{"Acme"} },
		"namespace too long":  func(v *hookverify.MkitVerifier) { v.Namespaces = []string{strings.Repeat("a", 64)} },
		"namespace leading -": func(v *hookverify.MkitVerifier) { v.Namespaces = []string{"-acme"} },
		"one bad namespace":   func(v *hookverify.MkitVerifier) { v.Namespaces = append(v.Namespaces, "a b") },
		"namespaces and any":  func(v *hookverify.MkitVerifier) { v.AcceptAnyNamespace = true },
		"no audience":         func(v *hookverify.MkitVerifier) { v.Audience = "" },
		"audience no scheme":  func(v *hookverify.MkitVerifier) { v.Audience = "hooks.example.com" },
		"audience ftp":        func(v *hookverify.MkitVerifier) { v.Audience = "ftp://hooks.example.com" },
		"audience trailing .": func(v *hookverify.MkitVerifier) { v.Audience = "https://hooks.example.com." },
		"audience port 0443":  func(v *hookverify.MkitVerifier) { v.Audience = "https://hooks.example.com:0443" },
		"audience IPv6 zeros": func(v *hookverify.MkitVerifier) { v.Audience = "https://[2001:0db8::1]" },
		"audience not a URL":  func(v *hookverify.MkitVerifier) { v.Audience = "https://hooks.example.com:x" },
		"no key list":         func(v *hookverify.MkitVerifier) { v.Keys = hookverify.KeyList{} },
		"empty key list":      func(v *hookverify.MkitVerifier) { v.Keys.Keys = []hookverify.PublicKey{} },
		"key upper hex":       func(v *hookverify.MkitVerifier) { v.Keys.Keys[0].PublicKey = strings.ToUpper(v.Keys.Keys[0].PublicKey) },
		"key other alg":       func(v *hookverify.MkitVerifier) { v.Keys.Keys[0].Alg = "rsa" },
		"key bad id":          func(v *hookverify.MkitVerifier) { v.Keys.Keys[0].KeyID = "relay/1" },
		"key id twice":        func(v *hookverify.MkitVerifier) { v.Keys.Keys = append(v.Keys.Keys, v.Keys.Keys[0]) },
		"key bounds inverted": func(v *hookverify.MkitVerifier) {
			before, after := int64(2), int64(1)
			v.Keys.Keys[0].NotBeforeMs, v.Keys.Keys[0].NotAfterMs = &before, &after
		},
	} {
		v := good()
		mutate(v)
		if err := v.Check(); !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: Check = %v, want ErrConfig", name, err)
		}
	}
}

func TestMkitRefusesOtherAudiences(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, aud := range []string{"https://other.example.com", "http://hooks.example.com", "https://hooks.example.com:8443", "https://HOOKS.example.com", "https://hooks.example.com/"} {
		f := b.fields(body)
		f.audience = aud
		check(t, b.v, forge(b.key, f), "/in", body, hookverify.ErrAudience)
	}
	// The receiver's configured origin is compared in canonical form.
	b.v.Audience = "HTTPS://Hooks.Example.com:443/some/path?x"
	if err := b.v.Verify(b.sign(t, body), "/in", []byte(body)); err != nil {
		t.Errorf("non-canonical configured audience: %v", err)
	}
	for _, bad := range []string{"", "hooks.example.com", "ftp://hooks.example.com", "https://hooks.example.com.", "https://hooks.example.com:0443"} {
		b.v.Audience = bad
		check(t, b.v, b.sign(t, body), "/in", body, hookverify.ErrConfig)
	}
}

func TestMkitWindowMustBePositiveAndAtMost300s(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.now.UnixMilli()
	for i, tc := range []struct {
		created, expires int64
		want             error
	}{
		{now, now + 300_000, nil},
		{now, now + 1, nil},
		{now - 1, now + 300_000, hookverify.ErrWindow},
		{now, now, hookverify.ErrWindow},
		{now, now - 1, hookverify.ErrWindow},
		{now - 10_000, now + 290_001, hookverify.ErrWindow},
	} {
		f := b.fields(body)
		f.created, f.expires = ms(tc.created), ms(tc.expires)
		f.nonce = strings.Repeat("0", 63) + ms(int64(i)) // distinct per case
		if err := b.v.Verify(forge(b.key, f), "/in", []byte(body)); !errors.Is(err, tc.want) {
			t.Errorf("created %+d, expires %+d: got %v, want %v", tc.created-now, tc.expires-now, err, tc.want)
		}
	}
}

func TestMkitAllowsSenderClockToLeadBy30sOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := b.now.UnixMilli()
	for i, tc := range []struct {
		lead int64
		want error
	}{
		{30_000, nil},
		{30_001, hookverify.ErrNotYetValid},
		{299_000, hookverify.ErrNotYetValid},
	} {
		f := b.fields(body)
		f.created, f.expires = ms(now+tc.lead), ms(now+tc.lead+300_000)
		f.nonce = strings.Repeat("0", 63) + ms(int64(i))
		if err := b.v.Verify(forge(b.key, f), "/in", []byte(body)); !errors.Is(err, tc.want) {
			t.Errorf("lead %dms: got %v, want %v", tc.lead, err, tc.want)
		}
	}
}

func TestMkitRefusesExpiredRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	expires := t0.Add(signing.MaxValidity)
	b.now = expires
	check(t, b.v, h, "/in", body, hookverify.ErrExpired)
	b.now = expires.Add(-time.Millisecond)
	if err := b.v.Verify(h, "/in", []byte(body)); err != nil {
		t.Errorf("one millisecond before expiry: %v", err)
	}
	b.now = expires.Add(time.Hour)
	check(t, b.v, h, "/in", body, hookverify.ErrExpired) // expired wins over replay
}

func TestMkitRefusesChangedBodyDigestOrPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	changed := []byte(body)
	changed[10] ^= 1
	check(t, b.v, h, "/in", string(changed), hookverify.ErrDigest)
	check(t, b.v, h, "/in", body+" ", hookverify.ErrDigest)

	d := h.Get("X-Mkit-Hook-Digest")
	last := d[len(d)-1]
	flipped := "0"
	if last == '0' {
		flipped = "1"
	}
	h.Set("X-Mkit-Hook-Digest", d[:len(d)-1]+flipped)
	check(t, b.v, h, "/in", body, hookverify.ErrDigest)

	// A digest that matches a changed body but was not signed.
	f := b.fields(body)
	forged := forge(b.key, f)
	other := b.fields(string(changed))
	forged.Set("X-Mkit-Hook-Digest", other.digest)
	check(t, b.v, forged, "/in", string(changed), hookverify.ErrBadSignature)

	check(t, b.v, b.sign(t, body), "/out", body, hookverify.ErrBadSignature)
	check(t, b.v, b.sign(t, body), "/in/", body, hookverify.ErrBadSignature)
}

func TestMkitRefusesNonCanonicalDecimals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	created := ms(b.now.UnixMilli())
	for _, bad := range []string{"+" + created, "-" + created, "0" + created, " " + created, created + " ", "1.7e12", "0x1", "99999999999999999999", "١٢"} {
		for _, which := range []string{"created", "expires"} {
			f := b.fields(body)
			if which == "created" {
				f.created = bad
			} else {
				f.expires = bad
			}
			h := forge(b.key, f)
			check(t, b.v, h, "/in", body, hookverify.ErrMalformed)
		}
	}
}

func TestMkitRefusesWrongHexCaseOrLength(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.fields(body)
	mutate := map[string]func(f *fields){
		"nonce upper":    func(f *fields) { f.nonce = strings.ToUpper(f.nonce) },
		"nonce short":    func(f *fields) { f.nonce = f.nonce[:62] },
		"nonce long":     func(f *fields) { f.nonce += "00" },
		"nonce not hex":  func(f *fields) { f.nonce = strings.Repeat("zz", 32) },
		"digest upper":   func(f *fields) { f.digest = "body:" + strings.ToUpper(good.digest[5:]) },
		"digest prefix":  func(f *fields) { f.digest = "BODY:" + good.digest[5:] },
		"digest bare":    func(f *fields) { f.digest = good.digest[5:] },
		"digest short":   func(f *fields) { f.digest = good.digest[:len(good.digest)-2] },
		"digest sha256:": func(f *fields) { f.digest = "sha256:" + good.digest[5:] },
	}
	for name, m := range mutate {
		f := good
		m(&f)
		t.Run(name, func(t *testing.T) { check(t, b.v, forge(b.key, f), "/in", body, hookverify.ErrMalformed) })
	}
	for name, m := range map[string]func(string) string{
		"signature upper": strings.ToUpper,
		"signature short": func(s string) string { return s[:126] },
		"signature long":  func(s string) string { return s + "00" },
		"signature b64":   func(s string) string { return s[:86] + "==" },
	} {
		h := b.sign(t, body)
		h.Set("X-Mkit-Hook-Signature", m(h.Get("X-Mkit-Hook-Signature")))
		t.Run(name, func(t *testing.T) { check(t, b.v, h, "/in", body, hookverify.ErrMalformed) })
	}
	h := b.sign(t, body)
	sig := []byte(h.Get("X-Mkit-Hook-Signature"))
	sig[0] = map[bool]byte{true: '1', false: '0'}[sig[0] == '0']
	h.Set("X-Mkit-Hook-Signature", string(sig))
	check(t, b.v, h, "/in", body, hookverify.ErrBadSignature)
}

func TestMkitForgedRequestDoesNotBurnItsNonce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	forged := h.Clone()
	forged.Set("X-Mkit-Hook-Signature", strings.Repeat("ab", 64))
	check(t, b.v, forged, "/in", body, hookverify.ErrBadSignature)
	if err := b.v.Verify(h, "/in", []byte(body)); err != nil {
		t.Errorf("genuine request after a forgery with its nonce: %v", err)
	}
}

func TestMkitVerifyRequestUsesTheRequestPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	r, err := http.NewRequest(http.MethodPost, "https://hooks.example.com/in?unsigned=1", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header = h
	if err := b.v.VerifyRequest(r, []byte(body)); err != nil {
		t.Error(err)
	}
}

func TestMkitRefusesBadKeyListEntryAsConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.v.Keys.Keys[0].PublicKey = strings.ToUpper(b.v.Keys.Keys[0].PublicKey)
	check(t, b.v, b.sign(t, body), "/in", body, hookverify.ErrConfig)
}

func TestMkitVerifiersKeepTheirOwnNonces(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.sign(t, body)
	other := &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience, Namespaces: b.v.Namespaces, Now: b.v.Now}
	for _, v := range []*hookverify.MkitVerifier{b.v, other} {
		if err := v.Verify(h, "/in", []byte(body)); err != nil {
			t.Errorf("first time at this verifier: %v", err)
		}
	}
	shared := hookverify.NewNonceCache(0, b.v.Now)
	a := &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience, Namespaces: b.v.Namespaces, Now: b.v.Now, Nonces: shared}
	c := &hookverify.MkitVerifier{Keys: b.v.Keys, Audience: audience, Namespaces: b.v.Namespaces, Now: b.v.Now, Nonces: shared}
	if err := a.Verify(h, "/in", []byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(h, "/in", []byte(body)); !errors.Is(err, hookverify.ErrReplay) {
		t.Errorf("second verifier sharing the cache: got %v, want ErrReplay", err)
	}
}

func TestMkitEmptyPathIsTheRoot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, _ := url.Parse("https://hooks.example.com")
	h, err := b.signer.Sign(u, namespace, []byte(body), b.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.v.Verify(h, "", []byte(body)); err != nil {
		t.Errorf("empty path: %v", err)
	}
}
