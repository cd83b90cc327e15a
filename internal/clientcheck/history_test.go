package clientcheck_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// On a relay that delivers, an outcome's story shows its delivery, a
// resend and a recovery deliver it again, and every exchange is the
// contract's.
func TestTheHistoryOfDeliveredOutcomes(t *testing.T) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	r, c := startDelivering(t, receiver.URL)
	ctx := t.Context()
	since := time.Now().Add(-time.Minute)
	if _, err := c.Ingest(ctx, "acme", committed("r-1")); err != nil {
		t.Fatal(err)
	}
	story := waitDelivered(c, "r-1")
	e := story.Endpoints[0]
	if e.DeliveredAt == nil || e.DroppedAt != nil || e.AttemptCount != 1 || len(e.Attempts) != 1 || e.Attempts[0].Error != "" || e.Attempts[0].At.IsZero() {
		t.Fatalf("delivered %+v", e)
	}
	list, err := c.Outcomes(ctx, "acme", relayclient.OutcomesQuery{State: relayclient.OutcomeDelivered})
	if err != nil || len(list.Outcomes) != 1 || list.Outcomes[0].Endpoints[0].At == nil || !list.Outcomes[0].Endpoints[0].At.Equal(*e.DeliveredAt) {
		t.Fatalf("delivered outcomes %+v, %v", list, err)
	}

	res, err := c.Resend(ctx, "acme", "billing", "r-1")
	if err != nil || res.Seq != story.Seq || res.DueAt == nil {
		t.Fatalf("resend %+v, %v", res, err)
	}
	if again := waitDelivered(c, "r-1"); again.Endpoints[0].DeliveredAt.Before(*e.DeliveredAt) {
		t.Fatalf("delivered again %+v", again.Endpoints[0])
	}

	job, err := c.Recover(ctx, "acme", "billing", since, time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	relaytest.Eventually(t, 30*time.Second, nil, func() error {
		if job.State != relayclient.RecoveryRunning {
			return nil
		}
		if job, err = c.Recovery(ctx, "acme", "billing", job.ID); err != nil {
			t.Fatal(err)
		}
		if job.State == relayclient.RecoveryRunning {
			return fmt.Errorf("the recovery does not end: %+v", job)
		}
		return nil
	})
	if job.State != relayclient.RecoveryDone || job.Queued != 1 || job.FinishedAt == nil || job.Examined < 1 {
		t.Fatalf("recovery %+v", job)
	}

	reader, _ := client(t, r.url, r.token(httpapi.ScopeOutboxRead))
	if _, err := reader.Outcome(ctx, "acme", "r-1"); err != nil {
		t.Fatal(err)
	}
	_, err = reader.Resend(ctx, "acme", "billing", "r-1")
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
	_, err = reader.EraseOutcome(ctx, "acme", "r-1")
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
	_, err = reader.Recover(ctx, "acme", "billing", since, time.Now())
	wantProblem(t, err, http.StatusForbidden, relayclient.TypeForbidden)
	if _, err := c.Recovery(ctx, "acme", "billing", "Nope"); err == nil {
		t.Fatal("a malformed recovery id was sent")
	}
	if _, err := c.Outcome(ctx, "acme", "s:x"); err == nil {
		t.Fatal("a synthetic reservation id was sent")
	}
}
