package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// headerLog is a receiver's verifier that keeps the headers an endpoint
// adds to each request it verified, by the webhook's type.
type headerLog struct {
	v  hookverify.Verifier
	mu sync.Mutex
	// seen are "type authorization x-tenant" of each verified request.
	seen []string
}

func (l *headerLog) VerifyRequest(r *http.Request, body []byte) error {
	if err := l.v.VerifyRequest(r, body); err != nil {
		return err
	}
	typ := "outcome"
	if bytes.Contains(body, []byte(`"type":"endpoint.test"`)) {
		typ = "endpoint.test"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, strings.Join([]string{typ, r.Header.Get("Authorization"), r.Header.Get("X-Tenant")}, " "))
	return nil
}

func (l *headerLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// TestConsoleManagesEndpointsInChromium drives, in Chromium, an endpoint's
// life from the console's pages, at a desktop's width and at a phone's:
// created from its namespace's page with every setting PUT takes; edited
// from a form prefilled with it, its redacted header kept as stored;
// tested, the test's attempt shown at once; disabled and enabled; its
// secret rotated and shown once; and deleted, forced, with the count of
// the rows it dropped. A read-only token is offered none of it. The
// receiver sees each test, signed and with the kept header, and the
// namespace's other endpoint, which takes every event, none.
func TestConsoleManagesEndpointsInChromium(t *testing.T) {
	chromium := browserOrSkip(t)
	clearAuthEnv(t)
	p := relaytest.Start(t, relaytest.Config{Name: "console-endpoints", Env: []string{"RELAY_REDIS_URL=", "RELAY_JWT_SECRET=" + testSecret}})
	link := func(args ...string) string { return consoleLink(t, p, testSecret, p.URL, args...) }
	adminLink, readLink := link("--scope", "admin"), link("--scope", "outbox:read")
	for _, width := range []int{1280, 390} {
		t.Run(fmt.Sprint(width), func(t *testing.T) {
			ns := fmt.Sprintf("shop-%d", width)
			var log *headerLog
			rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "billing", Verifier: func(rc *relaytest.Receiver) hookverify.Verifier {
				log = &headerLog{v: &hookverify.StandardVerifier{Secrets: []string{rc.Secret}}}
				return log
			}})
			watch := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "watch"})
			admin, err := relayclient.New(p.URL, relayclient.Options{Token: tokenOf(t, adminLink)})
			if err != nil {
				t.Fatal(err)
			}
			// Every kind and every event: a test of billing's is still not
			// its.
			if _, err := admin.PutEndpoint(t.Context(), ns, "watch", relayclient.EndpointConfig{URL: watch.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: watch.Secret,
				Kinds: []relayclient.Kind{relayclient.KindCommitted, relayclient.KindAborted, relayclient.KindExpired, relayclient.KindReadServed, relayclient.KindEvents}}); err != nil {
				t.Fatal(err)
			}
			shots := screenshotDir(t, fmt.Sprintf("endpoints-%d", width))
			driveBrowser(t, chromium, "endpoints.mjs", []string{"CONSOLE_ADMIN_LINK=" + adminLink, "CONSOLE_READ_LINK=" + readLink,
				"CONSOLE_SCREENSHOTS=" + shots, "CONSOLE_NS=" + ns, "RECEIVER_URL=" + rc.URL, "RECEIVER_SECRET=" + rc.Secret, fmt.Sprintf("CONSOLE_WIDTH=%d", width)}, nil)
			// Two tests, each signed with the secret the receiver holds (the
			// second after the rotation) and carrying the header the edit
			// kept, the second with the one it changed.
			want := []string{"endpoint.test Bearer hunter2 acme-2", "endpoint.test Bearer hunter2 acme-2"}
			if got := log.requests(); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("billing's receiver got %q, want %q", got, want)
			}
			for _, a := range watch.Arrivals() {
				if a.Type == "endpoint.test" {
					t.Errorf("the namespace's other endpoint got the test %s: a test is for its endpoint alone", a.RID)
				}
			}
			for _, name := range []string{"endpoint-new", "endpoint-edit", "endpoint-tested", "endpoint-rotated", "endpoint-delete", "endpoint-deleted"} {
				for _, w := range []int{1280, 390} {
					if _, err := os.Stat(filepath.Join(shots, fmt.Sprintf("%s-%d.png", name, w))); err != nil {
						t.Errorf("screenshot: %v", err)
					}
				}
			}
			t.Logf("screenshots in %s", shots)
		})
	}
}
