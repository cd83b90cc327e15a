package clientcheck_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// deliveringClient starts a relay in this process that delivers, with
// endpoint billing of namespace acme registered at a receiver that takes
// every webhook, and returns an admin client of it.
func deliveringClient() (*relayclient.Client, func()) {
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	ctx := context.Background()
	r, stop, err := newRelay(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := r.app.Start(ctx); err != nil {
		log.Fatal(err)
	}
	c, err := relayclient.New(r.url, relayclient.Options{Token: r.token(httpapi.ScopeAdmin)})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.PutEndpoint(ctx, "acme", "billing", relayclient.EndpointConfig{URL: receiver.URL + "/hooks"}); err != nil {
		log.Fatal(err)
	}
	return c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.app.Stop(ctx)
		stop()
		receiver.Close()
	}
}

// waitDelivered waits until the outcome rid is delivered to billing.
func waitDelivered(c *relayclient.Client, rid string) relayclient.OutcomeStory {
	var story relayclient.OutcomeStory
	err := relaytest.Poll(30*time.Second, nil, func() error {
		var err error
		if story, err = c.Outcome(context.Background(), "acme", rid); err != nil {
			log.Fatal(err)
		}
		if story.Endpoints[0].State != relayclient.OutcomeDelivered {
			return fmt.Errorf("%s was not delivered: %+v", rid, story)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	return story
}

// Outcome shows a retained outcome as it was accepted and its state on
// every endpoint.
func Example_clientOutcome() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	story, err := c.Outcome(ctx, "acme", "r-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(story.ReservationID, story.Outcome.Expired != nil, story.Outcome.Repository)
	for _, e := range story.Endpoints {
		fmt.Println(e.Endpoint, e.State, e.AttemptCount)
	}
	_, err = c.Outcome(ctx, "acme", "r-9")
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// r-1 true acme/widgets
	// billing pending 0
	// urn:hookrelay:problem:not-found
}

// Outcomes pages through a namespace's retained outcomes in acceptance
// order.
func Example_clientOutcomes() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	for _, rid := range []string{"r-1", "r-2", "r-3"} {
		if _, err := c.Ingest(ctx, "acme", expired(rid)); err != nil {
			log.Fatal(err)
		}
	}
	q := relayclient.OutcomesQuery{Endpoint: "billing", State: relayclient.OutcomePending, Since: time.Now().Add(-time.Hour), Limit: 2}
	for {
		page, err := c.Outcomes(ctx, "acme", q)
		if err != nil {
			log.Fatal(err)
		}
		for _, o := range page.Outcomes {
			fmt.Println(o.ReservationID, o.Kind, o.Endpoints[0].State)
		}
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
		fmt.Println("--")
	}
	// Output:
	// r-1 expired pending
	// r-2 expired pending
	// --
	// r-3 expired pending
}

// Resend delivers an outcome an endpoint took once again, at its own place
// in the namespace's order.
func Example_clientResend() {
	c, stop := deliveringClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	story := waitDelivered(c, "r-1")
	res, err := c.Resend(ctx, "acme", "billing", "r-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Seq == story.Seq, res.DueAt != nil)
	// Delivered again, it is delivered once more in its story.
	waitDelivered(c, "r-1")
	_, err = c.Resend(ctx, "acme", "billing", "r-9")
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// true true
	// urn:hookrelay:problem:not-found
}

// EraseOutcome removes an outcome at once, wherever it is pending.
func Example_clientEraseOutcome() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	erased, err := c.EraseOutcome(ctx, "acme", "r-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(erased.ReservationID, erased.Dropped)
	_, err = c.Outcome(ctx, "acme", "r-1")
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// r-1 [billing]
	// urn:hookrelay:problem:not-found
}

// Recover queues again every outcome an endpoint took in a time range,
// after it lost them; Recovery follows the job.
func Example_clientRecover() {
	c, stop := deliveringClient()
	defer stop()
	ctx := context.Background()

	since := time.Now().Add(-time.Minute)
	for _, rid := range []string{"r-1", "r-2"} {
		if _, err := c.Ingest(ctx, "acme", expired(rid)); err != nil {
			log.Fatal(err)
		}
		waitDelivered(c, rid)
	}
	job, err := c.Recover(ctx, "acme", "billing", since, time.Now().Add(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	err = relaytest.Poll(30*time.Second, nil, func() error {
		if job.State != relayclient.RecoveryRunning {
			return nil
		}
		if job, err = c.Recovery(ctx, "acme", "billing", job.ID); err != nil {
			log.Fatal(err)
		}
		if job.State == relayclient.RecoveryRunning {
			return fmt.Errorf("the recovery does not end: %+v", job)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, job.Queued, job.FinishedAt != nil)
	// Output:
	// done 2 true
}

// Recovery shows a recovery's progress; a second recovery of the endpoint
// waits for the first.
func Example_clientRecovery() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	started, err := c.Recover(ctx, "acme", "billing", time.Now().Add(-time.Hour), time.Now())
	if err != nil {
		log.Fatal(err)
	}
	job, err := c.Recovery(ctx, "acme", "billing", started.ID)
	if err != nil {
		log.Fatal(err)
	}
	// Total bounds what the job examines: the namespace's sequence
	// numbers in the range, which other writes use too.
	fmt.Println(job.ID == started.ID, job.State, job.Examined, job.Total >= 1)
	_, err = c.Recover(ctx, "acme", "billing", time.Now().Add(-time.Hour), time.Now())
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// true running 0 true
	// urn:hookrelay:problem:recovery-running
}
