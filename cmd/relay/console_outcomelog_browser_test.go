package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// outcomeLogPages are the screenshots the outcome log's scenario takes,
// each at both widths.
var outcomeLogPages = []string{"outcomelog", "outcomelog-filtered", "outcomelog-refused", "stream-from-outcome", "stream-attempts"}

// TestConsoleOutcomeLogInChromium drives the namespace's outcome log in
// Chromium on the embedded store: its first row is the newest, Older and
// Newer page through it, each filter (state, endpoint, kind, reservation
// id prefix, time range) narrows it and stays in its form across a
// refresh, a pending row leads to the stream page that holds it, and the
// endpoint page shows a failed attempt's status, duration and answer; at
// 1280x800 and 390x844, with no axe-core violation.
//
// The namespace shop holds 60 outcomes, ord-000 to ord-029 and then, in a
// later second, inv-000 to inv-029, their kinds committed, aborted and
// expired in turn. billing, disabled, keeps every one pending, 50 to its
// stream's page, so that inv-025 is on its second; audit, created between
// the two, takes the aborted ones and delivers them.
func TestConsoleOutcomeLogInChromium(t *testing.T) {
	chromium := browserOrSkip(t)
	clearAuthEnv(t)
	p := relaytest.Start(t, relaytest.Config{Name: "console-log", Env: []string{"RELAY_REDIS_URL=", "RELAY_JWT_SECRET=" + testSecret}})
	link := consoleLink(t, p, testSecret, p.URL, "--scope", "admin")
	admin := tokenOf(t, link)
	ctx := t.Context()
	c, err := relayclient.New(p.URL, relayclient.Options{Token: admin})
	if err != nil {
		t.Fatal(err)
	}
	notify := make(chan struct{}, 1)
	rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "audit", Notify: notify, Script: func(rid string, _ int) relaytest.Answer {
		if strings.HasPrefix(rid, "flaky-") {
			return relaytest.Answer{Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"600"}}, Body: `{"error":"ledger locked, try later"}`}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	off := false
	if _, err := c.PutEndpoint(ctx, "shop", "billing", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret, Enabled: &off}); err != nil {
		t.Fatal(err)
	}
	batch := func(prefix string) []relayclient.Outcome {
		out := make([]relayclient.Outcome, 30)
		for i := range out {
			o := relayclient.Outcome{ReservationID: fmt.Sprintf("%s-%03d", prefix, i), Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli()}
			switch i % 3 {
			case 0:
				o.Committed = &relayclient.Committed{NewToRepo: 1}
			case 1:
				o.Aborted = &relayclient.Aborted{Reason: "client_cancelled"}
			default:
				o.Expired = &relayclient.Expired{}
			}
			out[i] = o
		}
		return out
	}
	if _, err := c.IngestAll(ctx, "shop", batch("ord")); err != nil {
		t.Fatal(err)
	}
	// The time filter is a datetime-local field, to the second: the second
	// batch is accepted from the next whole second on, which splits them.
	split := time.Now().Truncate(time.Second).Add(time.Second)
	<-time.After(time.Until(split))
	if _, err := c.PutEndpoint(ctx, "shop", "audit", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret,
		Kinds: []relayclient.Kind{relayclient.KindAborted}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.IngestAll(ctx, "shop", batch("inv")); err != nil {
		t.Fatal(err)
	}
	// A stream whose receiver refuses with a text: its attempt is shown.
	if _, err := c.PutEndpoint(ctx, "flaky", "ledger", relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.IngestAll(ctx, "flaky", []relayclient.Outcome{{ReservationID: "flaky-1", Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(), Expired: &relayclient.Expired{}}}); err != nil {
		t.Fatal(err)
	}
	relaytest.Eventually(t, settle, notify, func() error {
		delivered, refused := 0, 0
		for _, a := range rc.Arrivals() {
			switch {
			case a.Status == http.StatusNoContent:
				delivered++
			case a.RID == "flaky-1":
				refused++
			}
		}
		if delivered < 10 || refused == 0 {
			return fmt.Errorf("%d of inv's 10 aborted outcomes delivered to audit and flaky-1 refused %d times, within %s", delivered, refused, settle)
		}
		return nil
	})

	shots := screenshotDir(t, "outcomelog")
	driveBrowser(t, chromium, "outcomelog.mjs", []string{"CONSOLE_ADMIN_LINK=" + link, "CONSOLE_SCREENSHOTS=" + shots,
		"CONSOLE_SPLIT=" + split.UTC().Format(time.RFC3339)}, nil)
	checkShots(t, shots, outcomeLogPages)
	t.Logf("screenshots in %s", shots)
}
