package relaytest

import (
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Answer is what a scripted receiver does with one verified request.
type Answer struct {
	Status int
	Header http.Header
	// Hang holds the request until the relay gives up on it.
	Hang bool
	// Delay is spent before answering.
	Delay time.Duration
	// Body is the answer's body, which relay keeps the start of.
	Body string
}

// Script decides a receiver's answer from the reservation id and how many
// verified requests for it came before (0 for the first).
type Script func(rid string, attempt int) Answer

// OK answers every request 204.
func OK(string, int) Answer { return Answer{Status: http.StatusNoContent} }

// Arrival is one verified request a receiver took.
type Arrival struct {
	// RID is the outcome's reservation id, or an operator event's id.
	RID string
	// Type is the webhook's type ("outcome.committed", "endpoint.disabled").
	Type   string
	Scheme string
	At     time.Time
	// Status is the answer the script chose; 0 for a request held.
	Status int
	// MessageID is the webhook's id (webhook-id, or the body's id) and
	// Signature its signature header: an attempt repeats the one and
	// never the other.
	MessageID, Signature string
	// TraceParent is the request's W3C traceparent, "" when it had none.
	TraceParent string
}

// ReceiverConfig is how NewReceiver starts a receiver.
type ReceiverConfig struct {
	// Name is the last element of the receiver's URL, and tells receivers
	// apart in failures; empty, the URL is the bare origin.
	Name string
	// Script answers each verified request; nil is OK.
	Script Script
	// Notify (buffered) hears, without blocking the receiver, of every
	// request, verified or not.
	Notify chan<- struct{}
	// Verifier checks every request; nil, a Standard Webhooks verifier of
	// the receiver's Secret. It is called once, with the receiver's URL
	// and Secret set.
	Verifier func(rc *Receiver) hookverify.Verifier
}

// Receiver verifies every request as a webhook receiver would and answers
// as its script says. A delivery is a verified request it answered 2xx.
type Receiver struct {
	Name string
	URL  string
	// Secret is a fresh Standard Webhooks secret of this receiver's.
	Secret string

	notify chan<- struct{}
	script Script

	mu        sync.Mutex
	arrivals  []Arrival
	attempts  map[string]int
	delivered map[string]int
	firstAt   map[string]time.Time
	rejected  []error
}

// NewReceiver starts a receiver on a free loopback port, closed when the
// test ends.
func NewReceiver(t testing.TB, cfg ReceiverConfig) *Receiver {
	t.Helper()
	secret, err := schema.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &Receiver{
		Name: cfg.Name, URL: "http://" + ln.Addr().String(), Secret: string(secret), notify: cfg.Notify, script: cfg.Script,
		attempts: map[string]int{}, delivered: map[string]int{}, firstAt: map[string]time.Time{},
	}
	if cfg.Name != "" {
		rc.URL += "/" + cfg.Name
	}
	if rc.script == nil {
		rc.script = OK
	}
	var v hookverify.Verifier = &hookverify.StandardVerifier{Secrets: []string{rc.Secret}}
	if cfg.Verifier != nil {
		v = cfg.Verifier(rc)
	}
	srv := &http.Server{Handler: hookverify.Middleware(v, http.HandlerFunc(rc.serve), hookverify.WithErrorHook(func(_ *http.Request, err error) {
		rc.mu.Lock()
		rc.rejected = append(rc.rejected, err)
		rc.mu.Unlock()
		rc.poke()
	}))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rc
}

func (rc *Receiver) poke() {
	select {
	case rc.notify <- struct{}{}:
	default:
	}
}

func (rc *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	var event struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			ReservationID string `json:"reservation_id"`
			EventID       string `json:"event_id"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &event)
	rid := event.Data.ReservationID
	if rid == "" {
		rid = event.Data.EventID // an operator event
	}
	// The request verified, so it carries one scheme's headers.
	scheme := "standard-webhooks"
	id, sig := r.Header.Get("webhook-id"), r.Header.Get("webhook-signature")
	if r.Header.Get(hookverify.HeaderMkitVersion) != "" {
		scheme = "mkit-hook-v" + hookverify.MkitVersion
		id, sig = event.ID, r.Header.Get(hookverify.HeaderMkitSignature)
	}
	rc.mu.Lock()
	n := rc.attempts[rid]
	rc.attempts[rid] = n + 1
	a := rc.script(rid, n)
	status := a.Status
	if a.Hang {
		status = 0
	}
	rc.arrivals = append(rc.arrivals, Arrival{RID: rid, Type: event.Type, Scheme: scheme, At: time.Now(), Status: status, MessageID: id, Signature: sig, TraceParent: r.Header.Get("traceparent")})
	rc.mu.Unlock()
	if a.Hang {
		<-r.Context().Done()
		rc.poke()
		return
	}
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, vs := range a.Header {
		w.Header()[k] = vs
	}
	if a.Status >= 200 && a.Status < 300 {
		rc.mu.Lock()
		rc.delivered[rid]++
		if _, seen := rc.firstAt[rid]; !seen {
			rc.firstAt[rid] = time.Now()
		}
		rc.mu.Unlock()
	}
	w.WriteHeader(a.Status)
	if a.Body != "" {
		_, _ = w.Write([]byte(a.Body))
	}
	rc.poke()
}

// Arrivals are the verified requests so far, in the order they came.
func (rc *Receiver) Arrivals() []Arrival {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Arrival(nil), rc.arrivals...)
}

// Attempts are the verified requests so far per reservation id.
func (rc *Receiver) Attempts() map[string]int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.attempts)
}

// FirstDelivered is when each reservation id was first answered 2xx.
func (rc *Receiver) FirstDelivered() map[string]time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return maps.Clone(rc.firstAt)
}

// Deliveries counts every request answered 2xx, duplicates included.
func (rc *Receiver) Deliveries() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, c := range rc.delivered {
		n += c
	}
	return n
}

// Missing is how many of rids the receiver has not had delivered.
func (rc *Receiver) Missing(rids []string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, rid := range rids {
		if rc.delivered[rid] == 0 {
			n++
		}
	}
	return n
}

// Counts returns the deliveries of rids and the duplicates among them.
func (rc *Receiver) Counts(rids []string) (delivered, duplicates int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rid := range rids {
		if n := rc.delivered[rid]; n > 0 {
			delivered++
			duplicates += n - 1
		}
	}
	return delivered, duplicates
}

// Strangers are ids the receiver had delivered that are not in want: an
// outcome of another namespace, or one never posted.
func (rc *Receiver) Strangers(want map[string]bool) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for rid := range rc.delivered {
		if !want[rid] {
			out = append(out, rid)
		}
	}
	sort.Strings(out)
	return out
}

// Rejections are the errors of the requests that did not verify.
func (rc *Receiver) Rejections() []error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]error(nil), rc.rejected...)
}
