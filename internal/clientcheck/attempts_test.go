package clientcheck_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// A refused delivery shows in the outbox view as an attempt with its
// status, class and the start of the refusal's body, made printable.
func TestTheOutboxViewDecodesEachRowsAttempts(t *testing.T) {
	r := startRelay(t)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("db down\x07"))
	}))
	t.Cleanup(refusing.Close)
	if err := r.app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.app.Stop(ctx)
	})
	c, _ := client(t, r.url, r.token(httpapi.ScopeAdmin))
	ctx := t.Context()
	if _, err := c.PutEndpoint(ctx, "acme", "billing", relayclient.EndpointConfig{URL: refusing.URL + "/hooks"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ingest(ctx, "acme", committed("r-1")); err != nil {
		t.Fatal(err)
	}
	var row relayclient.OutboxRow
	relaytest.Eventually(t, 30*time.Second, nil, func() error {
		page, err := c.Outbox(ctx, "acme", "billing", relayclient.OutboxQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 1 || page.Rows[0].AttemptCount == 0 {
			return fmt.Errorf("no attempt showed: %+v", page)
		}
		row = page.Rows[0]
		return nil
	})
	if len(row.Attempts) != int(row.AttemptCount) || row.AttemptCount != 1 {
		t.Fatalf("%d attempts listed of %d", len(row.Attempts), row.AttemptCount)
	}
	a := row.Attempts[0]
	if a.Status != http.StatusServiceUnavailable || a.Error != "status" || a.ResponseExcerpt != "db down\uFFFD" || a.At.IsZero() {
		t.Fatalf("attempt %+v", a)
	}
}
