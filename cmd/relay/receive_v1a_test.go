package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"io"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/hookrelay/relay/internal/testlog"
)

// v1aKeyPair is a whsk_ private key made from seed, as relay keeps it, and
// the whpk_ public key the API shows for it.
func v1aKeyPair(t *testing.T, seed byte) (private, public string) {
	t.Helper()
	private, err := signing.GenerateStandardKey(bytes.NewReader(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	public, err = signing.StandardPublicKey(private)
	if err != nil {
		t.Fatal(err)
	}
	return private, public
}

// startReceive serves the receiver args configure and returns its URL and
// what it prints.
func startReceive(t *testing.T, args ...string) (*url.URL, *testlog.Buffer) {
	t.Helper()
	cfg, err := parseReceive(args)
	if err != nil {
		t.Fatal(err)
	}
	out := &testlog.Buffer{}
	h, err := cfg.handler(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/hooks")
	return u, out
}

func loopbackSender(t *testing.T) *outbound.Sender {
	t.Helper()
	channel, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	return &outbound.Sender{Channel: channel}
}

// relay receive -public-key verifies what relay signs for a v1a endpoint,
// with either key during a rotation, and refuses (401, so relay retries) a
// webhook signed by any other key, and a v1 one: it holds no secret.
func TestReceiveVerifiesV1aWithThePublicKeyAndRefusesTheRest(t *testing.T) {
	current, currentPub := v1aKeyPair(t, 1)
	previous, previousPub := v1aKeyPair(t, 2)
	stranger, _ := v1aKeyPair(t, 3)
	u, out := startReceive(t, "-public-key", currentPub, "-public-key", previousPub)

	sender := loopbackSender(t)
	msg := outbound.Message{ID: "msg_1", Body: []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-7f3a","namespace":"acme"}}`)}
	ctx := context.Background()
	for _, keys := range [][]string{{current}, {previous}, {current, previous}} {
		if err := sender.Send(ctx, outbound.Target{URL: u, Scheme: signing.SchemeStandardV1a, PrivateKeys: keys}, msg); err != nil {
			t.Fatalf("signed by %d of the endpoint's keys: %v", len(keys), err)
		}
	}
	refused := map[string]outbound.Target{
		"another key":     {URL: u, Scheme: signing.SchemeStandardV1a, PrivateKeys: []string{stranger}},
		"a v1 signature":  {URL: u, Scheme: signing.SchemeStandard, Secrets: []string{receiveSecret}},
		"an mkit-hook v2": {URL: u, Scheme: signing.SchemeMkit, Namespace: "acme"},
	}
	mkit, err := signing.NewMkitSigner("relay-1", ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	sender.Mkit = mkit
	for name, target := range refused {
		err := sender.Send(ctx, target, msg)
		if herr, ok := errors.AsType[*outbound.Error](err); !ok || herr.Status != 401 {
			t.Errorf("%s: %v, want a 401", name, err)
		}
	}

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	verified := `verified standard-webhooks-v1a "/hooks" "outcome.expired" namespace="acme" reservation_id="r-7f3a"`
	if len(lines) != 6 || slices.ContainsFunc(lines[:3], func(l string) bool { return l != verified }) {
		t.Fatalf("output:\n%s", out.String())
	}
	for _, l := range lines[3:] {
		if !strings.HasPrefix(l, "REJECTED ") {
			t.Errorf("line %q, want a rejection", l)
		}
	}
	if !strings.Contains(out.String(), "(see -keys, -secret and -public-key)") {
		t.Errorf("the mkit-hook rejection should name the flags that add a scheme:\n%s", out.String())
	}
}

// -secret and -public-key together verify both Standard Webhooks versions
// at one URL, as an endpoint moving from one to the other needs.
func TestReceiveVerifiesV1AndV1aTogether(t *testing.T) {
	private, public := v1aKeyPair(t, 1)
	u, out := startReceive(t, "-secret", receiveSecret, "-public-key", public)
	sender := loopbackSender(t)
	msg := outbound.Message{ID: "msg_1", Body: []byte(`{"type":"outcome.expired","data":{"namespace":"acme"}}`)}
	for _, target := range []outbound.Target{
		{URL: u, Scheme: signing.SchemeStandard, Secrets: []string{receiveSecret}},
		{URL: u, Scheme: signing.SchemeStandardV1a, PrivateKeys: []string{private}},
	} {
		if err := sender.Send(context.Background(), target, msg); err != nil {
			t.Fatalf("%s: %v", target.Scheme, err)
		}
	}
	if strings.Count(out.String(), "verified standard-webhooks ") != 1 || strings.Count(out.String(), "verified standard-webhooks-v1a ") != 1 {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestReceivePublicKeyFlag(t *testing.T) {
	_, a := v1aKeyPair(t, 1)
	_, b := v1aKeyPair(t, 2)
	_, c := v1aKeyPair(t, 3)
	t.Setenv("RELAY_RECEIVE_PUBLIC_KEYS", " "+c+" ")
	cfg, err := parseReceive([]string{"-public-key", a, "-public-key", b})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{a, b, c}; !slices.Equal(cfg.publicKeys, want) {
		t.Errorf("public keys %q, want the flags' then the environment's, %q", cfg.publicKeys, want)
	}
	if cfg.audience == "" {
		t.Error("no audience")
	}
	if _, err := cfg.handler(context.Background(), io.Discard); err != nil {
		t.Errorf("three public keys: %v", err)
	}

	t.Setenv("RELAY_RECEIVE_PUBLIC_KEYS", "")
	for name, args := range map[string][]string{
		"public key and a namespace":      {"-public-key", a, "-namespace", "acme"},
		"public key and any namespace":    {"-public-key", a, "-any-namespace"},
		"public key on all interfaces":    {"-public-key", a, "-listen", "0.0.0.0:9000"},
		"public key flag without a key":   {"-public-key"},
		"public key and a stray argument": {"-public-key", a, "extra"},
	} {
		if _, err := parseReceive(args); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseReceive(nil); err == nil || !strings.Contains(err.Error(), "-public-key") {
		t.Errorf("no verifier at all: %v, want an error that names -public-key", err)
	}
}

// A malformed public key stops the receiver at start, with an error that
// says which key and what is wrong, and does not repeat the key.
func TestReceiveRefusesAMalformedPublicKeyAtStart(t *testing.T) {
	private, public := v1aKeyPair(t, 1)
	for name, key := range map[string]string{
		"the private key": private,
		"no prefix":       strings.TrimPrefix(public, "whpk_"),
		"a secret":        receiveSecret,
		"short":           public[:len(public)-4],
		"not base64":      "whpk_" + strings.Repeat("!", 44),
	} {
		cfg, err := parseReceive([]string{"-public-key", public, "-public-key", key})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = cfg.handler(context.Background(), io.Discard)
		if !errors.Is(err, hookverify.ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
			continue
		}
		if !strings.Contains(err.Error(), "public key 2 ") {
			t.Errorf("%s: %q should name the second public key", name, err)
		}
		for _, k := range []string{key, strings.TrimPrefix(key, "whpk_"), public} {
			if len(k) > 8 && strings.Contains(err.Error(), strings.TrimSpace(k)) {
				t.Errorf("%s: %q repeats a key", name, err)
			}
		}
	}
}
