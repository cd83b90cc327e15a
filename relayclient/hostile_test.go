package relayclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/relayclient"
)

const secretToken = "eyJ.secret-token.sig"

// hostile is a client of a server answering with h, whose waits are
// recorded and never made.
func hostile(t *testing.T, h http.HandlerFunc, opts ...func(*relayclient.Options)) (*relayclient.Client, *waits, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	o := relayclient.Options{Token: secretToken, MaxAttempts: 3}
	for _, f := range opts {
		f(&o)
	}
	c, err := relayclient.New(srv.URL, o)
	if err != nil {
		t.Fatal(err)
	}
	w := &waits{}
	relayclient.SetSleep(c, w.sleep)
	return c, w, &n
}

// clean fails the test when err is nil or its text holds the token or a
// request's payload.
func clean(t *testing.T, err error, payload ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, s := range append(payload, secretToken, "acme/widgets") {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("the error %q holds %q", err, s)
		}
	}
}

func answer(status int, contentType, body string, header ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
}

func TestGarbageAnswers(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":             `<html>ok</html>`,
		"truncated":            `{"results":[{"reservation_id":"r-0","status":"acc`,
		"wrong shape":          `{"results":{"reservation_id":"r-0"}}`,
		"too few results":      `{"results":[]}`,
		"too many results":     `{"results":[{"reservation_id":"r-0","status":"accepted"},{"reservation_id":"r-0","status":"accepted"}]}`,
		"another outcome's id": `{"results":[{"reservation_id":"r-9","status":"accepted"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			c, _, _ := hostile(t, answer(http.StatusAccepted, "application/json", body))
			res, err := c.IngestAll(context.Background(), "acme", outcomes("r", 1))
			clean(t, err)
			if res != nil {
				t.Fatalf("results %v from a garbage answer", res)
			}
			if _, err := c.Ingest(context.Background(), "acme", committed("r-0")); err == nil {
				t.Fatal("one outcome: no error")
			}
		})
	}
	for _, body := range []string{`[1,2`, `null`, ``, `{"endpoint":"billing"} {}`} {
		c, _, _ := hostile(t, answer(http.StatusOK, "application/json", body))
		_, err := c.Outbox(context.Background(), "acme", "billing", relayclient.OutboxQuery{})
		clean(t, err)
	}
}

// An answer over MaxResponseBytes is refused, read no further, whether a
// body that ends or one that never does.
func TestHugeAnswers(t *testing.T) {
	chunk := strings.Repeat("x", 64<<10)
	endless := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return // the client hung up, as it should
			}
		}
	}
	huge := `{"endpoints":[],"pad":"` + strings.Repeat("x", relayclient.MaxResponseBytes) + `"}`
	for name, h := range map[string]http.HandlerFunc{
		"endless":          endless,
		"huge":             answer(http.StatusOK, "application/json", huge),
		"huge problem":     answer(http.StatusInternalServerError, "application/problem+json", `{"type":"urn:hookrelay:problem:internal","detail":"`+strings.Repeat("x", relayclient.MaxResponseBytes)+`"}`),
		"huge 503 forever": answer(http.StatusServiceUnavailable, "text/plain", huge, "Retry-After", "0"),
	} {
		t.Run(name, func(t *testing.T) {
			c, _, n := hostile(t, h)
			_, err := c.ListEndpoints(context.Background(), "acme")
			clean(t, err)
			if !strings.Contains(err.Error(), "larger than") {
				t.Fatalf("%v, want the answer refused for its size", err)
			}
			if n.Load() != 1 {
				t.Fatalf("%d requests: an oversized answer is not retried", n.Load())
			}
		})
	}
}

const unavailable = `{"type":"urn:hookrelay:problem:unavailable","title":"Service unavailable","status":503,"request_id":"x"}`

// A 503 is retried after its Retry-After, MaxAttempts times in all.
func TestA503ForeverIsRetriedABoundedNumberOfTimes(t *testing.T) {
	c, w, n := hostile(t, answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", "2"))
	_, err := c.IngestAll(context.Background(), "acme", outcomes("r", 1))
	p := wantStatus(t, err, http.StatusServiceUnavailable)
	if p.Type != relayclient.TypeUnavailable || p.RetryAfter != 2*time.Second {
		t.Fatalf("problem %+v", p)
	}
	if n.Load() != 3 || fmt.Sprint(w.all()) != "[2s 2s]" {
		t.Fatalf("%d attempts, waits %v; want 3 attempts, 2 waits of 2s", n.Load(), w.all())
	}
	clean(t, err)

	// Every /v1 call retries; the unauthenticated ones say how relay is
	// and are not retried.
	c, w, n = hostile(t, answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", "1"), func(o *relayclient.Options) { o.MaxAttempts = 2 })
	_, err = c.DeleteEndpoint(context.Background(), "acme", "billing", true)
	wantStatus(t, err, http.StatusServiceUnavailable)
	if n.Load() != 2 || len(w.all()) != 1 {
		t.Fatalf("delete: %d attempts, waits %v", n.Load(), w.all())
	}
	n.Store(0)
	if err := c.Readyz(context.Background()); err == nil || n.Load() != 1 {
		t.Fatalf("readyz: %v after %d attempts", err, n.Load())
	}

	c, _, n = hostile(t, answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", "0"), func(o *relayclient.Options) { o.MaxAttempts = 1 })
	if _, err := c.Ingest(context.Background(), "acme", committed("r-1")); err == nil || n.Load() != 1 {
		t.Fatalf("MaxAttempts 1: %v after %d attempts", err, n.Load())
	}
}

func wantStatus(t *testing.T, err error, status int) *relayclient.Problem {
	t.Helper()
	var p *relayclient.Problem
	if !errors.As(err, &p) || p.Status != status {
		t.Fatalf("%v, want a *Problem of status %d", err, status)
	}
	return p
}

func TestRetryAfterHostileOrMalformed(t *testing.T) {
	now := time.Date(2025, 11, 30, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		retryAfter string
		attempts   int32
		waits      string
		read       time.Duration
	}{
		{"", 3, "[1s 1s]", -1},
		{"soon", 3, "[1s 1s]", -1},
		{"-5", 3, "[1s 1s]", -1},
		{"1.5", 3, "[1s 1s]", -1},
		{"0", 3, "[0s 0s]", 0},
		{"30", 3, "[30s 30s]", 30 * time.Second},
		{"31", 1, "[]", 31 * time.Second},
		{"3600", 1, "[]", time.Hour},
		{"99999999999999999999999999", 1, "[]", relayclient.MaxDuration},
		{"9223372036854775807", 1, "[]", relayclient.MaxDuration},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 3, "[5s 5s]", 5 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 3, "[0s 0s]", 0},
		{now.Add(48 * time.Hour).Format(http.TimeFormat), 1, "[]", 48 * time.Hour},
	} {
		c, w, n := hostile(t, answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", tc.retryAfter))
		relayclient.SetNow(c, func() time.Time { return now })
		_, err := c.Ingest(context.Background(), "acme", committed("r-1"))
		p := wantStatus(t, err, http.StatusServiceUnavailable)
		if n.Load() != tc.attempts || fmt.Sprint(w.all()) != tc.waits || p.RetryAfter != tc.read {
			t.Errorf("Retry-After %q: %d attempts, waits %v, read %v; want %d, %s, %v", tc.retryAfter, n.Load(), w.all(), p.RetryAfter, tc.attempts, tc.waits, tc.read)
		}
	}
}

// The wait ends with the context: the error says both why it stopped and
// what relay answered.
func TestTheWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", "20")(w, r)
	}))
	defer srv.Close()
	// The caller gives up once the answer is in, while the client waits.
	giveUp := roundTrip(func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		cancel()
		return resp, err
	})
	c, err := relayclient.New(srv.URL, relayclient.Options{Token: secretToken, HTTPClient: &http.Client{Transport: giveUp}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.IngestAll(ctx, "acme", outcomes("r", 1)) // the real wait: it must not last 20 s
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
	wantStatus(t, err, http.StatusServiceUnavailable)
	if n.Load() != 1 {
		t.Fatalf("%d attempts", n.Load())
	}
	clean(t, err)

	// A deadline sooner than the Retry-After: no wait, no retry.
	c2, w, n2 := hostile(t, answer(http.StatusServiceUnavailable, "application/problem+json", unavailable, "Retry-After", "20"))
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	_, err = c2.Ingest(dctx, "acme", committed("r-1"))
	wantStatus(t, err, http.StatusServiceUnavailable)
	if n2.Load() != 1 || len(w.all()) != 0 {
		t.Fatalf("%d attempts, waits %v, past the deadline", n2.Load(), w.all())
	}
}

// A redirect is never followed: the token goes to no other host.
func TestARedirectIsNotFollowed(t *testing.T) {
	var leaked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Add(1)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer elsewhere.Close()
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		c, _, n := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, elsewhere.URL+r.URL.Path, status)
		})
		_, err := c.Ingest(context.Background(), "acme", committed("r-1"))
		wantStatus(t, err, status)
		clean(t, err)
		if _, err := c.HookKeys(context.Background()); err == nil {
			t.Fatalf("%d: the key list redirected is no key list", status)
		}
		if n.Load() != 2 || leaked.Load() != 0 {
			t.Fatalf("%d: %d requests here, %d elsewhere", status, n.Load(), leaked.Load())
		}
	}
	// Nor with a caller's own client that would follow.
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	c, err := relayclient.New(redirect.URL, relayclient.Options{Token: secretToken, HTTPClient: &http.Client{
		CheckRedirect: func(*http.Request, []*http.Request) error { return nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ListEndpoints(context.Background(), "acme")
	wantStatus(t, err, http.StatusTemporaryRedirect)
	if leaked.Load() != 0 {
		t.Fatalf("%d requests elsewhere", leaked.Load())
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestProblemsWithoutTheirFields(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
		typ, text               string
	}{
		{"empty problem", "application/problem+json", `{}`, 500, "", "relayclient: 500 Internal Server Error"},
		{"type only", "application/problem+json", `{"type":"urn:hookrelay:problem:not-found"}`, 404, relayclient.TypeNotFound, "relayclient: 404 not-found"},
		{"null members", "application/problem+json", `{"type":null,"title":null,"errors":null}`, 400, "", "relayclient: 400 Bad Request"},
		{"wrong types", "application/problem+json", `{"type":1,"errors":"x"}`, 409, "", "relayclient: 409 Conflict"},
		{"not JSON", "application/problem+json", `oops`, 502, "", "relayclient: 502 Bad Gateway"},
		{"a page echoing the request", "text/html", "<p>" + secretToken + " acme/widgets</p>", 502, "", "relayclient: 502 Bad Gateway"},
		{"a forged log line", "application/problem+json", `{"type":"urn:hookrelay:problem:internal","detail":"a\nlevel=ERROR b"}`, 500, relayclient.TypeInternal, "relayclient: 500 internal: alevel=ERROR b"},
		{"another status in the body", "application/problem+json", `{"type":"urn:hookrelay:problem:conflict","status":200}`, 409, relayclient.TypeConflict, "relayclient: 409 conflict"},
	} {
		c, _, _ := hostile(t, answer(tc.status, tc.contentType, tc.body))
		_, err := c.Ingest(context.Background(), "acme", committed("r-1"))
		p := wantStatus(t, err, tc.status)
		if p.Type != tc.typ || err.Error() != tc.text {
			t.Errorf("%s: type %q, %q; want %q, %q", tc.name, p.Type, err, tc.typ, tc.text)
		}
		if relayclient.ProblemType(err) != tc.typ {
			t.Errorf("%s: ProblemType %q", tc.name, relayclient.ProblemType(err))
		}
		clean(t, err)
	}
	if relayclient.ProblemType(errors.New("x")) != "" || relayclient.ProblemType(nil) != "" {
		t.Error("ProblemType of no problem")
	}
}

// 10,000 outcomes go in requests of at most 100, one after another, and
// their results come back in input order.
func TestTenThousandOutcomes(t *testing.T) {
	var sizes []int
	c, _, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Outcomes []relayclient.Outcome `json:"outcomes"`
		}
		if err := jsonDecode(r, &body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sizes = append(sizes, len(body.Outcomes))
		var b strings.Builder
		b.WriteString(`{"results":[`)
		for i, o := range body.Outcomes {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"reservation_id":%q,"status":"accepted"}`, o.ReservationID)
		}
		b.WriteString("]}")
		answer(http.StatusAccepted, "application/json", b.String())(w, r)
	})
	in := outcomes("r", 10_000)
	res, err := c.IngestAll(context.Background(), "acme", in)
	if err != nil || len(res) != len(in) {
		t.Fatalf("%d results, %v", len(res), err)
	}
	for i := range res {
		if res[i].ReservationID != in[i].ReservationID {
			t.Fatalf("result %d is %s's", i, res[i].ReservationID)
		}
	}
	if len(sizes) != 100 {
		t.Fatalf("%d requests", len(sizes))
	}
	for i, n := range sizes {
		if n != relayclient.MaxOutcomesPerRequest {
			t.Fatalf("request %d held %d outcomes", i, n)
		}
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		url  string
		opts relayclient.Options
	}{
		{"", relayclient.Options{}},
		{"relay.example.com", relayclient.Options{}},
		{"ftp://relay.example.com", relayclient.Options{}},
		{"https://user:" + secretToken + "@relay.example.com", relayclient.Options{}},
		{"https://relay.example.com?x=1", relayclient.Options{}},
		{"https://relay.example.com#f", relayclient.Options{}},
		{"https://relay.example.com", relayclient.Options{Token: "a\r\nX-Evil: 1"}},
		{"https://relay.example.com", relayclient.Options{MaxAttempts: -1}},
		{"https://relay.example.com", relayclient.Options{MaxRetryWait: -time.Second}},
	} {
		if _, err := relayclient.New(tc.url, tc.opts); err == nil {
			t.Errorf("New(%q, %+v) took it", tc.url, tc.opts)
		} else {
			clean(t, err)
		}
	}
}

func jsonDecode(r *http.Request, v any) error { return json.NewDecoder(r.Body).Decode(v) }

// The token goes with the /v1 routes only: the routes without auth never
// see it.
func TestTheTokenGoesOnlyWhereItIsNeeded(t *testing.T) {
	seen := map[string]string{}
	var mu sync.Mutex
	c, _, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = r.Header.Get("Authorization")
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	})
	_ = c.Healthz(context.Background())
	_ = c.Readyz(context.Background())
	_, _ = c.HookKeys(context.Background())
	_, _ = c.ListEndpoints(context.Background(), "acme")
	want := map[string]string{
		"/healthz": "", "/readyz": "", "/.well-known/mkit-hook-keys.json": "",
		"/v1/namespaces/acme/endpoints": "Bearer " + secretToken,
	}
	if !maps.Equal(seen, want) {
		t.Fatalf("Authorization sent %q, want %q", seen, want)
	}
}

// A stream being delivered this instant is retried after its Retry-After;
// any other 409 is the caller's to handle.
func TestStreamBusyIsRetriedAndOtherConflictsAreNot(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	c, w, n := hostile(t, func(rw http.ResponseWriter, r *http.Request) {
		if busy.Swap(false) {
			answer(http.StatusConflict, "application/problem+json", `{"type":"urn:hookrelay:problem:stream-busy","title":"Stream busy","status":409,"request_id":"x"}`, "Retry-After", "1")(rw, r)
			return
		}
		answer(http.StatusAccepted, "application/json", `{"endpoint":"billing","reservation_id":"r-1","sequence":3,"next_attempt_at":"2025-11-30T00:00:00.000Z"}`)(rw, r)
	})
	res, err := c.Replay(context.Background(), "acme", "billing", "r-1")
	if err != nil || res.Sequence != 3 || !res.NextAttemptAt.Equal(time.Date(2025, 11, 30, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("%+v, %v", res, err)
	}
	if n.Load() != 2 || fmt.Sprint(w.all()) != "[1s]" {
		t.Fatalf("%d attempts, waits %v", n.Load(), w.all())
	}

	c, _, n = hostile(t, answer(http.StatusConflict, "application/problem+json", `{"type":"urn:hookrelay:problem:endpoint-disabled","status":409}`, "Retry-After", "1"))
	_, err = c.Replay(context.Background(), "acme", "billing", "r-1")
	if relayclient.ProblemType(err) != relayclient.TypeEndpointDisabled || n.Load() != 1 {
		t.Fatalf("%v after %d attempts", err, n.Load())
	}
}

// Not ready says why, as relay's text does.
func TestNotReadySaysWhy(t *testing.T) {
	c, _, _ := hostile(t, answer(http.StatusServiceUnavailable, "text/plain; charset=utf-8", "not ready: maxmemory-policy must be noeviction\n"))
	err := c.Readyz(context.Background())
	p := wantStatus(t, err, http.StatusServiceUnavailable)
	if p.Detail != "maxmemory-policy must be noeviction" {
		t.Fatalf("detail %q", p.Detail)
	}
	c, _, _ = hostile(t, answer(http.StatusInternalServerError, "text/plain", "boom"))
	if err := c.Healthz(context.Background()); err == nil {
		t.Fatal("healthz 500 is no error")
	}
}

// waits records the waits a client would make, making none.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.d)
}

func committed(rid string) relayclient.Outcome {
	return relayclient.Outcome{
		ReservationID: rid, Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(),
		Committed: &relayclient.Committed{BytesStored: 1024, Refs: []relayclient.Ref{
			{Name: "refs/heads/main", New: strings.Repeat("ab", 32)},
			{Name: "refs/heads/old", Deleted: true},
		}},
	}
}

// outcomes are n outcomes of every kind but read_served, ids prefix-0 ...
func outcomes(prefix string, n int) []relayclient.Outcome {
	out := make([]relayclient.Outcome, n)
	now := time.Now().UnixMilli()
	for i := range out {
		o := relayclient.Outcome{ReservationID: fmt.Sprintf("%s-%d", prefix, i), Repository: "acme/widgets", OccurredUnixMs: now}
		switch i % 3 {
		case 0:
			o.Committed = &relayclient.Committed{NewToRepo: uint64(i)}
		case 1:
			o.Aborted = &relayclient.Aborted{Reason: "client_cancelled", Detail: "gone"}
		default:
			o.Expired = &relayclient.Expired{}
		}
		out[i] = o
	}
	return out
}
