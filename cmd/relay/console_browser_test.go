package main

import (
	"bufio"
	"bytes"
	"fmt"
	"image/color"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
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
// outcome, and drives the console in Chromium: namespaces ranked failing
// first, the failing endpoint and its chart of the last hour, the stuck
// row replayed once the receiver is fixed, an outcome found and resent, a
// recovery run from the stream page to done; a read-only token offered no
// control that changes anything and opening where it may read, a
// namespace-bound token that sees no other namespace, and a disabled
// endpoint's pending row that offers no replay; at both sizes, pages that
// fit and that axe-core finds no fault in. It runs on the embedded store and, when
// RELAY_TEST_REDIS_URL is set, on that Redis under a prefix of its own.
// Screenshots of every page at 1280 and 390 px are its artifacts, under
// RELAY_CONSOLE_SCREENSHOTS or $RELAY_TEST_ARTIFACTS/console-screenshots
// (a temporary directory otherwise), one directory per store; with
// RELAY_CONSOLE_README_DIR the embedded run also writes the README's four
// (make console-screenshots).
func TestConsoleInChromium(t *testing.T) {
	chromium := browserOrSkip(t)
	clearAuthEnv(t)
	t.Run("embedded", func(t *testing.T) {
		// The embedded store, with a secret of the test's so that it can
		// mint a namespace-bound token as an operator would, with relay
		// token.
		p := relaytest.Start(t, relaytest.Config{Name: "console", Env: []string{"RELAY_REDIS_URL=", "RELAY_JWT_SECRET=" + testSecret}})
		dir := consoleScenario(t, chromium, p, testSecret, p.URL, 1280)
		if readme := os.Getenv("RELAY_CONSOLE_README_DIR"); readme != "" {
			for from, to := range map[string]string{
				"namespace-1280.png": "console-namespace.png", "outcome-1280.png": "console-outcome.png",
				"namespace-390.png": "console-namespace-phone.png", "outcome-390.png": "console-outcome-phone.png",
			} {
				b, err := os.ReadFile(filepath.Join(dir, from))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(readme, to), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("README screenshots written to %s", readme)
		}
	})
	t.Run("redis", func(t *testing.T) {
		p, creds := startOnRealRedis(t, "console-redis", "console")
		// Tokens name relay's public URL as their audience; the browser
		// reaches the process on its own address.
		// Driven at a phone's width, as the embedded run is at a desktop's.
		consoleScenario(t, chromium, p, creds.Secret, relaytest.PublicURL, 390)
	})
}

// screenshotDir is where a run of the scenario on backend saves its
// screenshots.
func screenshotDir(t *testing.T, backend string) string {
	t.Helper()
	root := os.Getenv("RELAY_CONSOLE_SCREENSHOTS")
	if root == "" && os.Getenv("RELAY_TEST_ARTIFACTS") != "" {
		root = filepath.Join(os.Getenv("RELAY_TEST_ARTIFACTS"), "console-screenshots")
	}
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, backend)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// consoleLink mints a console link to p with relay token, signed with
// secret for audience, granting args.
func consoleLink(t *testing.T, p *relaytest.Relay, secret, audience string, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := token(append([]string{"--jwt-secret", secret, "--public-url", audience, "--console"}, args...), &out); err != nil {
		t.Fatal(err)
	}
	_, tok, ok := strings.Cut(strings.TrimSpace(out.String()), "#token=")
	if !ok {
		t.Fatalf("relay token --console printed %q", out.String())
	}
	return p.URL + "/console/#token=" + tok
}

// tokenOf is the token a console link carries.
func tokenOf(t *testing.T, link string) string {
	t.Helper()
	_, tok, _ := strings.Cut(link, "#token=")
	tok, err := url.QueryUnescape(tok)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// driveBrowser runs script, a node program of testdata/console, with env
// beside the test's own and CHROMIUM, logging each line it prints. A line
// "ASK q" is answered on its stdin with answer(q); "DONE" ends the run,
// and the test fails unless the program printed it and exited cleanly.
func driveBrowser(t *testing.T, chromium, script string, env []string, answer func(q string) string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "node", script)
	cmd.Dir = consoleDir
	cmd.Env = append(append(os.Environ(), "CHROMIUM="+chromium), env...)
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
		var err error
		if q, ok := strings.CutPrefix(l, "ASK "); ok {
			if answer == nil {
				t.Fatalf("the browser asked %q, which %s does not", q, script)
			}
			_, err = stdin.Write([]byte(answer(q) + "\n"))
		} else if l == "DONE" {
			finished = true
			err = stdin.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil || !finished {
		t.Fatalf("the browser run of %s failed: %v\n%s", script, err, stderr.String())
	}
}

// consolePages are the screenshots the scenario takes, each at both widths.
var consolePages = []string{"namespaces", "namespace", "stream", "stream-drained", "outcome", "stream-recovered", "sign-in", "forbidden", "missing",
	"namespace-wide", "stream-wide", "outcome-wide", "read-only-start", "read-only-namespace", "read-only-stream", "read-only-outcome", "read-only-missing",
	"bound-namespace", "stream-disabled", "bound-outcome", "refused"}

// consoleScenario drives the console against p, whose tokens are signed
// with secret for audience, and returns the screenshots' directory.
func consoleScenario(t *testing.T, chromium string, p *relaytest.Relay, secret, audience string, width int) string {
	shots := screenshotDir(t, path.Base(t.Name()))
	link := func(args ...string) string { return consoleLink(t, p, secret, audience, args...) }
	adminLink, boundLink, readLink := link("--scope", "admin"), link("--scope", "admin", "--ns", "other"), link("--scope", "outbox:read")
	// A link that lapses two minutes on: the browser's clock is moved past
	// it, not waited for.
	lapsingLink := link("--scope", "outbox:read", "--ns", "other", "--ttl", "2m")
	admin := tokenOf(t, adminLink)

	// held waits on other's ledger, which is disabled.
	const stuck, done, behind, held = "c-stuck", "c-ok-1", "c-behind", "c-held"
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
	// Healthy, and first by name: the failing namespaces go before it.
	// The many after it make the namespaces page as long as an operator's.
	healthy := []string{"alpha"}
	for i := range 24 {
		healthy = append(healthy, fmt.Sprintf("many-%02d", i))
	}
	for _, ns := range healthy {
		if _, err := c.PutEndpoint(ctx, ns, "ops", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret}); err != nil {
			t.Fatal(err)
		}
	}
	// The widest ids relay takes, on an endpoint that refuses for good:
	// its row, of a 128-character reservation id, stays pending on a
	// 63-character endpoint id.
	longEndpoint := strings.Repeat("abcdefghij", 6) + "xyz"
	longRID := strings.Repeat("0123456789ABCDEF", 8)
	wideNotify := make(chan struct{}, 1)
	wide := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "wide", Notify: wideNotify, Script: func(string, int) relaytest.Answer {
		return relaytest.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"600"}}}
	}})
	if _, err := c.PutEndpoint(ctx, "wide", longEndpoint, relayclient.EndpointConfig{URL: wide.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: wide.Secret}); err != nil {
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
		relaytest.Eventually(t, settle, notify, func() error {
			if !ok() {
				return fmt.Errorf("%s within %s", what, settle)
			}
			return nil
		})
	}
	// Delivered first: behind the stuck row it would wait.
	if _, err := c.IngestAll(ctx, "acme", []relayclient.Outcome{outcome(done)}); err != nil {
		t.Fatal(err)
	}
	wait(done+" delivered", func() bool { return arrived(done) == 1 })
	if _, err := c.IngestAll(ctx, "acme", []relayclient.Outcome{outcome(stuck), outcome(behind)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.IngestAll(ctx, "wide", []relayclient.Outcome{outcome(longRID)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.IngestAll(ctx, "other", []relayclient.Outcome{outcome(held)}); err != nil {
		t.Fatal(err)
	}
	relaytest.Eventually(t, settle, wideNotify, func() error {
		if len(wide.Arrivals()) == 0 {
			return fmt.Errorf("%s refused within %s", longRID, settle)
		}
		return nil
	})
	wait(stuck+" refused", func() bool {
		for _, a := range rc.Arrivals() {
			if a.RID == stuck && a.Status == http.StatusServiceUnavailable {
				return true
			}
		}
		return false
	})

	driveBrowser(t, chromium, "drive.mjs", []string{"CHROMIUM=" + chromium, "CONSOLE_ADMIN_LINK=" + adminLink, "CONSOLE_BOUND_LINK=" + boundLink, "CONSOLE_READ_LINK=" + readLink, "CONSOLE_LAPSING_LINK=" + lapsingLink, "CONSOLE_HELD_RID=" + held,
		"CONSOLE_SCREENSHOTS=" + shots, "CONSOLE_STUCK_RID=" + stuck, "CONSOLE_DELIVERED_RID=" + done,
		"CONSOLE_NAMESPACE_ORDER=acme,wide,other," + strings.Join(healthy, ","), fmt.Sprintf("CONSOLE_WIDTH=%d", width),
		"CONSOLE_LONG_ENDPOINT=" + longEndpoint, "CONSOLE_LONG_RID=" + longRID}, func(q string) string {
		switch q {
		case "fix":
			refusing.Store(false)
			return "fixed"
		case "resent":
			wait(done+" resent", func() bool { return arrived(done) == 2 })
			return "delivered again"
		case "recovered":
			// The recovery queues again every outcome billing was
			// delivered: the three of them.
			wait("the recovered outcomes delivered", func() bool {
				return arrived(done) == 3 && arrived(stuck) == 2 && arrived(behind) == 2
			})
			return "delivered again"
		}
		t.Fatalf("the browser asked %q", q)
		return ""
	})
	// What the pages showed, the receiver saw, and no more.
	if got := [3]int{arrived(done), arrived(stuck), arrived(behind)}; got != [3]int{3, 2, 2} {
		t.Errorf("arrivals of %s, %s, %s: %v, want 3, 2, 2", done, stuck, behind, got)
	}
	checkScreenshots(t, shots)
	t.Logf("screenshots in %s", shots)
	return shots
}

// checkScreenshots checks each page's screenshots are PNGs of their width
// that show something: not one colour all over.
func checkScreenshots(t *testing.T, dir string) {
	t.Helper()
	checkShots(t, dir, consolePages)
}

// checkShots checks the screenshots of the pages names.
func checkShots(t *testing.T, dir string, names []string) {
	t.Helper()
	for _, name := range names {
		for _, width := range []int{1280, 390} {
			file := filepath.Join(dir, fmt.Sprintf("%s-%d.png", name, width))
			f, err := os.Open(file)
			if err != nil {
				t.Errorf("screenshot %s: %v", file, err)
				continue
			}
			img, err := png.Decode(f)
			f.Close()
			if err != nil {
				t.Errorf("screenshot %s: %v", file, err)
				continue
			}
			b := img.Bounds()
			if b.Dx() != width || b.Dy() < 200 {
				t.Errorf("screenshot %s is %dx%d, want %d wide", file, b.Dx(), b.Dy(), width)
			}
			colours := map[color.RGBA]bool{}
			for y := b.Min.Y; y < b.Max.Y; y += 7 {
				for x := b.Min.X; x < b.Max.X; x += 7 {
					colours[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)] = true
				}
			}
			if len(colours) < 8 {
				t.Errorf("screenshot %s shows %d colours: blank", file, len(colours))
			}
		}
	}
}
