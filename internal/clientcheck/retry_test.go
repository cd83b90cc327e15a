package clientcheck_test

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/relayclient"
)

// front is a server before a relay that answers some ingest requests
// itself: rule(n) is called with the 1-based number of each ingest request
// and says whether to answer 503 instead of the relay's answer, and if so
// whether to pass the request to the relay first (stored, answer lost).
type front struct {
	relay http.Handler
	rule  func(n int) (pass, unavailable bool)

	mu     sync.Mutex
	n      int
	bodies [][]byte
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/outcomes") {
		f.relay.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.n++
	n := f.n
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	pass, unavailable := f.rule(n)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !unavailable {
		f.relay.ServeHTTP(w, r)
		return
	}
	if pass {
		// Stored, and the answer lost: what a relay restarting after its
		// write, or a proxy timing out, looks like to the producer.
		f.relay.ServeHTTP(httptest.NewRecorder(), r)
	}
	rec := httptest.NewRecorder()
	rec.Header().Set(httpapi.HeaderRequestID, "front")
	httpapi.WriteProblem(rec, r, httpapi.NewProblem(httpapi.SlugUnavailable, "the store is unavailable for now; retry"))
	maps.Copy(w.Header(), rec.Header())
	// Retry at once: the client's waits are relayclient's own tests' concern.
	w.Header().Set("Retry-After", "0")
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func (f *front) requests() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.bodies)
}

func backlogRows(t *testing.T, c *relayclient.Client, ns, id string) uint64 {
	t.Helper()
	ep, err := c.Endpoint(t.Context(), ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return ep.Backlog.Rows
}

func registered(t *testing.T, r *relay) *relayclient.Client {
	t.Helper()
	admin, _ := client(t, r.url, r.token(httpapi.ScopeAdmin))
	if _, err := admin.PutEndpoint(t.Context(), "acme", "billing", relayclient.EndpointConfig{URL: "http://127.0.0.1:9/hooks"}); err != nil {
		t.Fatal(err)
	}
	return admin
}

// A request stored but answered 503 is sent again with the same bytes,
// and its outcomes answer duplicate: one copy each.
func TestARetriedRequestAnswersDuplicateNotASecondCopy(t *testing.T) {
	r := startRelay(t)
	admin := registered(t, r)
	f := &front{relay: r.handler, rule: func(n int) (bool, bool) { return true, n == 2 }}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, _ := client(t, srv.URL, r.token(httpapi.ScopeOutcomesWrite))

	in := outcomes("r", 250)
	res, err := c.IngestAll(t.Context(), "acme", in)
	if err != nil || len(res) != 250 {
		t.Fatalf("%d results, %v", len(res), err)
	}
	for i, r := range res {
		want := relayclient.StatusAccepted
		if i >= 100 && i < 200 {
			want = relayclient.StatusDuplicate
		}
		if r.Status != want || r.ReservationID != in[i].ReservationID {
			t.Fatalf("result %d: %+v, want %s of %s", i, r, want, in[i].ReservationID)
		}
	}
	bodies := f.requests()
	if len(bodies) != 4 || !bytes.Equal(bodies[1], bodies[2]) {
		t.Fatalf("%d requests; the retry is the same bytes: %v", len(bodies), len(bodies) == 4 && bytes.Equal(bodies[1], bodies[2]))
	}
	if n := backlogRows(t, admin, "acme", "billing"); n != 250 {
		t.Fatalf("%d rows pending for 250 outcomes", n)
	}
}

// A request that keeps failing ends IngestAll: the results before it are
// returned with the error, and sending the rest again completes it.
func TestIngestAllStopsAtARequestThatFailsForGood(t *testing.T) {
	r := startRelay(t)
	admin := registered(t, r)
	var down sync.Mutex
	failing := true
	// From the third request on, each is stored and then answered 503
	// while failing holds: the last chunk is stored, its answers lost.
	f := &front{relay: r.handler, rule: func(n int) (bool, bool) {
		down.Lock()
		defer down.Unlock()
		return true, n >= 3 && failing
	}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, _ := client(t, srv.URL, r.token(httpapi.ScopeOutcomesWrite), func(o *relayclient.Options) { o.MaxAttempts = 3 })

	in := outcomes("r", 250)
	res, err := c.IngestAll(t.Context(), "acme", in)
	wantProblem(t, err, http.StatusServiceUnavailable, relayclient.TypeUnavailable)
	if len(res) != 200 || statuses(res)[relayclient.StatusAccepted] != 200 {
		t.Fatalf("%d results before the failure: %v", len(res), statuses(res))
	}
	if n := len(f.requests()); n != 2+3 {
		t.Fatalf("%d requests, want 2 and 3 attempts of the third", n)
	}

	down.Lock()
	failing = false
	down.Unlock()
	rest, err := c.IngestAll(t.Context(), "acme", in[len(res):])
	if err != nil || len(rest) != 50 || statuses(rest)[relayclient.StatusDuplicate] != 50 {
		t.Fatalf("the rest again: %v, %v", statuses(rest), err)
	}
	if n := backlogRows(t, admin, "acme", "billing"); n != 250 {
		t.Fatalf("%d rows pending for 250 outcomes", n)
	}
}

// A request with a broken outcome stores nothing of its own; the problem's
// errors index into the caller's slice, not the request's.
func TestInvalidOutcomesIndexIntoTheCallersSlice(t *testing.T) {
	r := startRelay(t)
	admin := registered(t, r)
	c, ct := client(t, r.url, r.token(httpapi.ScopeOutcomesWrite))
	ct.checkRequests = false // broken on purpose

	in := outcomes("r", 150)
	in[120].ReservationID = "s:synthetic"
	in[130].Repository = ""
	res, err := c.IngestAll(t.Context(), "acme", in)
	p := wantProblem(t, err, http.StatusBadRequest, relayclient.TypeInvalidOutcome)
	if len(res) != 100 {
		t.Fatalf("%d results before the broken request", len(res))
	}
	if len(p.Errors) != 2 || p.Errors[0].Index != 120 || p.Errors[1].Index != 130 {
		t.Fatalf("errors %+v, want indexes 120 and 130", p.Errors)
	}
	if n := backlogRows(t, admin, "acme", "billing"); n != 100 {
		t.Fatalf("%d rows pending, want the first request's 100", n)
	}
}

// The request's own refusals, without a request: a namespace or name that
// would change the path, and nothing to send.
func TestCarelessCalls(t *testing.T) {
	var requests int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		http.Error(w, "no", http.StatusTeapot)
	}))
	defer srv.Close()
	c, err := relayclient.New(srv.URL, relayclient.Options{Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for name, err := range map[string]error{
		"empty namespace":        second(c.Ingest(ctx, "", committed("r-1"))),
		"namespace with a slash": second(c.IngestAll(ctx, "acme/endpoints", outcomes("r", 1))),
		"namespace ..":           second(c.ListEndpoints(ctx, "..")),
		"upper-case endpoint":    second(c.Endpoint(ctx, "acme", "Billing")),
		"empty endpoint":         second(c.PutEndpoint(ctx, "acme", "", relayclient.EndpointConfig{})),
		"endpoint with a query":  second(c.DeleteEndpoint(ctx, "acme", "b?force=true", false)),
		"outbox of no endpoint":  second(c.Outbox(ctx, "acme", "", relayclient.OutboxQuery{})),
		"synthetic replay":       second(c.Replay(ctx, "acme", "billing", "s:1")),
		"replay with a slash":    second(c.Replay(ctx, "acme", "billing", "a/b")),
		"long reservation id":    second(c.Replay(ctx, "acme", "billing", strings.Repeat("r", 129))),
	} {
		if !errorsIsInvalid(err) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	res, err := c.IngestAll(ctx, "acme", nil)
	if res != nil || err != nil {
		t.Errorf("no outcomes: %v, %v", res, err)
	}
	if requests != 0 {
		t.Fatalf("%d requests sent", requests)
	}
}

func second[T any](_ T, err error) error { return err }

func errorsIsInvalid(err error) bool { return errors.Is(err, relayclient.ErrInvalid) }
