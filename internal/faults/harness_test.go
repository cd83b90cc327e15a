package faults

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// settleWithin bounds every wait for the system to settle. A stream leased
// by a killed process resumes after the lease (30 s), so the bound is well
// above that.
const settleWithin = 120 * time.Second

func TestMain(m *testing.M) {
	os.Exit(relaytest.Main(m))
}

// need skips the test where the suite does not run.
func need(t testing.TB) {
	t.Helper()
	if os.Getenv(redistest.EnvRedisURL) == "" && !redistest.RequireReal() {
		t.Skipf("fault suite: set %s (or %s=1) to run it", redistest.EnvRedisURL, redistest.EnvRequireReal)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if redistest.RequireReal() {
			t.Fatal("redis-server is not on PATH")
		}
		t.Skip("redis-server is not on PATH")
	}
}

// startRedis starts a redis-server of one test's own, persisting to an AOF
// (fsync every second) in a directory that outlives restarts.
func startRedis(t testing.TB, extra ...string) *redistest.Server {
	t.Helper()
	return redistest.StartServerWith(t, redistest.ServerOptions{AOF: true, Args: extra})
}

// suite is what every relay of a test shares: its Redis, its API secret
// and its webhook signing key.
type suite struct {
	t     testing.TB
	redis *redistest.Server
	// cluster is the Redis Cluster of the suite's own, if it runs on one.
	cluster *cluster
	// redisURL is what relays connect to: redis's, or a cluster's seeds.
	redisURL string
	relaytest.Credentials
	// extraEnv is added to every relay's environment.
	extraEnv []string
}

func newSuite(t testing.TB, redisArgs ...string) *suite {
	t.Helper()
	need(t)
	r := startRedis(t, redisArgs...)
	return newSuiteOn(t, r, "redis://"+r.Addr+"/0")
}

// newSuiteOn is a suite whose relays connect to url; redis may be nil.
func newSuiteOn(t testing.TB, redis *redistest.Server, url string) *suite {
	t.Helper()
	return &suite{t: t, redis: redis, redisURL: url, Credentials: relaytest.NewCredentials(t, "faults")}
}

// newCase is the start of most cases: a suite on a redis-server of its
// own, one relay, "a", and the channel the case's receivers notify of
// each request.
func newCase(t testing.TB) (*suite, *relayProc, chan struct{}) {
	t.Helper()
	s := newSuite(t)
	return s, s.startRelay("a"), make(chan struct{}, 1)
}

// relayProc is one relay process of the suite, restartable on the same
// address.
type relayProc struct {
	*relaytest.Relay
	s *suite
}

func (s *suite) startRelay(name string) *relayProc {
	s.t.Helper()
	env := append(s.Env(s.redisURL), s.extraEnv...)
	return &relayProc{Relay: relaytest.Start(s.t, relaytest.Config{Name: name, Env: env}), s: s}
}

// call sends a JSON request with the suite's token.
func (r *relayProc) call(method, path string, body any) (int, map[string]any, http.Header, error) {
	return r.Do(method, path, r.s.Token, body)
}

// must is call that fails the test unless the answer has the status.
func (r *relayProc) must(status int, method, path string, body any) map[string]any {
	r.s.t.Helper()
	return r.Must(r.s.t, status, method, path, r.s.Token, body)
}

// endpoint registers a standard-webhooks endpoint of ns at rc.
func (r *relayProc) endpoint(ns, id string, rc *relaytest.Receiver, maxInFlight int) {
	r.s.t.Helper()
	r.must(http.StatusCreated, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+id, map[string]any{
		"url": rc.URL, "scheme": "standard-webhooks", "secret": rc.Secret, "max_in_flight": maxInFlight,
	})
}

// newReceiver starts a receiver of Standard Webhooks that answers as sc
// says; notify (buffered) hears of every request.
func newReceiver(t testing.TB, name string, notify chan<- struct{}, sc relaytest.Script) *relaytest.Receiver {
	t.Helper()
	return relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: name, Notify: notify, Script: sc})
}

// target is one endpoint's receiver and the namespace it listens to.
type target struct {
	ns string
	rc *relaytest.Receiver
}

// producer posts outcomes to whichever relay is up, retrying a request
// that failed or was refused for now, and records what was accepted.
type producer struct {
	s *suite
	// relays are tried in turn; a killed one refuses connections.
	relays []*relayProc
	// perRequest is the outcomes per request; 1 posts single outcomes.
	perRequest int
	// giveUp bounds the retries of one request.
	giveUp time.Duration

	mu       sync.Mutex
	accepted map[string][]string // ns -> reservation ids
	// posted are the ids ever sent, accepted or not: a list refused
	// midway may have stored its first outcomes, which are then delivered.
	posted map[string]map[string]bool
	// acceptedAt is when each id's request was answered 202.
	acceptedAt map[string]time.Time
	codes      map[int]int
	// refusedNoRetryAfter counts 503 answers without Retry-After.
	refusedNoRetryAfter int
	connErrs            int
	next                int
	// stop, when closed, ends posting: requests not yet accepted are given
	// up.
	stop <-chan struct{}
}

func newProducer(s *suite, perRequest int, relays ...*relayProc) *producer {
	return &producer{s: s, relays: relays, perRequest: perRequest, giveUp: 60 * time.Second, accepted: map[string][]string{}, posted: map[string]map[string]bool{}, acceptedAt: map[string]time.Time{}, codes: map[int]int{}}
}

func (p *producer) relay() *relayProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return p.relays[p.next%len(p.relays)]
}

// post sends rids of ns in requests of p.perRequest, from workers goroutines,
// and returns when each request was accepted or given up.
func (p *producer) post(ns string, rids []string, workers int) {
	reqs := make(chan []string)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for chunk := range reqs {
				p.send(ns, chunk)
			}
		}()
	}
	for i := 0; i < len(rids); i += p.perRequest {
		select {
		case reqs <- rids[i:min(i+p.perRequest, len(rids))]:
		case <-p.stop:
		}
	}
	close(reqs)
	wg.Wait()
}

func (p *producer) send(ns string, rids []string) {
	p.mu.Lock()
	if p.posted[ns] == nil {
		p.posted[ns] = map[string]bool{}
	}
	for _, rid := range rids {
		p.posted[ns][rid] = true
	}
	p.mu.Unlock()
	var body any
	if len(rids) == 1 {
		body = outboxtest.Committed(rids[0])
	} else {
		outcomes := make([]schema.Outcome, len(rids))
		for i, rid := range rids {
			outcomes[i] = outboxtest.Committed(rid)
		}
		body = map[string]any{"outcomes": outcomes}
	}
	deadline := time.Now().Add(p.giveUp)
	for time.Now().Before(deadline) {
		code, v, h, err := p.relay().call(http.MethodPost, "/v1/namespaces/"+ns+"/outcomes", body)
		p.mu.Lock()
		if err != nil {
			p.connErrs++
		} else {
			p.codes[code]++
			if code == http.StatusServiceUnavailable && h.Get("Retry-After") == "" {
				p.refusedNoRetryAfter++
			}
		}
		p.mu.Unlock()
		if err == nil && code == http.StatusAccepted {
			p.record(ns, rids, v)
			return
		}
		wait := 50 * time.Millisecond
		if s, convErr := strconv.Atoi(h.Get("Retry-After")); convErr == nil && err == nil {
			wait = min(time.Duration(s)*time.Second, time.Second)
		}
		// Pacing a client's retry, as a producer would.
		select {
		case <-time.After(wait):
		case <-p.stop:
			return
		}
	}
}

// record keeps the ids the answer accepted: every id of a single outcome,
// the items of a list that were accepted or duplicates.
func (p *producer) record(ns string, rids []string, v map[string]any) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	results, isList := v["results"].([]any)
	for i, rid := range rids {
		if isList {
			m, _ := results[min(i, len(results)-1)].(map[string]any)
			if st, _ := m["status"].(string); i >= len(results) || (st != "accepted" && st != "duplicate") {
				continue
			}
		}
		p.accepted[ns] = append(p.accepted[ns], rid)
		p.acceptedAt[rid] = now
	}
}

func (p *producer) acceptedOf(ns string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.accepted[ns]...)
}

func (p *producer) postedTo(ns string) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for rid := range p.posted[ns] {
		out[rid] = true
	}
	for _, rid := range p.accepted[ns] {
		out[rid] = true
	}
	return out
}

// count is how many requests the API answered with code.
func (p *producer) count(code int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.codes[code]
}

func (p *producer) total() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, rids := range p.accepted {
		n += len(rids)
	}
	return n
}

func (p *producer) answers() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	codes := make([]int, 0, len(p.codes))
	for c := range p.codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var b strings.Builder
	for _, c := range codes {
		fmt.Fprintf(&b, "%d×%d ", c, p.codes[c])
	}
	fmt.Fprintf(&b, "conn-errors×%d", p.connErrs)
	return b.String()
}

func rids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// settle waits until every outcome p accepted reached each target, and
// fails on a request that did not verify or an outcome delivered to a
// target of another namespace.
func settle(t testing.TB, p *producer, notify <-chan struct{}, targets ...target) {
	t.Helper()
	relaytest.Eventually(t, settleWithin, notify, func() error {
		left := 0
		for _, tg := range targets {
			if errs := tg.rc.Rejections(); len(errs) > 0 {
				t.Fatalf("receiver %s: a webhook failed verification: %v", tg.rc.Name, errs[0])
			}
			left += tg.rc.Missing(p.acceptedOf(tg.ns))
		}
		if left > 0 {
			return fmt.Errorf("%d deliveries missing after %s", left, settleWithin)
		}
		return nil
	})
	for _, tg := range targets {
		if s := tg.rc.Strangers(p.postedTo(tg.ns)); len(s) > 0 {
			t.Fatalf("receiver %s had outcomes it should not: %v", tg.rc.Name, s[:min(len(s), 5)])
		}
	}
}

// report prints the case's line and returns its duplicates.
func report(t testing.TB, name string, p *producer, settled time.Duration, targets ...target) (delivered, duplicates int) {
	t.Helper()
	for _, tg := range targets {
		d, dup := tg.rc.Counts(p.acceptedOf(tg.ns))
		delivered += d
		duplicates += dup
	}
	line := fmt.Sprintf("faults: %-22s accepted %5d  delivered %5d (%d endpoints)  duplicates %4d  settled in %6.2fs  answers %s",
		name, p.total(), delivered, len(targets), duplicates, settled.Seconds(), p.answers())
	t.Log(line)
	fmt.Println(line)
	return delivered, duplicates
}
