package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
)

// rawConn is a client connection to the binary, read under a deadline so a
// server that neither answers nor closes fails the test.
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(settle)); err != nil {
		t.Fatal(err)
	}
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

func (c *rawConn) roundTrip(t *testing.T, raw string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp
}

// wantClosed asserts the server sends nothing more on c and closes it.
func (c *rawConn) wantClosed(t *testing.T, after string) {
	t.Helper()
	b, err := c.r.ReadByte()
	switch {
	case err == nil:
		rest, _ := c.r.Peek(c.r.Buffered())
		t.Fatalf("after %s relay sent more: %q", after, string(b)+string(rest))
	case !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset"):
		t.Fatalf("after %s the connection stayed open: %v", after, err)
	}
}

const rawHealthz = "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"

// The binary as an attacker with no token meets it: connections over
// RELAY_MAX_CONNECTIONS, none of those open idle, are answered 503 and
// closed; on connections within
// it, a request framed both by length and by chunks is refused and its
// connection closed before the request smuggled in its body is answered,
// and a head over the cap is 431 and closed.
func TestServeRefusesConnectionsOverTheLimitSmugglingAndHugeHeads(t *testing.T) {
	const limit = 3
	p, _ := startRelay(t, []string{"RELAY_REDIS_URL=", "RELAY_MAX_CONNECTIONS=" + strconv.Itoa(limit)}, true)

	// Held open before their first request, so none is idle and none
	// makes room; relay accepts connections in the order they were made,
	// so these take every slot before the next is accepted.
	held := make([]*rawConn, limit)
	for i := range held {
		held[i] = dialRaw(t, p.URL)
	}
	c := dialRaw(t, p.URL)
	resp := c.roundTrip(t, rawHealthz)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("a connection over the limit: %d, Retry-After %q, close=%v", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	c.wantClosed(t, "the 503")

	body := "0\r\n\r\n" + rawHealthz
	resp = held[0].roundTrip(t, "POST /v1/namespaces/acme/outcomes HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\n"+
		"Content-Length: "+strconv.Itoa(len(body))+"\r\nTransfer-Encoding: chunked\r\n\r\n"+body+rawHealthz)
	if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Type") != "application/problem+json" || !resp.Close {
		t.Fatalf("smuggling request: %d %q close=%v", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Close)
	}
	held[0].wantClosed(t, "the smuggling request")

	resp = held[1].roundTrip(t, "GET /healthz HTTP/1.1\r\nHost: relay\r\nX-Pad: "+strings.Repeat("p", 100<<10)+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 100 KiB header: %d, want 431", resp.StatusCode)
	}
	held[1].wantClosed(t, "the 431")
	if resp := held[2].roundTrip(t, rawHealthz); resp.StatusCode != http.StatusOK {
		t.Fatalf("a held connection: %d", resp.StatusCode)
	}
}

func TestConnectionAndBacklogSettingsAreChecked(t *testing.T) {
	for _, tc := range []struct{ flag, value, want string }{
		{"-max-connections", "0", "max connections"},
		{"-max-connections", "-5", "max connections"},
		{"-max-namespaces", "0", "max namespaces"},
		{"-backlog-sample-every", "-1s", "backlog sample interval"},
		{"-delivery-linger", "-1ms", "delivery linger"},
		{"-delivery-linger", "2s", "delivery linger"},
	} {
		c, err := parse([]string{tc.flag, tc.value})
		if err == nil {
			_, err = app.New(t.Context(), c)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v", tc.flag, tc.value, err)
		}
	}
	t.Setenv("RELAY_MAX_CONNECTIONS", "many")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "RELAY_MAX_CONNECTIONS") {
		t.Errorf("RELAY_MAX_CONNECTIONS=many: %v", err)
	}
	c, err := parse([]string{"-max-connections", "7"})
	if err != nil || c.MaxConnections != 7 {
		t.Errorf("the flag overrides a bad variable: %v, %d", err, c.MaxConnections)
	}
	t.Setenv("RELAY_MAX_CONNECTIONS", "")
	t.Setenv("RELAY_BACKLOG_SAMPLE_EVERY", "soon")
	if _, err := parse(nil); err == nil || !strings.Contains(err.Error(), "RELAY_BACKLOG_SAMPLE_EVERY") {
		t.Errorf("RELAY_BACKLOG_SAMPLE_EVERY=soon: %v", err)
	}
	t.Setenv("RELAY_BACKLOG_SAMPLE_EVERY", "0")
	c, err = parse(nil)
	if err != nil || c.MaxConnections != httpapi.DefaultMaxConnections || c.BacklogEvery != 0 || c.MaxNamespaces != outbox.DefaultMaxNamespaces {
		t.Fatalf("defaults: %v, %d connections, backlog every %v, %d namespaces", err, c.MaxConnections, c.BacklogEvery, c.MaxNamespaces)
	}
	t.Setenv("RELAY_MAX_NAMESPACES", "25")
	if c, err = parse(nil); err != nil || c.MaxNamespaces != 25 {
		t.Fatalf("RELAY_MAX_NAMESPACES=25: %v, %d", err, c.MaxNamespaces)
	}
}

// records is a slog handler that passes every record to a channel.
type records chan slog.Record

func (records) Enabled(context.Context, slog.Level) bool { return true }
func (c records) Handle(_ context.Context, r slog.Record) error {
	select {
	case c <- r.Clone():
	default: // nobody reads any more
	}
	return nil
}
func (c records) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c records) WithGroup(string) slog.Handler      { return c }

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// syncBuffer is a bytes.Buffer safe to write and read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// relay serve samples the backlog in the background and exports it on
// /metrics: an outcome waiting on a disabled endpoint shows as one row.
// The start-up line and /metrics say which relay it is.
func TestServeExportsTheBacklogGauges(t *testing.T) {
	t.Setenv("RELAY_REDIS_URL", "")
	logs := make(records, 1024)
	var stdout syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, []string{"-listen", "127.0.0.1:0", "-backlog-sample-every", "20ms", "-log-level", "debug"}, slog.New(logs), &stdout)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	timeout := time.After(settle)
	// next waits for the next record with msg whose attrs pass ok.
	next := func(msg string, ok func(slog.Record) bool) slog.Record {
		t.Helper()
		for {
			select {
			case r := <-logs:
				if r.Message == msg && ok(r) {
					return r
				}
			case err := <-served:
				t.Fatalf("serve ended: %v", err)
			case <-timeout:
				t.Fatalf("no %q logged", msg)
			}
		}
	}
	anyRecord := func(slog.Record) bool { return true }
	listening := next("relay listening", anyRecord)
	base := "http://" + attr(listening, "addr").String()
	build := buildinfo.Read()
	if v, c, g := attr(listening, "version").String(), attr(listening, "commit").String(), attr(listening, "go_version").String(); v != build.Version || c != build.Commit || g != build.GoVersion {
		t.Errorf("the start-up line says version %q, commit %q, go_version %q; want %#v", v, c, g, build)
	}
	next("backlog sampled", anyRecord)
	_, tok, ok := strings.Cut(stdout.String(), "export RELAY_TOKEN=")
	if !ok {
		t.Fatalf("no token printed: %q", stdout.String())
	}
	tok = strings.Fields(tok)[0]
	// The console link carries the same token, in the fragment, to where
	// this process answers.
	if want := "\n  " + base + "/console/#token=" + tok + "\n"; !strings.Contains(stdout.String(), want) {
		t.Errorf("no console link %q printed: %q", want, stdout.String())
	}
	if page, err := http.Get(base + "/console/"); err != nil {
		t.Fatal(err)
	} else if page.Body.Close(); page.StatusCode != http.StatusOK || page.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("console: %d, CSP %q", page.StatusCode, page.Header.Get("Content-Security-Policy"))
	}
	do := func(method, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do("PUT", "/v1/namespaces/acme/endpoints/billing", `{"url": "http://127.0.0.1:1/hook", "enabled": false}`); code != http.StatusCreated {
		t.Fatalf("put endpoint: %d", code)
	}
	if code := do("POST", "/v1/namespaces/acme/outcomes", `{"reservation_id": "r-1", "repository": "acme/widgets", "occurred_unix_ms": 1764460800000, "expired": {}}`); code != http.StatusAccepted {
		t.Fatalf("post outcome: %d", code)
	}
	next("backlog sampled", func(r slog.Record) bool { return attr(r, "rows").Uint64() == 1 })
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"\nrelay_backlog_rows 1\n", "\nrelay_backlog_unread_namespaces 0\n", "\nrelay_backlog_oldest_age_seconds ",
		fmt.Sprintf("\nrelay_build_info{commit=%q,go_version=%q,version=%q} 1\n", build.Commit, build.GoVersion, build.Version)} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}

func TestDurabilitySettingsAreChecked(t *testing.T) {
	for _, args := range [][]string{
		{"-durability", "replicas=0"},
		{"-durability", "replicas=-1"},
		{"-durability", "replicas=two"},
		{"-durability", "replicas="},
		{"-durability", "disk"},
		{"-durability", "replicas=1", "-durability-timeout", "5s"},
		{"-durability", "replicas=1", "-durability-timeout", "-1s"},
	} {
		if _, err := parse(args); err == nil || !strings.Contains(err.Error(), "durability") {
			t.Errorf("%v: %v, want a durability error", args, err)
		}
	}
	t.Setenv("RELAY_DURABILITY", "replicas=2")
	t.Setenv("RELAY_DURABILITY_TIMEOUT", "250ms")
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	d, err := app.ParseDurability(c.Durability, c.DurabilityTimeout)
	if err != nil || d.Replicas != 2 || d.Timeout != 250*time.Millisecond {
		t.Fatalf("RELAY_DURABILITY=replicas=2: %+v, %v", d, err)
	}
	// The embedded miniredis has no replica to wait for.
	if _, err := app.New(t.Context(), c); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("replicas=2 without a Redis: %v", err)
	}
	t.Setenv("RELAY_DURABILITY", "")
	t.Setenv("RELAY_DURABILITY_TIMEOUT", "")
	if c, err := parse(nil); err != nil || c.Durability != "memory" {
		t.Fatalf("default: %q, %v", c.Durability, err)
	}
}

func TestALogLevelIsChecked(t *testing.T) {
	for _, v := range []string{"verbose", "warning", "0"} {
		if _, err := parse([]string{"-log-level", v}); err == nil || !strings.Contains(err.Error(), "--log-level/RELAY_LOG_LEVEL") {
			t.Errorf("-log-level %s: %v, want an error naming the setting", v, err)
		}
	}
	t.Setenv("RELAY_LOG_LEVEL", "WARN")
	if c, err := parse(nil); err != nil || c.LogLevel != "WARN" {
		t.Fatalf("RELAY_LOG_LEVEL=WARN: %q, %v", c.LogLevel, err)
	}
}

// At RELAY_LOG_LEVEL=warn the binary logs no line per request, as it does
// at the default info, but still its start-up line.
func TestAtWarnTheBinaryLogsNoLinePerRequest(t *testing.T) {
	for _, c := range []struct {
		level    string
		requests bool
	}{{"", true}, {"warn", false}} {
		p, _ := startRelay(t, []string{"RELAY_REDIS_URL=", "RELAY_LOG_LEVEL=" + c.level}, true)
		for range 3 {
			if status, _ := p.Call(t, http.MethodGet, "/healthz", "", nil); status != http.StatusOK {
				t.Fatalf("healthz: %d", status)
			}
		}
		p.Stop()
		log := p.Log()
		if got := strings.Contains(log, `msg="http request"`); got != c.requests {
			t.Errorf("RELAY_LOG_LEVEL=%q: request lines logged %v, want %v\n%s", c.level, got, c.requests, log)
		}
		if !strings.Contains(log, "relay listening") {
			t.Errorf("RELAY_LOG_LEVEL=%q: no start-up line\n%s", c.level, log)
		}
	}
}
