package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/testlog"
)

// settleWithin bounds every wait for the system to settle. A stream leased
// by a killed process resumes after the lease (30 s), so the bound is well
// above that.
const settleWithin = 120 * time.Second

// relayBin is the relay binary built once for the whole suite; empty when
// the suite is skipped.
var relayBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv(redistest.EnvRedisURL) == "" && !redistest.RequireReal() {
		return m.Run() // every test skips
	}
	dir, err := os.MkdirTemp("", "relay-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	relayBin = filepath.Join(dir, "relay")
	out, err := exec.Command("go", "build", "-o", relayBin, "github.com/hookrelay/relay/cmd/relay").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build relay: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// need skips the test where the suite does not run.
func need(t testing.TB) {
	t.Helper()
	if relayBin == "" {
		t.Skipf("fault suite: set %s (or %s=1) to run it", redistest.EnvRedisURL, redistest.EnvRequireReal)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if redistest.RequireReal() {
			t.Fatal("redis-server is not on PATH")
		}
		t.Skip("redis-server is not on PATH")
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// redisServer is a redis-server of one test's own, persisting to an AOF
// (fsync every second) in a directory that outlives restarts.
type redisServer struct {
	t      testing.TB
	port   int
	dir    string
	extra  []string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *testlog.Buffer
	// client talks to the server across its restarts.
	client *redis.Client
}

func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	return startRedisOn(t, freePort, extra...)
}

// startRedisOn is startRedis on a port that port picks.
func startRedisOn(t testing.TB, port func(testing.TB) int, extra ...string) *redisServer {
	t.Helper()
	s := &redisServer{t: t, dir: t.TempDir(), extra: extra}
	var err error
	for range 5 { // the port may be taken between probe and bind
		s.port = port(t)
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	s.client = redis.NewClient(&redis.Options{Addr: s.addr()})
	t.Cleanup(func() {
		_ = s.client.Close()
		s.kill()
	})
	return s
}

func (s *redisServer) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *redisServer) url() string { return "redis://" + s.addr() + "/0" }

// launch starts the server on its port and directory and waits until this
// process, not another on the port, answers.
func (s *redisServer) launch() error {
	args := append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
	}, s.extra...)
	cmd := exec.Command("redis-server", args...)
	s.out = &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited = cmd, exited
	probe := redis.NewClient(&redis.Options{Addr: s.addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := probe.InfoMap(ctx, "server", "persistence").Result()
		if err == nil {
			if info["Server"]["process_id"] != strconv.Itoa(cmd.Process.Pid) {
				s.kill()
				return fmt.Errorf("port %d is held by another server", s.port)
			}
			if info["Persistence"]["loading"] == "0" {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited: %s", s.out.String())
		case <-ctx.Done():
			s.kill()
			return fmt.Errorf("redis-server did not answer: %s", s.out.String())
		case <-tick.C:
		}
	}
}

// shutdown stops the server as an operator would (SIGTERM: the AOF is
// flushed) and waits for it to exit.
func (s *redisServer) shutdown() {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatal("redis-server did not stop after SIGTERM")
	}
}

func (s *redisServer) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// suite is what every relay of a test shares: its Redis, its API secret
// and its webhook signing key.
type suite struct {
	t     testing.TB
	redis *redisServer
	// redisURL is what relays connect to: redis's, or a cluster's seeds.
	redisURL string
	secret   string
	keyFile  string
	token    string
	// extraEnv is added to every relay's environment.
	extraEnv []string
}

func newSuite(t testing.TB, redisArgs ...string) *suite {
	t.Helper()
	need(t)
	r := startRedis(t, redisArgs...)
	return newSuiteOn(t, r, r.url())
}

// newSuiteOn is a suite whose relays connect to url; redis may be nil.
func newSuiteOn(t testing.TB, redis *redisServer, url string) *suite {
	t.Helper()
	s := &suite{t: t, redis: redis, redisURL: url, secret: strings.Repeat("f", 32)}
	key, err := hooks.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := hooks.EncodeKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	s.keyFile = filepath.Join(t.TempDir(), "hook.pem")
	if err := os.WriteFile(s.keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	s.token, err = httpapi.MintHS256([]byte(s.secret), "http://relay.test", "", httpapi.Principal{Subject: "faults", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// relayProc is one relay process, restartable on the same address.
type relayProc struct {
	s    *suite
	name string
	addr string
	cmd  *exec.Cmd
	done chan error
	out  *testlog.Buffer
	// logs keeps the output of earlier runs, for a failing test.
	logs []string
}

func (s *suite) startRelay(name string) *relayProc {
	s.t.Helper()
	r := &relayProc{s: s, name: name, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(s.t)))}
	r.launch()
	s.t.Cleanup(func() {
		r.kill()
		if s.t.Failed() {
			r.logs = append(r.logs, r.out.String())
			s.t.Logf("relay %s log, requests left out:\n%s", r.name, tail(withoutRequests(strings.Join(r.logs, "--- restarted ---\n")), 60))
		}
	})
	return r
}

func (r *relayProc) url() string { return "http://" + r.addr }

// launch starts the binary and waits until it listens.
func (r *relayProc) launch() {
	t := r.s.t
	t.Helper()
	if r.out != nil {
		r.logs = append(r.logs, r.out.String())
	}
	cmd := exec.Command(relayBin)
	cmd.Env = append(os.Environ(),
		"RELAY_REDIS_URL="+r.s.redisURL,
		"RELAY_LISTEN="+r.addr,
		"RELAY_JWT_SECRET="+r.s.secret,
		"RELAY_PUBLIC_URL=http://relay.test",
		"RELAY_ALLOW_CIDRS=127.0.0.1/32",
		"RELAY_HOOK_KEY_FILE="+r.s.keyFile,
	)
	cmd.Env = append(cmd.Env, r.s.extraEnv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out = &testlog.Buffer{}
	cmd.Stdout = r.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.cmd, r.done = cmd, make(chan error, 1)
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(r.out, sc.Text())
			if strings.Contains(sc.Text(), "relay listening") {
				once.Do(func() { close(listening) })
			}
		}
		r.done <- cmd.Wait()
	}()
	select {
	case <-listening:
	case err := <-r.done:
		t.Fatalf("relay %s exited at start: %v\n%s", r.name, err, r.out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("relay %s did not start\n%s", r.name, r.out.String())
	}
}

// kill is kill -9.
func (r *relayProc) kill() {
	if r.cmd == nil || r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
}

// stop sends SIGTERM and expects a clean exit.
func (r *relayProc) stop() {
	t := r.s.t
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("relay %s exited with %v after SIGTERM", r.name, err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("relay %s did not stop after SIGTERM", r.name)
	}
}

// call sends a JSON request and decodes a JSON answer.
func (r *relayProc) call(method, path string, body any) (int, map[string]any, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.url()+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+r.s.token)
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v, resp.Header, nil
}

// must is call that fails the test unless the answer has the status.
func (r *relayProc) must(status int, method, path string, body any) map[string]any {
	t := r.s.t
	t.Helper()
	code, v, _, err := r.call(method, path, body)
	if err != nil || code != status {
		t.Fatalf("%s %s: %d %v (%v), want %d", method, path, code, v, err, status)
	}
	return v
}

var apiClient = &http.Client{Timeout: 30 * time.Second}

// endpoint registers a standard-webhooks endpoint of ns at rc.
func (r *relayProc) endpoint(ns, id string, rc *receiver, maxInFlight int) {
	r.s.t.Helper()
	r.must(http.StatusCreated, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+id, map[string]any{
		"url": rc.url, "scheme": "standard-webhooks", "secret": rc.secret, "max_in_flight": maxInFlight,
	})
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// answer is what a scripted receiver does with one verified request.
type answer struct {
	status int
	header http.Header
	// hang holds the request until the relay gives up on it.
	hang bool
	// delay is spent before answering.
	delay time.Duration
}

// script decides a receiver's answer from the reservation id and how many
// verified requests for it came before (0 for the first).
type script func(rid string, attempt int) answer

func ok(string, int) answer { return answer{status: http.StatusNoContent} }

// receiver verifies every request as a Standard Webhooks receiver would and
// answers as its script says. A delivery is a verified request it answered
// 2xx.
type receiver struct {
	name   string
	url    string
	secret string
	notify chan<- struct{}

	mu        sync.Mutex
	script    script
	attempts  map[string]int
	delivered map[string]int
	// times are the arrival times of each verified request, per id.
	times    map[string][]time.Time
	firstAt  map[string]time.Time
	rejected []error
}

// newReceiver starts a receiver; notify (buffered) hears of every request.
func newReceiver(t testing.TB, name string, notify chan<- struct{}, sc script) *receiver {
	t.Helper()
	secret, err := outbox.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{
		name: name, url: "http://" + ln.Addr().String() + "/" + name, secret: string(secret), notify: notify, script: sc,
		attempts: map[string]int{}, delivered: map[string]int{}, times: map[string][]time.Time{}, firstAt: map[string]time.Time{},
	}
	v := &hookverify.StandardVerifier{Secrets: []string{string(secret)}}
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

func (rc *receiver) poke() {
	select {
	case rc.notify <- struct{}{}:
	default:
	}
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	var event struct {
		Data struct {
			ReservationID string `json:"reservation_id"`
		} `json:"data"`
	}
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &event)
	rid := event.Data.ReservationID
	now := time.Now()
	rc.mu.Lock()
	n := rc.attempts[rid]
	rc.attempts[rid] = n + 1
	rc.times[rid] = append(rc.times[rid], now)
	a := rc.script(rid, n)
	rc.mu.Unlock()
	if a.hang {
		<-r.Context().Done()
		rc.poke()
		return
	}
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-r.Context().Done():
			return
		}
	}
	for k, vs := range a.header {
		w.Header()[k] = vs
	}
	if a.status >= 200 && a.status < 300 {
		rc.mu.Lock()
		rc.delivered[rid]++
		if _, seen := rc.firstAt[rid]; !seen {
			rc.firstAt[rid] = time.Now()
		}
		rc.mu.Unlock()
	}
	w.WriteHeader(a.status)
	rc.poke()
}

// missing is how many of rids the receiver has not had delivered.
func (rc *receiver) missing(rids []string) int {
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

// counts returns the deliveries of rids and the duplicates among them.
func (rc *receiver) counts(rids []string) (delivered, duplicates int) {
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

// strangers are ids the receiver had delivered that are not in want: an
// outcome of another namespace, or one never posted.
func (rc *receiver) strangers(want map[string]bool) []string {
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

func (rc *receiver) rejections() []error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]error(nil), rc.rejected...)
}

// target is one endpoint's receiver and the namespace it listens to.
type target struct {
	ns string
	rc *receiver
}

// producer posts outcomes to whichever relay is up, retrying a request
// that failed or was refused for now, and records what was accepted.
type producer struct {
	s *suite
	// relays are tried in turn; a killed one refuses connections.
	relays []*relayProc
	// batch is the outcomes per request; 1 posts single outcomes.
	batch int
	// giveUp bounds the retries of one request.
	giveUp time.Duration

	mu       sync.Mutex
	accepted map[string][]string // ns -> reservation ids
	// posted are the ids ever sent, accepted or not: a batch refused
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

func newProducer(s *suite, batch int, relays ...*relayProc) *producer {
	return &producer{s: s, relays: relays, batch: batch, giveUp: 60 * time.Second, accepted: map[string][]string{}, posted: map[string]map[string]bool{}, acceptedAt: map[string]time.Time{}, codes: map[int]int{}}
}

func (p *producer) relay() *relayProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return p.relays[p.next%len(p.relays)]
}

// post sends rids of ns in requests of p.batch, from workers goroutines,
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
	for i := 0; i < len(rids); i += p.batch {
		select {
		case reqs <- rids[i:min(i+p.batch, len(rids))]:
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
		outcomes := make([]outbox.Outcome, len(rids))
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
// the items of a batch that were accepted or duplicates.
func (p *producer) record(ns string, rids []string, v map[string]any) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	results, isBatch := v["results"].([]any)
	for i, rid := range rids {
		if isBatch {
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
	deadline := time.After(settleWithin)
	for {
		left := 0
		for _, tg := range targets {
			if errs := tg.rc.rejections(); len(errs) > 0 {
				t.Fatalf("receiver %s: a webhook failed verification: %v", tg.rc.name, errs[0])
			}
			left += tg.rc.missing(p.acceptedOf(tg.ns))
		}
		if left == 0 {
			break
		}
		select {
		case <-notify:
		case <-deadline:
			t.Fatalf("%d deliveries missing after %s", left, settleWithin)
		}
	}
	for _, tg := range targets {
		if s := tg.rc.strangers(p.postedTo(tg.ns)); len(s) > 0 {
			t.Fatalf("receiver %s had outcomes it should not: %v", tg.rc.name, s[:min(len(s), 5)])
		}
	}
}

// report prints the case's line and returns its duplicates.
func report(t testing.TB, name string, p *producer, settled time.Duration, targets ...target) (delivered, duplicates int) {
	t.Helper()
	for _, tg := range targets {
		d, dup := tg.rc.counts(p.acceptedOf(tg.ns))
		delivered += d
		duplicates += dup
	}
	line := fmt.Sprintf("faults: %-22s accepted %5d  delivered %5d (%d endpoints)  duplicates %4d  settled in %6.2fs  answers %s",
		name, p.total(), delivered, len(targets), duplicates, settled.Seconds(), p.answers())
	t.Log(line)
	fmt.Println(line)
	return delivered, duplicates
}

// withoutRequests drops the access log's lines.
func withoutRequests(log string) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="http request"`) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
