package verifycheck_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/signing"
)

// The Standard Webhooks library for Node (npm standardwebhooks,
// pinned in testdata/node/package-lock.json) checks relay's signatures.
// Install it with `npm ci --prefix internal/verifycheck/testdata/node`.
const nodeDir = "testdata/node"

// needNode skips without node or the installed package, and fails instead
// under RELAY_TEST_REQUIRE_REAL=1.
func needNode(t *testing.T) {
	t.Helper()
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not on PATH"
	} else if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "standardwebhooks", "package.json")); err != nil {
		missing = "standardwebhooks is not installed (npm ci --prefix internal/verifycheck/testdata/node)"
	}
	if missing == "" {
		return
	}
	if os.Getenv("RELAY_TEST_REQUIRE_REAL") == "1" {
		t.Fatalf("%s, and RELAY_TEST_REQUIRE_REAL=1", missing)
	}
	t.Skip(missing)
}

// node runs verify.js in mode with input on stdin; it returns stdout and
// whether the library accepted (exit 0) or rejected (exit 1). Anything else
// is a broken check and fails the test.
func node(t *testing.T, mode string, input any) (string, bool) {
	t.Helper()
	return runNode(t, input, "verify.js", mode)
}

// runNode runs a script of nodeDir with input as JSON on stdin; it returns
// stdout and whether the script accepted (exit 0) or rejected (exit 1,
// stderr starting "rejected:"). Anything else fails the test.
func runNode(t *testing.T, input any, script string, args ...string) (string, bool) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{script}, args...)...)
	cmd.Dir = nodeDir
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok && exit.ExitCode() == 1 && strings.HasPrefix(stderr.String(), "rejected:") {
		return stdout.String(), false
	}
	if err != nil {
		t.Fatalf("node %s %s: %v\n%s", script, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), true
}

type nodeVerify struct {
	Secret     string            `json:"secret"`
	Headers    map[string]string `json:"headers"`
	BodyBase64 string            `json:"bodyBase64"`
}

func nodeHeaders(t *testing.T, msgID string, secrets []string, body []byte, at time.Time) map[string]string {
	t.Helper()
	return webhookHeaders(t)(signing.SignStandard(msgID, secrets, body, at))
}

// webhookHeaders takes a signer's answer to the three Standard Webhooks
// headers the Node scripts read.
func webhookHeaders(t *testing.T) func(http.Header, error) map[string]string {
	return func(h http.Header, err error) map[string]string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return map[string]string{
			"webhook-id":        h.Get("webhook-id"),
			"webhook-timestamp": h.Get("webhook-timestamp"),
			"webhook-signature": h.Get("webhook-signature"),
		}
	}
}

func TestNodeStandardWebhooksAcceptsRelaysSignature(t *testing.T) {
	t.Parallel()
	needNode(t)
	s, other := secret(1), secret(100)
	payload := []byte(body)
	b64 := base64.StdEncoding.EncodeToString
	// The library checks the timestamp against its own wall clock.
	headers := nodeHeaders(t, "msg_r-7f3a_billing", []string{s}, payload, time.Now())

	if _, ok := node(t, "verify", nodeVerify{s, headers, b64(payload)}); !ok {
		t.Error("the Node library rejects relay's signature")
	}
	tampered := bytes.Clone(payload)
	tampered[len(tampered)/2] ^= 0x01
	if _, ok := node(t, "verify", nodeVerify{s, headers, b64(tampered)}); ok {
		t.Error("the Node library accepts a tampered body")
	}
	if _, ok := node(t, "verify", nodeVerify{other, headers, b64(payload)}); ok {
		t.Error("the Node library accepts another secret")
	}
	rotating := nodeHeaders(t, "msg_r-7f3a_billing", []string{s, other}, payload, time.Now())
	for _, sec := range []string{s, other} {
		if _, ok := node(t, "verify", nodeVerify{sec, rotating, b64(payload)}); !ok {
			t.Error("the Node library rejects a rotation signature")
		}
	}
}

func TestNodeStandardWebhooksSignsWhatRelaySigns(t *testing.T) {
	t.Parallel()
	needNode(t)
	s := secret(1)
	out, ok := node(t, "sign", map[string]any{
		"secret": s, "msgId": "msg_r-7f3a_billing", "timestamp": t0.Unix(),
		"bodyBase64": base64.StdEncoding.EncodeToString([]byte(body)),
	})
	if !ok {
		t.Fatal("node sign failed")
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("node sign printed %q: %v", out, err)
	}
	want := nodeHeaders(t, "msg_r-7f3a_billing", []string{s}, []byte(body), t0)
	if got["webhook-signature"] != want["webhook-signature"] {
		t.Errorf("node signs %q, relay %q", got["webhook-signature"], want["webhook-signature"])
	}
	h := header(want)
	h.Set("webhook-signature", got["webhook-signature"])
	v := &hookverify.StandardVerifier{Secrets: []string{s}, Now: func() time.Time { return t0 }}
	if err := v.Verify(h, []byte(body)); err != nil {
		t.Errorf("hookverify rejects the library's signature: %v", err)
	}
}
