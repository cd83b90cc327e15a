package verifycheck_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

func secret(first byte) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = first + byte(i)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func signStandard(t *testing.T, secrets []string, body string, at time.Time) http.Header {
	t.Helper()
	h, err := signing.SignStandard("msg_r-1_billing", secrets, []byte(body), at)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func standardVerifier(now *time.Time, secrets ...string) *hookverify.StandardVerifier {
	return &hookverify.StandardVerifier{Secrets: secrets, Now: func() time.Time { return *now }}
}

func TestStandardToleranceBothWays(t *testing.T) {
	t.Parallel()
	s := secret(1)
	h := signStandard(t, []string{s}, body, t0)
	for _, tc := range []struct {
		offset time.Duration
		want   error
	}{
		{0, nil},
		{5 * time.Minute, nil},
		{-5 * time.Minute, nil},
		{5*time.Minute + time.Second, hookverify.ErrExpired},
		{-5*time.Minute - time.Second, hookverify.ErrNotYetValid},
	} {
		now := t0.Add(tc.offset)
		if err := standardVerifier(&now, s).Verify(h, []byte(body)); !errors.Is(err, tc.want) {
			t.Errorf("receiver clock %+v: got %v, want %v", tc.offset, err, tc.want)
		}
	}
	now := t0.Add(time.Minute + time.Second)
	v := standardVerifier(&now, s)
	v.Tolerance = time.Minute
	if err := v.Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrExpired) {
		t.Errorf("1 min tolerance, 61 s old: got %v", err)
	}
}

func TestStandardRefusesWrongSecretOrChangedRequest(t *testing.T) {
	t.Parallel()
	s := secret(1)
	now := t0
	v := standardVerifier(&now, s)
	if err := standardVerifier(&now, secret(2)).Verify(signStandard(t, []string{s}, body, t0), []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("wrong secret: got %v", err)
	}
	changed := []byte(body)
	changed[3] ^= 1
	if err := v.Verify(signStandard(t, []string{s}, body, t0), changed); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("body changed: got %v", err)
	}
	for name, edit := range map[string]func(h http.Header){
		"id":        func(h http.Header) { h.Set("webhook-id", "msg_r-2_billing") },
		"timestamp": func(h http.Header) { h.Set("webhook-timestamp", "1764460801") },
		"v2 only": func(h http.Header) {
			h.Set("webhook-signature", strings.Replace(h.Get("webhook-signature"), "v1,", "v2,", 1))
		},
		"v1a": func(h http.Header) {
			h.Set("webhook-signature", strings.Replace(h.Get("webhook-signature"), "v1,", "v1a,", 1))
		},
		"truncated": func(h http.Header) { sig := h.Get("webhook-signature"); h.Set("webhook-signature", sig[:len(sig)-4]) },
		"garbage":   func(h http.Header) { h.Set("webhook-signature", "v1,!!!! v1 ,") },
	} {
		h := signStandard(t, []string{s}, body, t0)
		edit(h)
		err := v.Verify(h, []byte(body))
		if !errors.Is(err, hookverify.ErrBadSignature) {
			t.Errorf("%s: got %v, want ErrBadSignature", name, err)
		} else if strings.Contains(err.Error(), "v1,") || strings.Contains(err.Error(), body[:10]) {
			t.Errorf("%s: error %q carries the signature or body", name, err)
		}
	}
	// An unknown version beside a good v1 does not hide it.
	h := signStandard(t, []string{s}, body, t0)
	h.Set("webhook-signature", "v1a,AAAA "+h.Get("webhook-signature")+" v2,BBBB")
	if err := v.Verify(h, []byte(body)); err != nil {
		t.Errorf("v1 among other versions: %v", err)
	}
}

func TestStandardRotationEitherSecretVerifies(t *testing.T) {
	t.Parallel()
	oldS, newS := secret(1), secret(100)
	now := t0
	both := signStandard(t, []string{oldS, newS}, body, t0)
	for name, v := range map[string]*hookverify.StandardVerifier{
		"receiver on old":  standardVerifier(&now, oldS),
		"receiver on new":  standardVerifier(&now, newS),
		"receiver on both": standardVerifier(&now, oldS, newS),
	} {
		if err := v.Verify(both, []byte(body)); err != nil {
			t.Errorf("sender on both, %s: %v", name, err)
		}
	}
	onlyNew := signStandard(t, []string{newS}, body, t0)
	if err := standardVerifier(&now, oldS, newS).Verify(onlyNew, []byte(body)); err != nil {
		t.Errorf("sender on new, receiver on both: %v", err)
	}
	if err := standardVerifier(&now, oldS).Verify(onlyNew, []byte(body)); !errors.Is(err, hookverify.ErrBadSignature) {
		t.Errorf("sender on new, receiver on old: got %v", err)
	}
}

func TestStandardRefusesMissingOrMalformedHeaders(t *testing.T) {
	t.Parallel()
	s := secret(1)
	now := t0
	v := standardVerifier(&now, s)
	for _, name := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		h := signStandard(t, []string{s}, body, t0)
		h.Del(name)
		if err := v.Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrMissingHeader) {
			t.Errorf("%s missing: got %v", name, err)
		}
		h = signStandard(t, []string{s}, body, t0)
		h.Add(name, h.Get(name))
		if err := v.Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrMalformed) {
			t.Errorf("%s repeated: got %v", name, err)
		}
	}
	for _, ts := range []string{"+1764460800", "01764460800", "1764460800.0", "-1", "1764460800000000000000"} {
		h := signStandard(t, []string{s}, body, t0)
		h.Set("webhook-timestamp", ts)
		if err := v.Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrMalformed) {
			t.Errorf("timestamp %q: got %v", ts, err)
		}
	}
	for _, id := range []string{"msg.1", "msg 1", "mség"} {
		h := signStandard(t, []string{s}, body, t0)
		h.Set("webhook-id", id)
		if err := v.Verify(h, []byte(body)); !errors.Is(err, hookverify.ErrMalformed) {
			t.Errorf("id %q: got %v", id, err)
		}
	}
}

func TestStandardMisconfigurationIsConfigError(t *testing.T) {
	t.Parallel()
	now := t0
	h := signStandard(t, []string{secret(1)}, body, t0)
	for name, v := range map[string]*hookverify.StandardVerifier{
		"no secrets":     standardVerifier(&now),
		"no prefix":      standardVerifier(&now, strings.TrimPrefix(secret(1), "whsec_")),
		"short":          standardVerifier(&now, "whsec_"+base64.StdEncoding.EncodeToString(make([]byte, 8))),
		"not base64":     standardVerifier(&now, "whsec_%%%"),
		"neg. tolerance": {Secrets: []string{secret(1)}, Tolerance: -time.Second, Now: func() time.Time { return now }},
	} {
		err := v.Verify(h, []byte(body))
		if !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

func TestStandardCheckValidatesConfigurationWithoutARequest(t *testing.T) {
	t.Parallel()
	sized := func(n int) string { return "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, n)) }
	for name, v := range map[string]*hookverify.StandardVerifier{
		"one secret":         {Secrets: []string{secret(1)}},
		"rotation":           {Secrets: []string{secret(1), secret(2)}},
		"24-byte secret":     {Secrets: []string{sized(24)}},
		"64-byte secret":     {Secrets: []string{sized(64)}},
		"explicit tolerance": {Secrets: []string{secret(1)}, Tolerance: time.Minute},
	} {
		if err := v.Check(); err != nil {
			t.Errorf("%s: Check = %v, want nil", name, err)
		}
	}
	for name, v := range map[string]*hookverify.StandardVerifier{
		"no secrets":          {},
		"empty secret list":   {Secrets: []string{}},
		"no prefix":           {Secrets: []string{strings.TrimPrefix(secret(1), "whsec_")}},
		"23-byte secret":      {Secrets: []string{sized(23)}},
		"65-byte secret":      {Secrets: []string{sized(65)}},
		"not base64":          {Secrets: []string{"whsec_%%%"}},
		"one bad in rotation": {Secrets: []string{secret(1), "whsec_"}},
		"negative tolerance":  {Secrets: []string{secret(1)}, Tolerance: -time.Second},
	} {
		if err := v.Check(); !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: Check = %v, want ErrConfig", name, err)
		}
	}
}
