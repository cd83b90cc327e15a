package faults

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// spread registers one endpoint per namespace, each on its own receiver,
// and returns the targets.
func spread(t testing.TB, r *relayProc, prefix string, namespaces, maxInFlight int, notify chan<- struct{}, sc relaytest.Script) []target {
	t.Helper()
	var out []target
	for i := range namespaces {
		ns := fmt.Sprintf("%s-%02d", prefix, i)
		rc := newReceiver(t, ns, notify, sc)
		r.endpoint(ns, "hook", rc, maxInFlight)
		out = append(out, target{ns: ns, rc: rc})
	}
	return out
}

// postAll posts n outcomes to each target's namespace, all namespaces at
// once, and returns when every request was accepted or given up.
func postAll(p *producer, targets []target, n, workersPerNS int) {
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.post(tg.ns, rids(tg.ns, n), workersPerNS)
		}()
	}
	wg.Wait()
}

// postInBackground runs postAll in a goroutine; the channel closes when it
// returns.
func postInBackground(p *producer, targets []target, n, workersPerNS int) <-chan struct{} {
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		postAll(p, targets, n, workersPerNS)
	}()
	return posted
}

// deliveredSoFar is every delivery the targets' receivers answered 2xx.
func deliveredSoFar(targets []target) int {
	n := 0
	for _, tg := range targets {
		n += tg.rc.Deliveries()
	}
	return n
}

// awaitDeliveries waits until the targets' receivers answered n deliveries.
func awaitDeliveries(t testing.TB, notify <-chan struct{}, targets []target, n int) {
	t.Helper()
	deadline := time.After(settleWithin)
	for deliveredSoFar(targets) < n {
		select {
		case <-notify:
		case <-deadline:
			t.Fatalf("only %d of %d deliveries arrived", deliveredSoFar(targets), n)
		}
	}
}

// awaitAccepted waits until the producer has n outcomes accepted.
func awaitAccepted(t testing.TB, p *producer, n int) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(settleWithin)
	for p.total() < n {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("only %d of %d outcomes accepted", p.total(), n)
		}
	}
}

// slowish answers after 2 ms, so that delivery trails ingest and fires are
// in flight when a fault strikes.
func slowish(string, int) relaytest.Answer {
	return relaytest.Answer{Status: http.StatusNoContent, Delay: 2 * time.Millisecond}
}

// boundDuplicates fails a case that is not a kill when 1 % or more of its
// deliveries were duplicates.
func boundDuplicates(t testing.TB, dups, deliveries int) {
	t.Helper()
	if dups*100 >= deliveries {
		t.Errorf("%d duplicate deliveries of %d: 1 %% or more", dups, deliveries)
	}
}

// checkAnswers fails on any API answer but 202 and, where allowed, 503
// with Retry-After.
func checkAnswers(t testing.TB, p *producer, allow503 bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for code, n := range p.codes {
		if code == http.StatusAccepted || (allow503 && code == http.StatusServiceUnavailable) {
			continue
		}
		t.Errorf("the API answered %d %d times", code, n)
	}
	if p.refusedNoRetryAfter > 0 {
		t.Errorf("%d answers of 503 had no Retry-After", p.refusedNoRetryAfter)
	}
}

// TestKillNineDuringDelivery kills the relay with SIGKILL five times while
// outcomes are ingested and delivered, restarting it each time.
func TestKillNineDuringDelivery(t *testing.T) {
	s := newSuite(t)
	// Few workers, so a kill strands a few streams behind their leases and
	// the rest go on with the restarted process.
	s.extraEnv = []string{"RELAY_DELIVERY_CONCURRENCY=4"}
	notify := make(chan struct{}, 1)
	r := s.startRelay("a")
	targets := spread(t, r, "kill", 16, 1, notify, slowish)
	p := newProducer(s, 1, r)
	const perNS = 150

	start := time.Now()
	posted := postInBackground(p, targets, perNS, 1)
	// Kills follow ingest, not delivery: a kill strands the streams its
	// fires held until their leases expire, and kills spaced by deliveries
	// would wait out a lease each.
	for i := range 5 {
		awaitAccepted(t, p, (i+1)*len(targets)*perNS/7)
		r.Kill()
		r.Restart()
	}
	<-posted
	settle(t, p, notify, targets...)
	_, dups := report(t, "kill -9 ×5", p, time.Since(start), targets...)
	t.Logf("duplicates: %d (redelivery of rows a killed fire had sent)", dups)
	checkAnswers(t, p, false)
}

// TestSurvivorTakesOverAKilledProcess runs two relays on one Redis and
// kills one mid-run: the other resumes its leased streams once the leases
// expire.
func TestSurvivorTakesOverAKilledProcess(t *testing.T) {
	s := newSuite(t)
	notify := make(chan struct{}, 1)
	a, b := s.startRelay("a"), s.startRelay("b")
	targets := spread(t, a, "pair", 8, 1, notify, slowish)
	p := newProducer(s, 1, a, b)
	const perNS = 200

	posted := postInBackground(p, targets, perNS, 2)
	awaitDeliveries(t, notify, targets, len(targets)*perNS/4)
	a.Kill()
	killed := time.Now()
	<-posted
	settle(t, p, notify, targets...)
	resumed := time.Since(killed)
	report(t, "two relays, one killed", p, resumed, targets...)
	t.Logf("the survivor finished every stream %.2fs after the kill (lease 30s)", resumed.Seconds())
	checkAnswers(t, p, false)
}

// TestRedisRestartDuringIngestAndDelivery stops Redis (AOF kept) while
// outcomes flow and starts it again; the relay is not restarted.
func TestRedisRestartDuringIngestAndDelivery(t *testing.T) {
	s := newSuite(t)
	notify := make(chan struct{}, 1)
	r := s.startRelay("a")
	targets := spread(t, r, "restart", 8, 1, notify, slowish)
	p := newProducer(s, 1, r)
	const perNS = 400

	start := time.Now()
	posted := postInBackground(p, targets, perNS, 2)
	awaitDeliveries(t, notify, targets, len(targets)*perNS/5)
	s.redis.Shutdown()
	// Keep Redis away until producers have been refused a few times.
	tick := time.NewTicker(20 * time.Millisecond)
	for refused := 0; refused < 20; {
		<-tick.C
		p.mu.Lock()
		refused = p.codes[http.StatusServiceUnavailable]
		p.mu.Unlock()
	}
	tick.Stop()
	if err := s.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	<-posted
	settle(t, p, notify, targets...)
	_, dups := report(t, "Redis restarted", p, time.Since(start), targets...)
	boundDuplicates(t, dups, p.total()*len(targets))
	if r.Exited() {
		t.Fatal("the relay exited while Redis was away")
	}
	checkAnswers(t, p, true)
	emptyOutbox(t, r, targets)
}

// TestScriptFlushUnderLoad flushes Redis's script cache again and again
// while outcomes flow: nothing is refused and nothing is lost.
func TestScriptFlushUnderLoad(t *testing.T) {
	s := newSuite(t)
	notify := make(chan struct{}, 1)
	r := s.startRelay("a")
	targets := spread(t, r, "flush", 4, 1, notify, slowish)
	p := newProducer(s, 1, r)
	const perNS = 300

	start := time.Now()
	posted := postInBackground(p, targets, perNS, 2)
	for i := range 10 {
		awaitDeliveries(t, notify, targets, (i+1)*len(targets)*perNS/12)
		if err := s.redis.Client.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	<-posted
	settle(t, p, notify, targets...)
	_, dups := report(t, "SCRIPT FLUSH ×10", p, time.Since(start), targets...)
	checkAnswers(t, p, false)
	boundDuplicates(t, dups, p.total()*len(targets))
	emptyOutbox(t, r, targets)
}

// emptyOutbox waits until no endpoint of the targets has a row left: once
// everything was delivered, nothing half-written remains. (A list refused
// midway may have stored outcomes the producer did not count; they drain
// too.)
func emptyOutbox(t testing.TB, r *relayProc, targets []target) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(settleWithin)
	for _, tg := range targets {
		for {
			v := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+tg.ns+"/outbox?endpoint=hook", nil)
			ep := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+tg.ns+"/endpoints/hook", nil)
			rows, _ := v["rows"].([]any)
			bl, _ := ep["backlog"].(map[string]any)
			if len(rows) == 0 && bl["rows"] == float64(0) && bl["bytes"] == float64(0) {
				break
			}
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("%s: %d rows left in the outbox, backlog %v", tg.ns, len(rows), bl)
			}
		}
	}
}

// TestNoFault is the control: steady ingest and delivery with nothing
// broken. Every other case is read against its line.
func TestNoFault(t *testing.T) {
	s := newSuite(t)
	notify := make(chan struct{}, 1)
	r := s.startRelay("a")
	targets := spread(t, r, "calm", 4, 1, notify, slowish)
	p := newProducer(s, 1, r)
	start := time.Now()
	postAll(p, targets, 300, 2)
	settle(t, p, notify, targets...)
	_, dups := report(t, "no fault (control)", p, time.Since(start), targets...)
	boundDuplicates(t, dups, p.total()*len(targets))
	checkAnswers(t, p, false)
	emptyOutbox(t, r, targets)
	r.Stop()
}
