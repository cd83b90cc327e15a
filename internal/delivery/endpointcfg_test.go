package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// clockDeadlines are call deadlines by the handler's manual clock: each
// call's context ends once the clock has passed its start plus the
// timeout the handler asked for.
type clockDeadlines struct {
	clk       *clock.Manual
	mu        sync.Mutex
	requested []time.Duration
	open      []clockDeadline
}

type clockDeadline struct {
	at     time.Time
	cancel context.CancelFunc
}

func (d *clockDeadlines) withDeadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.requested = append(d.requested, timeout)
	d.open = append(d.open, clockDeadline{at: d.clk.Now().Add(timeout), cancel: cancel})
	return c, cancel
}

// advance moves the clock and ends every call whose deadline it passed.
func (d *clockDeadlines) advance(by time.Duration) {
	d.clk.Advance(by)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, o := range d.open {
		if !d.clk.Now().Before(o.at) {
			o.cancel()
		}
	}
}

// slowReceiver answers after took by the clock: a call whose deadline
// passed first gets no answer, as a client that gave up gets none.
type slowReceiver struct {
	d    *clockDeadlines
	took time.Duration
	capture
}

func (s *slowReceiver) Deliver(ctx context.Context, o Parcel) error {
	s.d.advance(s.took)
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return s.capture.Deliver(ctx, o)
	}
}

func TestAnEndpointsOwnTimeoutBoundsEachCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		timeoutMs int
		delivered bool
	}{{1000, false}, {2000, true}} {
		eachBackend(t, func(t *testing.T, e *env) {
			e.putEndpoint(schema.Endpoint{Enabled: true, TimeoutMs: tc.timeoutMs})
			e.seed("a")
			d := &clockDeadlines{clk: e.Clk}
			sink := &slowReceiver{d: d, took: 1200 * time.Millisecond}
			h := &Handler{Sink: sink, Clock: e.Clk, deadline: d.withDeadline}
			e.fire(h)
			want := time.Duration(tc.timeoutMs) * time.Millisecond
			if !slices.Equal(d.requested, []time.Duration{want}) {
				t.Fatalf("timeout_ms %d: calls bounded by %v, want [%v]", tc.timeoutMs, d.requested, want)
			}
			a, failed := e.attempt("a")
			switch {
			case tc.delivered && (e.backlogRows() != 0 || failed):
				t.Fatalf("timeout_ms %d: backlog %d, attempt %+v: a 1.2 s answer should be delivered", tc.timeoutMs, e.backlogRows(), a)
			case !tc.delivered && (e.backlogRows() != 1 || !failed || a.ErrorClass != ClassTimeout):
				t.Fatalf("timeout_ms %d: backlog %d, attempt %+v (found %v): want the call cut as a timeout", tc.timeoutMs, e.backlogRows(), a, failed)
			}
		})
	}
}

// A call is launched only while it can end within the fire's bound (15 s
// by default): an endpoint with a 10 s timeout gets calls for 5 s, so its
// fire ends by the same bound as one of 5 s calls.
func TestALongerTimeoutShortensTheFiresLaunchWindowNotItsBound(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, TimeoutMs: schema.MaxTimeoutMs})
		e.seed("a", "b", "c", "d")
		d := &clockDeadlines{clk: e.Clk}
		// Each answer takes 3 s: a at 0 s, b at 3 s; c would start at 6 s,
		// when a 10 s call could end after 15 s.
		sink := &slowReceiver{d: d, took: 3 * time.Second}
		e.fire(&Handler{Sink: sink, Clock: e.Clk, deadline: d.withDeadline})
		if got := sink.rids(); !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("delivered %v, want [a b]", got)
		}
		if bound := (&Handler{}).fireBound(); bound != 15*time.Second || bound-10*time.Second < 5*time.Second {
			t.Fatalf("fire bound %v", bound)
		}
	})
}

// hdrReceiver refuses the first request and takes the rest, recording each.
type hdrReceiver struct {
	mu   sync.Mutex
	seen []*http.Request
	body [][]byte
}

func (r *hdrReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req)
	r.body = append(r.body, b)
	if len(r.seen) == 1 {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func TestTheReceiverGetsTheEndpointsHeadersOnEveryAttempt(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		rcv := &hdrReceiver{}
		srv := httptest.NewServer(rcv)
		t.Cleanup(srv.Close)
		ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ch.CloseIdleConnections)
		secret := schema.Secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		e.putEndpoint(schema.Endpoint{
			URL: srv.URL + "/in", Scheme: schema.SchemeStandardWebhooks, Secrets: []schema.Secret{secret}, Enabled: true,
			Headers: map[string]schema.HeaderValue{"x-tenant": "acme", "authorization": "Bearer t0k3n"},
		})
		e.seed("a")
		sink := &Webhooks{Sender: &outbound.Sender{Channel: ch, Now: e.Clk.Now}, Audience: "https://relay.example.com"}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if e.backlogRows() != 1 {
			t.Fatalf("backlog %d after a refused first attempt", e.backlogRows())
		}
		e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk})
		if e.backlogRows() != 0 {
			t.Fatalf("backlog %d after the retry", e.backlogRows())
		}
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		if len(rcv.seen) != 2 {
			t.Fatalf("receiver saw %d requests, want 2", len(rcv.seen))
		}
		v := &hookverify.StandardVerifier{Secrets: []string{string(secret)}, Now: e.Clk.Now}
		for i, r := range rcv.seen {
			if r.Header.Get("X-Tenant") != "acme" || r.Header.Get("Authorization") != "Bearer t0k3n" {
				t.Errorf("attempt %d: x-tenant %q, authorization %q", i+1, r.Header.Get("X-Tenant"), r.Header.Get("Authorization"))
			}
			if err := v.Verify(r.Header, rcv.body[i]); err != nil {
				t.Errorf("attempt %d does not verify: %v", i+1, err)
			}
		}
	})
}
