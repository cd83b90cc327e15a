package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// benchReceiver takes the webhooks and notes when each reservation id first
// arrived. It answers 204 without verifying the signature: the e2e tests
// verify, and here verifying would take CPU from the relay under test.
//
// One receiver serves every endpoint, each at a path of its own: a
// webhook is a reservation id at a path, so an outcome fanned out to E
// endpoints is E webhooks, each counted once. One server rather than E
// keeps the receiver's cost flat in E: no listener, accept loop or idle
// connections per endpoint.
type benchReceiver struct {
	url     string
	srv     *http.Server
	served  chan struct{}
	tracker atomic.Pointer[deliveryTracker]
	bad     atomic.Int64

	mu sync.Mutex
	// first is when each reservation id first arrived, at any path.
	first map[string]time.Time
	// seen holds each webhook that arrived, by webhookKey.
	seen map[string]struct{}
	// again counts the arrivals of each webhook after its first: with no
	// fault, relay delivers every outcome once to each endpoint.
	again map[string]int
}

// webhookKey names one outcome's webhook to one endpoint: its reservation
// id first, so that a phase's webhooks share the phase's prefix.
func webhookKey(rid, path string) string { return rid + " " + path }

func startBenchReceiver(ctx context.Context) (*benchReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	rc := &benchReceiver{url: "http://" + ln.Addr().String(), first: map[string]time.Time{}, seen: map[string]struct{}{}, again: map[string]int{}, served: make(chan struct{})}
	rc.srv = &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	labeled(ctx, "receiver", func(context.Context) {
		go func() {
			defer close(rc.served)
			_ = rc.srv.Serve(ln)
		}()
	})
	return rc, nil
}

func (rc *benchReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var event struct {
		Data struct {
			ReservationID string `json:"reservation_id"`
		} `json:"data"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &event)
	}
	rid := event.Data.ReservationID
	if err != nil || rid == "" {
		rc.bad.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	key := webhookKey(rid, r.URL.Path)
	rc.mu.Lock()
	_, seen := rc.seen[key]
	if seen {
		rc.again[key]++
	} else {
		rc.seen[key] = struct{}{}
		if _, ok := rc.first[rid]; !ok {
			rc.first[rid] = at
		}
	}
	rc.mu.Unlock()
	if t := rc.tracker.Load(); !seen && t != nil && strings.HasPrefix(rid, t.prefix) {
		t.arrived(at)
	}
	w.WriteHeader(http.StatusNoContent)
}

// track sends the first arrivals of t's reservation ids to t; nil stops.
func (rc *benchReceiver) track(t *deliveryTracker) { rc.tracker.Store(t) }

func (rc *benchReceiver) firstSeen(rid string) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	at, ok := rc.first[rid]
	return at, ok
}

// duplicates counts the arrivals after the first of the webhooks whose
// reservation ids start with prefix, up to now.
func (rc *benchReceiver) duplicates(prefix string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for rid, k := range rc.again {
		if strings.HasPrefix(rid, prefix) {
			n += k
		}
	}
	return n
}

func (rc *benchReceiver) close() {
	_ = rc.srv.Close()
	<-rc.served
}

// deliveryTracker follows one phase's outcomes from acceptance to the
// first arrival of each of their webhooks, fan to an outcome (the
// endpoints of its namespace). It counts webhooks. With a window it also
// gates the producers: a request is sent only while the webhooks issued
// and not yet delivered leave room for it.
type deliveryTracker struct {
	prefix string
	window int // in webhooks; 0: no gate
	step   int // the webhooks of a request the gate makes room for
	fan    int // webhooks per outcome

	mu   sync.Mutex
	cond *sync.Cond
	// issued are the webhooks of outcomes sent or being sent, less those
	// of outcomes that failed.
	issued    int
	accepted  int
	delivered int
	last      time.Time
	peak      int
	sending   bool

	progress chan struct{}
	done     chan struct{}
	doneOnce sync.Once
}

func newDeliveryTracker(prefix string, window, step, fan int) *deliveryTracker {
	t := &deliveryTracker{prefix: prefix, window: window, step: step, fan: fan, sending: true,
		progress: make(chan struct{}, 1), done: make(chan struct{})}
	t.cond = sync.NewCond(&t.mu)
	return t
}

// reserve waits until the webhooks of n more outcomes fit the window, and
// counts them issued. It returns false once ctx ends.
func (t *deliveryTracker) reserve(ctx context.Context, n int) bool {
	n *= t.fan
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.window > 0 && t.issued-t.delivered+n > t.window && ctx.Err() == nil {
		t.cond.Wait()
	}
	if ctx.Err() != nil {
		return false
	}
	t.issued += n
	t.signalRoom()
	return true
}

// signalRoom wakes one waiting producer when a request fits; it wakes the
// next in turn.
func (t *deliveryTracker) signalRoom() {
	if t.window > 0 && t.issued-t.delivered+t.step <= t.window {
		t.cond.Signal()
	}
}

// wakeAll lets every waiting producer see that its context ended.
func (t *deliveryTracker) wakeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cond.Broadcast()
}

// answered records the answer to n+failed outcomes sent: n accepted.
func (t *deliveryTracker) answered(n, failed int) {
	t.mu.Lock()
	t.accepted += n * t.fan
	t.issued -= failed * t.fan
	t.peak = max(t.peak, t.accepted-t.delivered)
	t.signalRoom()
	t.checkDone()
	t.mu.Unlock()
	t.poke()
}

// arrived records the first arrival of one of the phase's webhooks.
func (t *deliveryTracker) arrived(at time.Time) {
	t.mu.Lock()
	t.delivered++
	if at.After(t.last) {
		t.last = at
	}
	t.signalRoom()
	t.checkDone()
	t.mu.Unlock()
	t.poke()
}

// sendsDone says that nothing more will be sent.
func (t *deliveryTracker) sendsDone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sending = false
	t.checkDone()
}

func (t *deliveryTracker) checkDone() {
	if !t.sending && t.delivered >= t.accepted {
		t.doneOnce.Do(func() { close(t.done) })
	}
}

func (t *deliveryTracker) poke() {
	select {
	case t.progress <- struct{}{}:
	default:
	}
}

// wait returns nil once sending is over and every accepted outcome's
// webhooks have arrived, or an error when nothing is accepted or delivered for stall, or
// ctx ends.
func (t *deliveryTracker) wait(ctx context.Context, stall time.Duration) error {
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		select {
		case <-t.done:
			return nil
		case <-t.progress:
			timer.Reset(stall)
		case <-timer.C:
			return fmt.Errorf("nothing accepted or delivered for %s", stall)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// trackedCounts is what a tracker saw, in webhooks.
type trackedCounts struct {
	accepted, delivered, peak int
	// last is the latest first arrival.
	last time.Time
}

func (t *deliveryTracker) counts() trackedCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trackedCounts{accepted: t.accepted, delivered: t.delivered, peak: t.peak, last: t.last}
}
