package signing_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

func TestKeysHandlerServesTheListCacheable(t *testing.T) {
	t.Parallel()
	a := sigSigner(t, "relay-a", sigKey(1)).PublicKey().ValidUntil(sigT0)
	b := sigSigner(t, "relay-b", sigKey(2)).PublicKey().ValidFrom(sigT0.Add(-time.Hour))
	list, err := signing.NewKeyList(a, b)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(signing.KeysHandler(list))
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + signing.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "max-age=300" {
		t.Errorf("GET: %d, Content-Type %q, Cache-Control %q", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
	}
	want := map[string]any{"version": 1.0, "keys": []any{
		map[string]any{"keyId": "relay-a", "alg": "ed25519", "publicKey": a.PublicKey, "notAfterMs": float64(sigT0.UnixMilli())},
		map[string]any{"keyId": "relay-b", "alg": "ed25519", "publicKey": b.PublicKey, "notBeforeMs": float64(sigT0.Add(-time.Hour).UnixMilli())},
	}}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("served %s\nwant   %s", g, w)
	}

	resp, err = http.Head(srv.URL + signing.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ContentLength <= 0 || resp.Header.Get("Cache-Control") != "max-age=300" {
		t.Errorf("HEAD: %d, length %d", resp.StatusCode, resp.ContentLength)
	}

	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(method, srv.URL+signing.KeysPath, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q", method, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNewKeyListRefusesWhatReceiversWouldRefuse(t *testing.T) {
	t.Parallel()
	good := sigSigner(t, "relay-a", sigKey(1)).PublicKey()
	upper := good
	upper.PublicKey = strings.ToUpper(good.PublicKey)
	short := good
	short.PublicKey = good.PublicKey[:62]
	alg := good
	alg.Alg = "Ed25519"
	badID := good
	badID.KeyID = "relay/a"
	inverted := good.ValidFrom(sigT0).ValidUntil(sigT0.Add(-time.Millisecond))
	cases := map[string][]signing.PublicKey{
		"no keys":         nil,
		"duplicate id":    {good, good},
		"uppercase hex":   {upper},
		"short key":       {short},
		"alg":             {alg},
		"key id":          {badID},
		"inverted bounds": {inverted},
	}
	for name, keys := range cases {
		if _, err := signing.NewKeyList(keys...); !errors.Is(err, signing.ErrInvalidSigner) {
			t.Errorf("%s: got %v, want ErrInvalidSigner", name, err)
		}
	}
	if _, err := signing.NewPublicKey("relay-a", make([]byte, 31)); !errors.Is(err, signing.ErrInvalidSigner) {
		t.Errorf("31-byte public key: got %v", err)
	}
	if k, err := signing.NewPublicKey("relay-a", sigKey(1).Public().(ed25519.PublicKey)); err != nil || k != good {
		t.Errorf("NewPublicKey = %+v, %v; want %+v", k, err, good)
	}
}

// Rotation: publish the new key beside the old, switch the signer, and
// retire the old key only once nothing signed with it can still be valid.
func TestRotationPublishesNewKeyBesideOld(t *testing.T) {
	t.Parallel()
	ep := sigURL(t, "https://hooks.example.com/in")
	body := []byte(sigBody)
	oldS := sigSigner(t, "relay-2025-10", sigKey(1))
	newS := sigSigner(t, "relay-2025-11", sigKey(2))
	now := sigT0
	verifier := func(keys ...signing.PublicKey) *hookverify.MkitVerifier {
		return &hookverify.MkitVerifier{Keys: sigReceiverKeys(t, keys...), Audience: "https://hooks.example.com", Namespaces: []string{sigNS}, Now: func() time.Time { return now }}
	}

	// Step 1: only the old key is published and used.
	before, err := oldS.Sign(ep, sigNS, body, now)
	if err != nil {
		t.Fatal(err)
	}
	onlyOld := verifier(oldS.PublicKey())
	if err := onlyOld.Verify(before, "/in", body); err != nil {
		t.Fatalf("old key, old list: %v", err)
	}

	// Step 2: both are published; the signer switches to the new key. A
	// receiver with the new list accepts both an in-flight old signature and
	// the new ones; a receiver still caching the old list cannot yet, which
	// is why the new key is published a cache lifetime before it is used.
	now = now.Add(time.Minute)
	inFlight, err := oldS.Sign(ep, sigNS, body, now)
	if err != nil {
		t.Fatal(err)
	}
	after, err := newS.Sign(ep, sigNS, body, now)
	if err != nil {
		t.Fatal(err)
	}
	both := verifier(oldS.PublicKey().ValidUntil(now.Add(signing.MaxValidity)), newS.PublicKey())
	for name, h := range map[string]http.Header{"old key": inFlight, "new key": after} {
		if err := both.Verify(h, "/in", body); err != nil {
			t.Errorf("%s with both published: %v", name, err)
		}
	}
	if err := onlyOld.Verify(after, "/in", body); !errors.Is(err, hookverify.ErrUnknownKey) {
		t.Errorf("new key, stale list: got %v, want ErrUnknownKey", err)
	}

	// Step 3: past the old key's notAfter it is refused even while listed,
	// then dropped from the list.
	now = now.Add(signing.MaxValidity + time.Millisecond)
	late, err := oldS.Sign(ep, sigNS, body, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := both.Verify(late, "/in", body); !errors.Is(err, hookverify.ErrKeyInactive) {
		t.Errorf("old key after its notAfter: got %v, want ErrKeyInactive", err)
	}
	onlyNew := verifier(newS.PublicKey())
	if err := onlyNew.Verify(late, "/in", body); !errors.Is(err, hookverify.ErrUnknownKey) {
		t.Errorf("old key after retirement: got %v, want ErrUnknownKey", err)
	}
	fresh, err := newS.Sign(ep, sigNS, body, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := onlyNew.Verify(fresh, "/in", body); err != nil {
		t.Errorf("new key after retirement: %v", err)
	}
}
