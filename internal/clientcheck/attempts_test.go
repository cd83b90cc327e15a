package clientcheck_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// A refused delivery shows in the outbox view as an attempt with its
// status, class and the start of the refusal's body, made printable.
func TestTheOutboxViewDecodesEachRowsAttempts(t *testing.T) {
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "600")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("db down\x07"))
	}))
	t.Cleanup(refusing.Close)
	_, c := startDelivering(t, refusing.URL)
	ctx := t.Context()
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
