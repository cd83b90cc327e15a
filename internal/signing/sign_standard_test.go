package signing_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// sigSecret is a whsec_ secret of 32 bytes starting at first.
func sigSecret(first byte) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = first + byte(i)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func TestSignStandardMatchesTheSpecificationExample(t *testing.T) {
	t.Parallel()
	// The example of the Standard Webhooks specification and its libraries'
	// test suites.
	h, err := signing.SignStandard("msg_p5jXN8AQM9LWM0D4loKWxJek", []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		[]byte(`{"test": 2432232314}`), time.Unix(1614265330, 0))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		"webhook-timestamp": "1614265330",
		"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	}
	for name, v := range want {
		if got := h.Get(name); got != v {
			t.Errorf("%s = %q, want %q", name, got, v)
		}
	}
	if len(h) != 3 {
		t.Errorf("got %d headers, want 3", len(h))
	}
}

func TestStandardRetriesShareIDButNotTimestampOrSignature(t *testing.T) {
	t.Parallel()
	secrets := []string{sigSecret(1)}
	body := []byte(sigBody)
	first, err := signing.SignStandard("msg_r-7f3a_billing", secrets, body, sigT0)
	if err != nil {
		t.Fatal(err)
	}
	second, err := signing.SignStandard("msg_r-7f3a_billing", secrets, body, sigT0.Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if first.Get("webhook-id") != second.Get("webhook-id") {
		t.Error("two attempts have different message ids")
	}
	for _, name := range []string{"webhook-timestamp", "webhook-signature"} {
		if first.Get(name) == second.Get(name) {
			t.Errorf("two attempts share %s", name)
		}
	}
	v := &hookverify.StandardVerifier{Secrets: secrets, Now: func() time.Time { return sigT0.Add(time.Minute) }}
	for i, h := range []http.Header{first, second} {
		if err := v.Verify(h, body); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
}

func TestSignStandardSignsWithEverySecretInOrder(t *testing.T) {
	t.Parallel()
	oldS, newS := sigSecret(1), sigSecret(100)
	h, err := signing.SignStandard("msg_1", []string{oldS, newS}, []byte(sigBody), sigT0)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(h.Get("webhook-signature"), " ")
	if len(parts) != 2 {
		t.Fatalf("webhook-signature %q: want two space-separated signatures", h.Get("webhook-signature"))
	}
	for i, secret := range []string{oldS, newS} {
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte("msg_1." + h.Get("webhook-timestamp") + "." + sigBody))
		if want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)); parts[i] != want {
			t.Errorf("signature %d = %s, want %s", i+1, parts[i], want)
		}
		// A receiver holding only this secret accepts the request.
		v := &hookverify.StandardVerifier{Secrets: []string{secret}, Now: func() time.Time { return sigT0 }}
		if err := v.Verify(h, []byte(sigBody)); err != nil {
			t.Errorf("receiver with secret %d only: %v", i+1, err)
		}
	}
}

func TestSignStandardRefusesBadIDsAndSecrets(t *testing.T) {
	t.Parallel()
	ok := []string{sigSecret(1)}
	for _, id := range []string{"", "msg.1", "msg 1", "msg\n1", "msg\x001", "méssage"} {
		if _, err := signing.SignStandard(id, ok, nil, sigT0); !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("id %q: got %v, want ErrInvalidSigner", id, err)
		}
	}
	short := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16))
	long := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))
	for name, secrets := range map[string][]string{
		"none":          nil,
		"no prefix":     {strings.TrimPrefix(sigSecret(1), "whsec_")},
		"not base64":    {"whsec_not*base64"},
		"16 bytes":      {short},
		"65 bytes":      {long},
		"second is bad": {sigSecret(1), "whsec_"},
	} {
		_, err := signing.SignStandard("msg_1", secrets, nil, sigT0)
		if !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("%s: got %v, want ErrInvalidSigner", name, err)
			continue
		}
		for _, s := range secrets {
			if len(s) > len("whsec_") && strings.Contains(err.Error(), s[len("whsec_"):]) {
				t.Errorf("%s: error %q carries the secret", name, err)
			}
		}
	}
	if _, err := signing.SignStandard("msg_1", ok, nil, time.Unix(-1, 0)); err == nil {
		t.Error("signed a negative timestamp")
	}
}

func TestGenerateStandardSecretIsUsable(t *testing.T) {
	t.Parallel()
	a, err := signing.GenerateStandardSecret(nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := signing.GenerateStandardSecret(nil)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Error("two generated secrets are equal")
	}
	if err := signing.CheckStandardSecret(a); err != nil {
		t.Errorf("generated secret refused: %v", err)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a, "whsec_"))
	if !strings.HasPrefix(a, "whsec_") || err != nil || len(key) != signing.StandardSecretSize {
		t.Errorf("generated secret is not whsec_ and %d base64 bytes", signing.StandardSecretSize)
	}
}
