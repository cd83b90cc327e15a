package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/hookrelay/relay/internal/testlog"
)

const receiveSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// relay receive verifies both schemes, prints a line per webhook, and
// refuses (401, so relay retries) what does not verify, mkit-hook webhooks
// of a namespace it was not given included.
func TestReceiveVerifiesBothSchemesAndRefusesTheRest(t *testing.T) {
	signer, err := signing.NewMkitSigner("relay-1", ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeKeyList(t, signer)

	var out testlog.Buffer
	srv := httptest.NewUnstartedServer(nil)
	cfg, err := parseReceive([]string{"-keys", keyFile, "-namespace", "acme", "-secret", receiveSecret, "-audience", "http://" + srv.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := cfg.handler(context.Background(), &out)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = h
	srv.Start()
	t.Cleanup(srv.Close)

	channel, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	sender := &outbound.Sender{Channel: channel, Mkit: signer}
	u, _ := url.Parse(srv.URL + "/hooks")
	msg := outbound.Message{ID: "msg_1", Body: []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-7f3a","namespace":"acme"}}`)}
	ctx := context.Background()
	for _, scheme := range []signing.Scheme{signing.SchemeMkit, signing.SchemeStandard} {
		if err := sender.Send(ctx, outbound.Target{URL: u, Scheme: scheme, Namespace: "acme", Secrets: []string{receiveSecret}}, msg); err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
	}
	// Signed by relay's key for another namespace.
	forged := outbound.Message{ID: "msg_2", Body: []byte(`{"type":"outcome.expired","data":{"reservation_id":"r-7f3a","namespace":"attacker-a"}}`)}
	err = sender.Send(ctx, outbound.Target{URL: u, Scheme: signing.SchemeMkit, Namespace: "attacker-a"}, forged)
	if herr, ok := errors.AsType[*outbound.Error](err); !ok || herr.Status != 401 {
		t.Fatalf("another namespace's webhook: %v, want a 401", err)
	}
	// Signed with a secret the receiver does not hold.
	other := "whsec_" + strings.Repeat("A", 32)
	err = sender.Send(ctx, outbound.Target{URL: u, Scheme: signing.SchemeStandard, Secrets: []string{other}}, msg)
	var herr *outbound.Error
	if !errors.As(err, &herr) || herr.Status != 401 {
		t.Fatalf("wrongly signed webhook: %v, want a 401", err)
	}

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		`verified mkit-hook-v2 "/hooks" "outcome.expired" namespace="acme" reservation_id="r-7f3a"`,
		`verified standard-webhooks "/hooks" "outcome.expired" namespace="acme" reservation_id="r-7f3a"`,
		`REJECTED mkit-hook-v2 "/hooks": hookverify: namespace not accepted: attacker-a is not a namespace this receiver takes`,
		`REJECTED standard-webhooks "/hooks": `,
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out.String())
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want it to start %q", i, lines[i], want[i])
		}
	}
	if strings.Contains(out.String(), receiveSecret) || strings.Contains(out.String(), other) {
		t.Error("the output shows a secret")
	}
}

// A request whose path would print as a second, forged line is quoted.
func TestReceivePrintsOneLinePerRequest(t *testing.T) {
	var out testlog.Buffer
	cfg, err := parseReceive([]string{"-secret", receiveSecret})
	if err != nil {
		t.Fatal(err)
	}
	h, err := cfg.handler(context.Background(), &out)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	forged := "/x%0Averified%20standard-webhooks%20/hooks%1b[2K"
	h.ServeHTTP(rec, httptest.NewRequest("POST", forged, strings.NewReader("{}")))
	if rec.Code != 401 {
		t.Fatalf("unsigned request answered %d", rec.Code)
	}
	if got := strings.Count(out.String(), "\n"); got != 1 || strings.Contains(out.String(), "\x1b") {
		t.Fatalf("output %q, want one quoted line", out.String())
	}
}

func TestReceiveRefusesConfigurationsThatCannotVerify(t *testing.T) {
	for name, args := range map[string][]string{
		"no key list or secret":        nil,
		"key list without a namespace": {"-keys", "keys.json"},
		"namespace and any":            {"-keys", "keys.json", "-namespace", "acme", "-any-namespace"},
		"namespace without a key list": {"-secret", receiveSecret, "-namespace", "acme"},
		"any without a key list":       {"-secret", receiveSecret, "-any-namespace"},
		"all interfaces":               {"-secret", receiveSecret, "-listen", "0.0.0.0:9000"},
		"no host":                      {"-secret", receiveSecret, "-listen", ":9000"},
	} {
		if _, err := parseReceive(args); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg, err := parseReceive([]string{"-secret", "whsec_typo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.handler(context.Background(), io.Discard); err == nil {
		t.Error("a malformed secret was accepted at start")
	}
	keyFile := writeKeyList(t)
	cfg, err = parseReceive([]string{"-keys", keyFile, "-namespace", "Acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.handler(context.Background(), io.Discard); err == nil {
		t.Error("a malformed namespace was accepted at start")
	}
	for _, args := range [][]string{{"-keys", keyFile, "-any-namespace"}, {"-keys", keyFile, "-namespace", "a", "-namespace", "b"}} {
		cfg, err := parseReceive(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if _, err := cfg.handler(context.Background(), io.Discard); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	// A key list over plain http from another host is refused at start
	// (hookverify's TestCheckKeyListURL holds the whole rule).
	cfg, err = parseReceive([]string{"-keys", "http://relay.example.com/.well-known/mkit-hook-keys.json", "-namespace", "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.handler(context.Background(), io.Discard); !errors.Is(err, hookverify.ErrKeyListSource) {
		t.Errorf("a key list over plain http from another host: %v, want ErrKeyListSource", err)
	}
}

// writeKeyList writes the key list of signers (one made up when none) to a
// file, as relay serves it.
func writeKeyList(t *testing.T, signers ...*signing.MkitSigner) string {
	t.Helper()
	if len(signers) == 0 {
		s, err := signing.NewMkitSigner("relay-1", ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32)))
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, s)
	}
	var keys []signing.PublicKey
	for _, s := range signers {
		keys = append(keys, s.PublicKey())
	}
	list, err := signing.NewKeyList(keys...)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(list)
	keyFile := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keyFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return keyFile
}
