package main

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// consoleDir holds the Node side of the browser test: playwright-core,
// installed by npm ci, driving Debian's chromium.
const consoleDir = "testdata/console"

// browserOrSkip is chromium's path, or skips the test when chromium or the
// Node side is missing, except in CI (RELAY_TEST_REQUIRE_REAL=1).
func browserOrSkip(t *testing.T) string {
	t.Helper()
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	missing := ""
	if _, err := os.Stat(chromium); err != nil {
		missing = chromium
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node"
	} else if _, err := os.Stat(filepath.Join(consoleDir, "node_modules", "playwright-core")); err != nil {
		missing = "playwright-core (npm ci --prefix cmd/relay/" + consoleDir + ")"
	}
	if missing != "" {
		if os.Getenv("RELAY_TEST_REQUIRE_REAL") == "1" {
			t.Fatalf("the console's browser test needs %s", missing)
		}
		t.Skipf("no %s: the console's browser test skips", missing)
	}
	return chromium
}

// TestConsoleInChromium runs the real binary and a receiver that refuses one
// outcome, and drives the console in Chromium: it finds the failing
// endpoint, replays the stuck row once the receiver is fixed, finds an
// outcome and resends it, and checks a namespace-bound token sees no other
// namespace. Screenshots of each page at 1280 and 390 px go to
// RELAY_CONSOLE_SCREENSHOTS, a temporary directory by default.
func TestConsoleInChromium(t *testing.T) {
	chromium := browserOrSkip(t)
	shots := os.Getenv("RELAY_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	clearAuthEnv(t)
	// The embedded store, with a secret of the test's so that it can mint
	// a namespace-bound token as an operator would, with relay token.
	p := relaytest.Start(t, relaytest.Config{Name: "console", Env: []string{"RELAY_JWT_SECRET=" + testSecret}})
	link := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := token(append([]string{"--jwt-secret", testSecret, "--public-url", p.URL, "--console"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out.String())
	}
	adminLink, boundLink := link("--scope", "admin"), link("--scope", "admin", "--ns", "other")
	_, admin, _ := strings.Cut(adminLink, "#token=")

	const stuck, done = "c-stuck", "c-ok-1"
	var refusing atomic.Bool
	refusing.Store(true)
	notify := make(chan struct{}, 1)
	rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "billing", Notify: notify, Script: func(rid string, _ int) relaytest.Answer {
		if rid == stuck && refusing.Load() {
			// Long enough that only a replay brings it forward.
			return relaytest.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"600"}}}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	ctx := t.Context()
	c, err := relayclient.New(p.URL, relayclient.Options{Token: admin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutEndpoint(ctx, "acme", "billing", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutEndpoint(ctx, "acme", "audit", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret, Kinds: []relayclient.Kind{relayclient.KindReadServed}}); err != nil {
		t.Fatal(err)
	}
	off := false
	if _, err := c.PutEndpoint(ctx, "other", "ledger", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret, Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	outcome := func(rid string) relayclient.Outcome {
		return relayclient.Outcome{ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(), Expired: &relayclient.Expired{}}
	}
	arrived := func(rid string) int {
		n := 0
		for _, a := range rc.Arrivals() {
			if a.RID == rid && a.Status == http.StatusNoContent {
				n++
			}
		}
		return n
	}
	wait := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.After(settle)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !ok() {
			select {
			case <-notify:
			case <-tick.C:
			case <-deadline:
				t.Fatalf("%s within %s", what, settle)
			}
		}
	}
	// Delivered first: behind the stuck row it would wait.
	if _, err := c.IngestBatch(ctx, "acme", []relayclient.Outcome{outcome(done)}); err != nil {
		t.Fatal(err)
	}
	wait(done+" delivered", func() bool { return arrived(done) == 1 })
	if _, err := c.IngestBatch(ctx, "acme", []relayclient.Outcome{outcome(stuck), outcome("c-behind")}); err != nil {
		t.Fatal(err)
	}
	wait(stuck+" refused", func() bool {
		for _, a := range rc.Arrivals() {
			if a.RID == stuck && a.Status == http.StatusServiceUnavailable {
				return true
			}
		}
		return false
	})

	cmd := exec.CommandContext(ctx, "node", "drive.mjs")
	cmd.Dir = consoleDir
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium, "CONSOLE_ADMIN_LINK="+adminLink, "CONSOLE_BOUND_LINK="+boundLink,
		"CONSOLE_SCREENSHOTS="+shots, "CONSOLE_STUCK_RID="+stuck, "CONSOLE_DELIVERED_RID="+done)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A browser's helper may keep stdout open past node's exit.
	cmd.WaitDelay = 10 * time.Second
	finished := false
	lines := bufio.NewScanner(stdout)
	for !finished && lines.Scan() {
		l := lines.Text()
		t.Log("browser: " + l)
		switch l {
		case "ASK fix":
			refusing.Store(false)
			_, err = stdin.Write([]byte("fixed\n"))
		case "ASK resent":
			wait(done+" resent", func() bool { return arrived(done) == 2 })
			_, err = stdin.Write([]byte("delivered again\n"))
		case "DONE":
			finished = true
			err = stdin.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil || !finished {
		t.Fatalf("the browser run failed: %v\n%s", err, stderr.String())
	}
	// What the page showed, the receiver saw.
	wait(stuck+" delivered after the replay", func() bool { return arrived(stuck) == 1 && arrived("c-behind") == 1 })
	t.Logf("screenshots in %s", shots)
}
