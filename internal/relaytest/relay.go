package relaytest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/testlog"
)

// startWithin bounds a relay's start; stopWithin its exit after SIGTERM.
const (
	startWithin = 30 * time.Second
	stopWithin  = 60 * time.Second
)

// Config is how Start runs a relay.
type Config struct {
	// Name tells the relays of one test apart in failures and logs.
	Name string
	// Env is added to this process's environment; RELAY_LISTEN is set to
	// the relay's own address.
	Env []string
	// Dev waits, after "relay listening", for the admin token a development
	// server prints.
	Dev bool
}

// Relay is one relay serve process of a test, restartable on its address.
// The test's cleanup kills it and, when the test failed, logs its output.
type Relay struct {
	Addr string
	URL  string
	// Token is the development admin token it printed, with Config.Dev.
	Token string

	t   testing.TB
	cfg Config

	mu     sync.Mutex
	stderr *testlog.Buffer
	stdout *testlog.Buffer
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // the exit's, once exited is closed
	// logs keeps the output of earlier runs, for a failing test.
	logs []string
}

// Start runs the binary as cfg says and waits until it listens.
func Start(t testing.TB, cfg Config) *Relay {
	t.Helper()
	addr := FreeAddr(t)
	r := &Relay{Addr: addr, URL: "http://" + addr, t: t, cfg: cfg}
	// Registered first, so a relay that fails to start is killed too.
	t.Cleanup(func() {
		r.Kill()
		if t.Failed() && r.stderr != nil {
			r.mu.Lock()
			logs := append(r.logs, r.stderr.String())
			r.mu.Unlock()
			t.Logf("relay %s log, requests left out:\n%s", r.cfg.Name, Tail(withoutRequests(strings.Join(logs, "--- restarted ---\n")), 60))
		}
	})
	r.launch()
	return r
}

// Restart starts the relay again on its address, after Kill or Stop.
func (r *Relay) Restart() {
	r.t.Helper()
	r.launch()
}

// Log is what the current run wrote to stderr: its log.
func (r *Relay) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// Exited reports whether the current run has ended.
func (r *Relay) Exited() bool {
	select {
	case <-r.exited:
		return true
	default:
		return false
	}
}

func (r *Relay) launch() {
	t := r.t
	t.Helper()
	cmd := exec.Command(Binary(t))
	cmd.Env = append(append(os.Environ(), r.cfg.Env...), "RELAY_LISTEN="+r.Addr)
	listening, tokens := make(chan struct{}), make(chan string, 1)
	var once sync.Once
	stderr, stdout := &testlog.Buffer{}, &testlog.Buffer{}
	cmd.Stderr = &lineWriter{to: stderr, line: func(l string) {
		if strings.Contains(l, "relay listening") {
			once.Do(func() { close(listening) })
		}
	}}
	cmd.Stdout = &lineWriter{to: stdout, line: func(l string) {
		if tok, ok := strings.CutPrefix(strings.TrimSpace(l), "export RELAY_TOKEN="); ok {
			select {
			case tokens <- tok:
			default:
			}
		}
	}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	r.mu.Lock()
	if r.stderr != nil {
		r.logs = append(r.logs, r.stderr.String())
	}
	r.cmd, r.exited, r.stderr, r.stdout = cmd, exited, stderr, stdout
	r.mu.Unlock()
	go func() {
		err := cmd.Wait()
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(exited)
	}()
	deadline := time.After(startWithin)
	select {
	case <-listening:
	case <-exited:
		t.Fatalf("relay %s exited at start: %v\n%s", r.cfg.Name, r.exitErr(), stderr.String())
	case <-deadline:
		t.Fatalf("relay %s did not start\n%s", r.cfg.Name, stderr.String())
	}
	if !r.cfg.Dev {
		return
	}
	select {
	case r.Token = <-tokens:
	case <-deadline:
		t.Fatal("the development server printed no admin token")
	}
}

func (r *Relay) exitErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Kill is kill -9; it waits until the process has gone.
func (r *Relay) Kill() {
	if r.cmd == nil || r.Exited() {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
}

// Stop sends SIGTERM and expects a clean exit.
func (r *Relay) Stop() {
	t := r.t
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
		if err := r.exitErr(); err != nil {
			t.Fatalf("relay %s exited with %v after SIGTERM", r.cfg.Name, err)
		}
	case <-time.After(stopWithin):
		t.Fatalf("relay %s did not stop after SIGTERM", r.cfg.Name)
	}
}

var apiClient = &http.Client{Timeout: 30 * time.Second}

// Do sends a JSON request with token and decodes a JSON answer. It fails
// no test, so producers may call it from any goroutine and retry a relay
// that is down.
func (r *Relay) Do(method, path, token string, body any) (int, map[string]any, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.URL+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v, resp.Header, nil
}

// Call is Do that fails t when the request gets no answer.
func (r *Relay) Call(t testing.TB, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	code, v, _, err := r.Do(method, path, token, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, v
}

// Must is Do that fails t unless the answer has the status.
func (r *Relay) Must(t testing.TB, status int, method, path, token string, body any) map[string]any {
	t.Helper()
	code, v, _, err := r.Do(method, path, token, body)
	if err != nil || code != status {
		t.Fatalf("%s %s: %d %v (%v), want %d", method, path, code, v, err, status)
	}
	return v
}

// lineWriter copies a process's output to a buffer and passes each whole
// line on as it comes.
type lineWriter struct {
	to   io.Writer
	line func(string)
	part []byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n, err := w.to.Write(p)
	w.part = append(w.part, p[:n]...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.part[:i]))
		w.part = w.part[i+1:]
	}
	return n, err
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
