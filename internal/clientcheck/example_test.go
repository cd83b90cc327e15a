package clientcheck_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/relayclient"
)

// exampleRelay starts a relay in this process, with endpoint billing
// registered in namespace acme, and returns its URL and an admin token.
func exampleRelay() (relayURL, token string, stop func()) {
	r, stop, err := newRelay(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	token = r.token(httpapi.ScopeAdmin)
	c, err := relayclient.New(r.url, relayclient.Options{Token: token})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.PutEndpoint(context.Background(), "acme", "billing", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/hooks"}); err != nil {
		log.Fatal(err)
	}
	return r.url, token, stop
}

func exampleClient() (*relayclient.Client, func()) {
	relayURL, token, stop := exampleRelay()
	c, err := relayclient.New(relayURL, relayclient.Options{Token: token})
	if err != nil {
		log.Fatal(err)
	}
	return c, stop
}

func expired(rid string) relayclient.Outcome {
	return relayclient.Outcome{ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(), Expired: &relayclient.Expired{}}
}

// A producer posts the outcome of each reservation as it ends. Posting it
// again (after a timeout, a crash) is safe: relay answers duplicate.
func Example() {
	relayURL, token, stop := exampleRelay()
	defer stop()

	c, err := relayclient.New(relayURL, relayclient.Options{Token: token})
	if err != nil {
		log.Fatal(err)
	}
	o := relayclient.Outcome{
		ReservationID:  "r-7f3a",
		Repository:     "acme/widgets",
		OccurredUnixMs: time.Now().UnixMilli(),
		Committed:      &relayclient.Committed{BytesStored: 1024, NewToRepo: 512, NewToStore: 256},
	}
	for range 2 {
		res, err := c.Ingest(context.Background(), "acme", o)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.ReservationID, res.Status)
	}
	// Output:
	// r-7f3a accepted
	// r-7f3a duplicate
}

// New takes the relay's base URL, which may carry a path prefix, and the
// token; the client copies the *http.Client it is given, following no
// redirect.
func Example_new() {
	c, err := relayclient.New("https://relay.example.com/relay", relayclient.Options{
		Token:        "eyJ...",
		HTTPClient:   &httpClient,
		MaxAttempts:  5,
		MaxRetryWait: 10 * time.Second,
	})
	fmt.Println(c != nil, err)
	_, err = relayclient.New("https://user:pass@relay.example.com", relayclient.Options{})
	fmt.Println(err)
	// Output:
	// true <nil>
	// relayclient: the base URL must not hold credentials
}

func Example_clientIngest() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	// Another outcome under the same reservation id is a conflict.
	other := expired("r-1")
	other.Repository = "acme/other"
	_, err := c.Ingest(ctx, "acme", other)
	fmt.Println(relayclient.ProblemType(err) == relayclient.TypeConflict)
	fmt.Println(err)
	// Output:
	// true
	// relayclient: 409 conflict: a different outcome was accepted under this reservation_id
}

// IngestAll sends any number of outcomes, 100 a request, and answers
// each in input order.
func Example_clientIngestAll() {
	c, stop := exampleClient()
	defer stop()

	outcomes := make([]relayclient.Outcome, 250)
	for i := range outcomes {
		outcomes[i] = expired(fmt.Sprintf("r-%d", i))
	}
	results, err := c.IngestAll(context.Background(), "acme", outcomes)
	if err != nil {
		// results answers outcomes[:len(results)]; the rest may be sent
		// again as they are.
		log.Fatal(err)
	}
	count := map[relayclient.IngestStatus]int{}
	for _, r := range results {
		count[r.Status]++
	}
	fmt.Println(len(results), results[249].ReservationID, count)
	// Output:
	// 250 r-249 map[accepted:250]
}

func Example_clientPutEndpoint() {
	c, stop := exampleClient()
	defer stop()

	saved, err := c.PutEndpoint(context.Background(), "acme", "audit", relayclient.EndpointConfig{
		URL:    "http://127.0.0.1:9/audit",
		Scheme: relayclient.SchemeStandardWebhooks,
		Kinds:  []relayclient.Kind{relayclient.KindCommitted, relayclient.KindAborted},
	})
	if err != nil {
		log.Fatal(err)
	}
	// relay generated the secret; it is shown this once.
	fmt.Println(saved.ID, saved.Created, saved.Kinds, strings.HasPrefix(saved.Secret, "whsec_"))
	// Output:
	// audit true [committed aborted] true
}

func Example_clientListEndpoints() {
	c, stop := exampleClient()
	defer stop()

	endpoints, err := c.ListEndpoints(context.Background(), "acme")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range endpoints {
		fmt.Println(e.ID, e.URL, e.Scheme, e.Enabled, e.Backlog.Rows)
	}
	// Output:
	// billing http://127.0.0.1:9/hooks mkit-hook-v2 true 0
}

func Example_clientEndpoint() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	e, err := c.Endpoint(ctx, "acme", "billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.ID, e.Backlog.Rows, e.NextAttemptAt != nil)
	_, err = c.Endpoint(ctx, "acme", "nope")
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// billing 1 true
	// urn:hookrelay:problem:not-found
}

// An endpoint with pending rows is deleted only when forced, which drops
// them.
func Example_clientDeleteEndpoint() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	_, err := c.DeleteEndpoint(ctx, "acme", "billing", false)
	var p *relayclient.Problem
	if errors.As(err, &p) && p.Type == relayclient.TypeEndpointHasBacklog {
		fmt.Println("pending:", p.BacklogRows)
	}
	deleted, err := c.DeleteEndpoint(ctx, "acme", "billing", true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("dropped:", deleted.DroppedRows)
	// Output:
	// pending: 1
	// dropped: 1
}

// Outbox pages through a stream's pending rows.
func Example_clientOutbox() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	for _, rid := range []string{"r-1", "r-2", "r-3"} {
		if _, err := c.Ingest(ctx, "acme", expired(rid)); err != nil {
			log.Fatal(err)
		}
	}
	q := relayclient.OutboxQuery{Limit: 2}
	for {
		page, err := c.Outbox(ctx, "acme", "billing", q)
		if err != nil {
			log.Fatal(err)
		}
		for _, row := range page.Rows {
			fmt.Println(row.ReservationID, row.Kind, row.LastAttempt == nil)
		}
		if page.NextCursor == nil {
			break
		}
		q.Cursor = *page.NextCursor
		fmt.Println("--")
	}
	// Output:
	// r-1 expired true
	// r-2 expired true
	// --
	// r-3 expired true
}

// Replay makes a stuck row the first its stream tries, now.
// An operator lists every namespace with its endpoints and backlog, a page
// at a time.
func Example_clientNamespaces() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	if _, err := c.Ingest(ctx, "acme", expired("r-1")); err != nil {
		log.Fatal(err)
	}
	q := relayclient.NamespaceQuery{}
	for {
		page, err := c.Namespaces(ctx, q)
		if err != nil {
			log.Fatal(err)
		}
		for _, ns := range page.Namespaces {
			fmt.Println(ns.Namespace, ns.Endpoints, ns.Backlog.Rows)
		}
		if page.NextCursor == nil {
			break
		}
		q.Cursor = *page.NextCursor
	}
	// Output:
	// acme 1 1
}

func Example_clientReplay() {
	c, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	for _, rid := range []string{"r-1", "r-2"} {
		if _, err := c.Ingest(ctx, "acme", expired(rid)); err != nil {
			log.Fatal(err)
		}
	}
	res, err := c.Replay(ctx, "acme", "billing", "r-2")
	if err != nil {
		log.Fatal(err)
	}
	page, err := c.Outbox(ctx, "acme", "billing", relayclient.OutboxQuery{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.ReservationID, res.Sequence == page.Rows[1].Sequence, page.State)
	_, err = c.Replay(ctx, "acme", "billing", "r-9")
	fmt.Println(relayclient.ProblemType(err))
	// Output:
	// r-2 true due
	// urn:hookrelay:problem:not-pending
}

func Example_clientHealthz() {
	c, stop := exampleClient()
	defer stop()
	fmt.Println(c.Healthz(context.Background()))
	// Output:
	// <nil>
}

func Example_clientReadyz() {
	c, stop := exampleClient()
	defer stop()
	if err := c.Readyz(context.Background()); err != nil {
		fmt.Println("not ready:", err)
		return
	}
	fmt.Println("ready")
	// Output:
	// ready
}

// A receiver fetches the key list its mkit-hook verifier checks with.
func Example_clientHookKeys() {
	c, stop := exampleClient()
	defer stop()

	data, err := c.HookKeys(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	keys, err := hookverify.ParseKeyList(data)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(keys.Keys), keys.Keys[0].Alg)
	// Output:
	// 1 ed25519
}

func Example_problemType() {
	c, stop := exampleClient()
	defer stop()

	_, err := c.Ingest(context.Background(), "acme", relayclient.Outcome{ReservationID: "r-1"})
	switch relayclient.ProblemType(err) {
	case "":
		fmt.Println("no problem:", err)
	case relayclient.TypeInvalidOutcome:
		fmt.Println("refused:", err)
	default:
		fmt.Println("other:", err)
	}
	// Output:
	// refused: relayclient: 400 invalid-outcome: repository must not be empty
}

// The caller's request id goes to relay, whose logs and problems carry it.
func Example_withRequestID() {
	c, stop := exampleClient()
	defer stop()

	ctx := relayclient.WithRequestID(context.Background(), "job-42.ingest")
	_, err := c.Endpoint(ctx, "acme", "nope")
	var p *relayclient.Problem
	if errors.As(err, &p) {
		fmt.Println(p.Status, p.RequestID)
	}
	// Output:
	// 404 job-42.ingest
}

var httpClient = http.Client{Timeout: 30 * time.Second}
