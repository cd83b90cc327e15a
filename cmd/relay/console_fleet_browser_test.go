package main

import (
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// TestConsoleFleetInChromium puts 2,000 namespaces beside the real binary,
// three of them failing (their endpoints answered 410) beyond the first
// 1,000 in list order, and one endpoint disabled by hand, and checks that
// the API's figures and the console's namespaces page show the true three
// failing and the disabled one apart, and that the prefix search finds a
// namespace; axe-core finds no fault on the page at 1280 and 390 px.
func TestConsoleFleetInChromium(t *testing.T) {
	chromium := browserOrSkip(t)
	clearAuthEnv(t)
	p := relaytest.Start(t, relaytest.Config{Name: "console-fleet", Env: []string{"RELAY_REDIS_URL=", "RELAY_JWT_SECRET=" + testSecret}})
	adminLink := consoleLink(t, p, testSecret, p.URL, "--scope", "admin")
	admin := tokenOf(t, adminLink)
	ctx := t.Context()
	c, err := relayclient.New(p.URL, relayclient.Options{Token: admin})
	if err != nil {
		t.Fatal(err)
	}
	fine := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "fine", Script: func(string, int) relaytest.Answer {
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	goneNotify := make(chan struct{}, 1)
	gone := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "gone", Notify: goneNotify, Script: func(string, int) relaytest.Answer {
		return relaytest.Answer{Status: http.StatusGone}
	}})

	const total = 2000
	work := make(chan int)
	errs := make(chan error, total)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				_, err := c.PutEndpoint(ctx, fmt.Sprintf("tenant-%04d", i), "hook", relayclient.EndpointConfig{URL: fine.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: fine.Secret})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range total {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var order []string
	q := relayclient.NamespaceQuery{Limit: 1000}
	for {
		page, err := c.Namespaces(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range page.Namespaces {
			order = append(order, n.Namespace)
		}
		if page.NextCursor == nil {
			break
		}
		q.Cursor = *page.NextCursor
	}
	if len(order) != total {
		t.Fatalf("%d namespaces listed, want %d", len(order), total)
	}
	// Failing beyond the first 1,000 the list holds: their endpoints
	// answer 410, and relay disables them.
	failing := []string{order[1000], order[1500], order[total-1]}
	for _, ns := range failing {
		if _, err := c.PutEndpoint(ctx, ns, "hook", relayclient.EndpointConfig{URL: gone.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: gone.Secret}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.IngestAll(ctx, ns, []relayclient.Outcome{{ReservationID: "r-1", Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(), Expired: &relayclient.Expired{}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Disabled by hand, in a namespace the list holds among its first.
	disabled := order[3]
	if _, err := c.DisableEndpoint(ctx, disabled, "hook"); err != nil {
		t.Fatal(err)
	}
	relaytest.Eventually(t, settle, goneNotify, func() error {
		f, err := c.Fleet(ctx)
		if err != nil {
			return err
		}
		if f.FailingNamespaces != 3 || f.DisabledNamespaces != 1 {
			return fmt.Errorf("fleet %+v within %s, want 3 failing and 1 disabled", f, settle)
		}
		return nil
	})
	// The API's data: the failing list holds exactly the three, the
	// disabled one apart.
	fl, err := c.Namespaces(ctx, relayclient.NamespaceQuery{Failing: true})
	if err != nil || len(fl.Namespaces) != 3 {
		t.Fatalf("failing namespaces %+v, %v; want 3", fl, err)
	}
	for _, n := range fl.Namespaces {
		if n.Namespace == disabled || n.Failing != 1 {
			t.Fatalf("failing namespaces %+v", fl.Namespaces)
		}
	}

	shots := screenshotDir(t, path.Base(t.Name()))
	driveBrowser(t, chromium, "fleet.mjs", []string{"CONSOLE_ADMIN_LINK=" + adminLink, "CONSOLE_SCREENSHOTS=" + shots,
		"CONSOLE_FAILING=" + strings.Join(failing, ","), "CONSOLE_DISABLED=" + disabled}, nil)
	t.Logf("screenshots in %s", shots)
}
