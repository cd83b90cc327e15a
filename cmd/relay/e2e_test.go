package main

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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/testlog"
)

// settle bounds every wait of these tests; deliveries normally take
// milliseconds.
const settle = 30 * time.Second

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// relayBinary builds the relay command once per test run.
func relayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relay-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "relay")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// process is a running relay binary.
type process struct {
	cmd  *exec.Cmd
	url  string
	out  *testlog.Buffer
	done chan error
}

// startRelay runs the binary with env and waits until it listens; in
// development it also waits for the admin token it prints.
func startRelay(t *testing.T, env []string, dev bool) (*process, string) {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(relayBinary(t))
	cmd.Env = append(os.Environ(), append(env, "RELAY_LISTEN="+addr)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, url: "http://" + addr, out: &testlog.Buffer{}, done: make(chan error, 1)}
	tokens, listening := make(chan string, 1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export RELAY_TOKEN="); ok {
				tokens <- tok
			}
		}
	}()
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			fmt.Fprintln(p.out, sc.Text())
			if strings.Contains(sc.Text(), "relay listening") {
				once.Do(func() { close(listening) })
			}
		}
	}()
	go func() {
		wg.Wait()
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("relay log:\n%s", p.out.String())
		}
	})
	deadline := time.After(settle)
	select {
	case <-listening:
	case err := <-p.done:
		t.Fatalf("relay exited early: %v\n%s", err, p.out.String())
	case <-deadline:
		t.Fatalf("relay did not start\n%s", p.out.String())
	}
	if !dev {
		return p, ""
	}
	select {
	case tok := <-tokens:
		return p, tok
	case <-deadline:
		t.Fatal("the development server printed no admin token")
	}
	return p, ""
}

// stop sends SIGTERM and expects a clean exit.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("relay exited with %v after SIGTERM\n%s", err, p.out.String())
		}
	case <-time.After(settle):
		t.Fatal("relay did not stop after SIGTERM")
	}
}

// call sends a JSON request to relay and decodes the answer.
func (p *process) call(t *testing.T, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

// received is one verified request a receiver took.
type received struct {
	scheme, rid string
	at          time.Time
}

// receiver verifies every request with both schemes and reports each one
// on a channel; while refused is set, it answers 503 to that reservation id.
type receiver struct {
	url      string
	got      chan received
	refused  chan string
	rejected chan error
	// refuse is read by the server's goroutines as the test sets it.
	refuse atomic.Pointer[string]
}

func startReceiver(t *testing.T, relayURL, secret string) *receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &receiver{url: "http://" + ln.Addr().String(), got: make(chan received, 1024), refused: make(chan string, 16), rejected: make(chan error, 16)}
	list, err := loadKeyList(context.Background(), relayURL+hooks.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	v := &eitherVerifier{
		mkit:     &hookverify.MkitVerifier{Keys: list, Audience: rc.url, Namespaces: []string{"acme"}},
		standard: &hookverify.StandardVerifier{Secrets: []string{secret}},
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var event struct {
			Data struct {
				ReservationID string `json:"reservation_id"`
			} `json:"data"`
		}
		body, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(body, &event)
		if rid := rc.refuse.Load(); rid != nil && *rid == event.Data.ReservationID {
			w.Header().Set("Retry-After", "600")
			w.WriteHeader(http.StatusServiceUnavailable)
			rc.refused <- event.Data.ReservationID
			return
		}
		rc.got <- received{scheme: scheme(r.Header), rid: event.Data.ReservationID, at: time.Now()}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: hookverify.Middleware(v, next, hookverify.WithErrorHook(func(_ *http.Request, err error) {
		rc.rejected <- err
	}))}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rc
}

// await waits until every (scheme, rid) of want has been delivered at least
// once, failing on a request that did not verify.
func (rc *receiver) await(t *testing.T, want map[string]bool) map[string]received {
	t.Helper()
	seen := map[string]received{}
	deadline := time.After(settle)
	for len(want) > 0 {
		select {
		case d := <-rc.got:
			key := d.scheme + " " + d.rid
			if _, ok := seen[key]; !ok {
				seen[key] = d
			}
			delete(want, key)
		case err := <-rc.rejected:
			t.Fatalf("a webhook failed verification: %v", err)
		case <-deadline:
			t.Fatalf("not delivered within %s: %v", settle, want)
		}
	}
	return seen
}

func outcomesOfEveryKind(prefix string) []outbox.Outcome {
	committed := outboxtest.Committed(prefix + "-committed")
	aborted := outboxtest.Aborted(prefix + "-aborted")
	expired := outboxtest.Committed(prefix + "-expired")
	expired.Committed, expired.Expired = nil, &outbox.Expired{}
	read := outboxtest.Committed(prefix + "-read")
	read.Committed, read.ReadServed = nil, &outbox.ReadServed{Object: outboxtest.HexA, BytesServed: 42}
	return []outbox.Outcome{committed, aborted, expired, read}
}

// deliveryFlow registers one endpoint per signing scheme, posts outcomes of
// every kind (a batch and a single one), and sees each delivered to both
// endpoints and verified.
func deliveryFlow(t *testing.T, p *process, token string) {
	t.Helper()
	secret, err := outbox.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	rc := startReceiver(t, p.url, string(secret))
	for id, body := range map[string]map[string]any{
		"mkit": {"url": rc.url + "/mkit"},
		"std":  {"url": rc.url + "/std", "scheme": "standard-webhooks", "secret": string(secret), "max_in_flight": 4},
	} {
		if code, v := p.call(t, http.MethodPut, "/v1/namespaces/acme/endpoints/"+id, token, body); code != http.StatusCreated {
			t.Fatalf("put endpoint %s: %d %v", id, code, v)
		}
	}
	outcomes := outcomesOfEveryKind("e2e")
	code, v := p.call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, map[string]any{"outcomes": outcomes[:3]})
	if code != http.StatusAccepted {
		t.Fatalf("post batch: %d %v", code, v)
	}
	if code, v := p.call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, outcomes[3]); code != http.StatusAccepted {
		t.Fatalf("post one: %d %v", code, v)
	}
	want := map[string]bool{}
	for _, o := range outcomes {
		want["mkit-hook-v2 "+o.ReservationID] = true
		want["standard-webhooks "+o.ReservationID] = true
	}
	rc.await(t, want)

	// Replay: a row stuck behind a 10-minute Retry-After goes at once.
	stuckID := "stuck"
	rc.refuse.Store(&stuckID)
	stuck := outboxtest.Committed("stuck")
	if code, v := p.call(t, http.MethodPost, "/v1/namespaces/acme/outcomes", token, stuck); code != http.StatusAccepted {
		t.Fatalf("post stuck: %d %v", code, v)
	}
	select {
	case <-rc.refused:
	case err := <-rc.rejected:
		t.Fatalf("a webhook failed verification: %v", err)
	case <-time.After(settle):
		t.Fatal("the stuck row was never tried")
	}
	// The failed attempt is recorded as its fire ends, just after the
	// answer: look until it shows.
	var view map[string]any
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(settle); ; {
		_, view = p.call(t, http.MethodGet, "/v1/namespaces/acme/outbox?endpoint=mkit", token, nil)
		if rows, _ := view["rows"].([]any); len(rows) == 1 && rows[0].(map[string]any)["last_attempt"] != nil && view["state"] == "backing_off" {
			break
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the failed attempt never showed: %v", view)
		}
	}
	next, err := time.Parse(time.RFC3339, view["next_attempt_at"].(string))
	if err != nil || time.Until(next) < 5*time.Minute {
		t.Fatalf("the stuck row should wait out its Retry-After: next attempt %v (%v)", view["next_attempt_at"], err)
	}
	rc.refuse.Store(nil)
	replayed := time.Now()
	if code, v := p.call(t, http.MethodPost, "/v1/admin/namespaces/acme/endpoints/mkit/outcomes/stuck/replay", token, nil); code != http.StatusAccepted {
		t.Fatalf("replay: %d %v", code, v)
	}
	got := rc.await(t, map[string]bool{"mkit-hook-v2 stuck": true})
	t.Logf("replayed row delivered %s after the replay call", got["mkit-hook-v2 stuck"].at.Sub(replayed))
	if code, v := p.call(t, http.MethodPost, "/v1/admin/namespaces/acme/endpoints/mkit/outcomes/nothing/replay", token, nil); code != http.StatusNotFound {
		t.Fatalf("replay of an unknown row: %d %v", code, v)
	}
}

func TestBinaryDeliversEveryKindWithTheEmbeddedStore(t *testing.T) {
	p, token := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	if strings.Contains(p.out.String(), token) {
		t.Fatal("the development token was logged")
	}
	deliveryFlow(t, p, token)
	p.stop(t)
}

func TestBinaryDeliversEveryKindOnRealRedis(t *testing.T) {
	client := redistest.RealClient(t)
	prefix := redistest.Prefix(t, client)
	dir := t.TempDir()
	key, err := hooks.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := hooks.EncodeKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "hook.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	secret := strings.Repeat("s", 32)
	env := []string{
		"RELAY_REDIS_URL=" + os.Getenv(redistest.EnvRedisURL),
		"RELAY_REDIS_PREFIX=" + prefix,
		"RELAY_HOOK_KEY_FILE=" + keyFile,
		"RELAY_JWT_SECRET=" + secret,
		"RELAY_PUBLIC_URL=http://relay.test",
		"RELAY_ALLOW_CIDRS=127.0.0.1/32",
	}
	p, _ := startRelay(t, env, false)
	token, err := httpapi.MintHS256([]byte(secret), "http://relay.test", "", httpapi.Principal{Subject: "e2e", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	deliveryFlow(t, p, token)
	p.stop(t)
}
