package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// fakeRedis is a loopback server that reads each command of every
// connection and hands the connection to answer, which replies or ends it
// (by returning an error). It returns the server's address; everything stops
// when the test ends.
func fakeRedis(t *testing.T, answer func(c *net.TCPConn) error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for readCommand(r) == nil && answer(c.(*net.TCPConn)) == nil {
				}
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// readCommand reads one RESP array of bulk strings, as clients send them.
func readCommand(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "*") {
		return fmt.Errorf("not a command: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return err
	}
	for range n {
		if line, err = r.ReadString('\n'); err != nil {
			return err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil {
			return err
		}
		if _, err := io.CopyN(io.Discard, r, int64(size)+2); err != nil {
			return err
		}
	}
	return nil
}

// fakeClient is a client of addr that sends each command once, so that the
// error it returns is the first one Redis (or the network) gave.
func fakeClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 5 * time.Second, ReadTimeout: 200 * time.Millisecond,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// replyErr is the error go-redis returns for a command that Redis answers
// with line (an error reply, without its leading '-').
func replyErr(t *testing.T, line string) error {
	t.Helper()
	addr := fakeRedis(t, func(c *net.TCPConn) error {
		_, err := io.WriteString(c, "-"+line+"\r\n")
		return err
	})
	err := fakeClient(t, addr).Get(t.Context(), "k").Err()
	if err == nil || err.Error() != line {
		t.Fatalf("GET answered %v, want the reply %q", err, line)
	}
	return err
}

func wantUnavailable(t *testing.T, raw error, oom bool) {
	t.Helper()
	got := redisstore.Classify(t.Context(), raw)
	if !errors.Is(got, store.ErrUnavailable) {
		t.Fatalf("%T %q classified as %q, want store.ErrUnavailable", raw, raw, got)
	}
	if errors.Is(got, redisstore.ErrOutOfMemory) != oom {
		t.Fatalf("%q classified as %q: ErrOutOfMemory %v, want %v", raw, got, !oom, oom)
	}
	if !errors.Is(got, raw) || !strings.Contains(got.Error(), raw.Error()) {
		t.Fatalf("%q classified as %q lost its cause", raw, got)
	}
	if errors.Is(got, context.Canceled) || errors.Is(got, context.DeadlineExceeded) {
		t.Fatalf("%q classified as %q, which claims a context error", raw, got)
	}
}

func wantUnchanged(t *testing.T, raw error) {
	t.Helper()
	if got := redisstore.Classify(t.Context(), raw); got != raw {
		t.Fatalf("%T %q classified as %q, want it unchanged", raw, raw, got)
	}
}

func TestRedisRepliesThatMeanNotNowAreUnavailable(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"LOADING Redis is loading the dataset in memory",
		"READONLY You can't write against a read only replica.",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"CLUSTERDOWN The cluster is down",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or FUNCTION KILL.",
		"ERR max number of clients reached",
		// Redis 6 runs a script without flags and reports its first write's
		// refusal inside the script's error.
		"ERR Error running script (call to f_3a7c): @user_script:40: @user_script: 40: -READONLY You can't write against a read only replica.",
	} {
		t.Run(strings.Fields(line)[0], func(t *testing.T) {
			t.Parallel()
			wantUnavailable(t, replyErr(t, line), false)
		})
	}
}

func TestOOMRepliesAreOutOfMemoryAndUnavailable(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"OOM command not allowed when used memory > 'maxmemory'.",
		"ERR Error running script (call to f_3a7c): @user_script:40: -OOM command not allowed when used memory > 'maxmemory'.",
	} {
		wantUnavailable(t, replyErr(t, line), true)
	}
}

func TestOtherRedisRepliesAreNotUnavailable(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"ERR unknown command 'FOO', with args beginning with: ",
		"NOAUTH Authentication required.",
		"WRONGPASS invalid username-password pair or user is disabled.",
		"NOPERM this user has no permissions to run the 'evalsha' command",
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"BUSYKEY Target key name already exists.",
		"NOSCRIPT No matching script. Please use EVAL.",
		"ERR Error running script (call to f_3a7c): @user_script:12: relay apply: 3 arguments, want 5",
	} {
		wantUnchanged(t, replyErr(t, line))
	}
}

func TestBrokenConnectionsAreUnavailable(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		raw := fakeClient(t, addr).Ping(t.Context()).Err()
		if !errors.Is(raw, syscall.ECONNREFUSED) {
			t.Fatalf("PING of a closed port: %v, want connection refused", raw)
		}
		wantUnavailable(t, raw, false)
	})
	t.Run("reset", func(t *testing.T) {
		t.Parallel()
		addr := fakeRedis(t, func(c *net.TCPConn) error {
			_ = c.SetLinger(0) // close with RST
			return errors.New("reset")
		})
		raw := fakeClient(t, addr).Ping(t.Context()).Err()
		if !errors.Is(raw, syscall.ECONNRESET) {
			t.Fatalf("PING of a server that resets: %v, want connection reset", raw)
		}
		wantUnavailable(t, raw, false)
	})
	t.Run("closed", func(t *testing.T) {
		t.Parallel()
		addr := fakeRedis(t, func(*net.TCPConn) error { return errors.New("close") })
		raw := fakeClient(t, addr).Ping(t.Context()).Err()
		if !errors.Is(raw, io.EOF) {
			t.Fatalf("PING of a server that hangs up: %v, want EOF", raw)
		}
		wantUnavailable(t, raw, false)
	})
	t.Run("i/o timeout", func(t *testing.T) {
		t.Parallel()
		addr := fakeRedis(t, func(*net.TCPConn) error { return nil }) // never answers
		raw := fakeClient(t, addr).Ping(t.Context()).Err()
		var netErr net.Error
		if !errors.As(raw, &netErr) || !netErr.Timeout() {
			t.Fatalf("PING of a server that never answers: %v, want an i/o timeout", raw)
		}
		wantUnavailable(t, raw, false)
	})
	t.Run("client closed", func(t *testing.T) {
		t.Parallel()
		c := fakeClient(t, "127.0.0.1:1")
		_ = c.Close()
		raw := c.Ping(t.Context()).Err()
		if !errors.Is(raw, redis.ErrClosed) {
			t.Fatalf("PING on a closed client: %v", raw)
		}
		wantUnavailable(t, raw, false)
	})
	wantUnavailable(t, redis.ErrPoolTimeout, false)
	wantUnavailable(t, redis.ErrPoolExhausted, false)
	wantUnavailable(t, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), false)
}

func TestContextErrorsStayContextErrors(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if redisstore.Classify(t.Context(), nil) != nil {
		t.Fatal("nil classified as an error")
	}
	for _, err := range []error{context.Canceled, context.DeadlineExceeded, fmt.Errorf("get acme: %w", context.DeadlineExceeded)} {
		wantUnchanged(t, err)
	}
	wantUnchanged(t, fmt.Errorf("get acme: %w: %w", store.ErrUnavailable, refused))

	// A call that failed because its ctx ended reports ctx's error, with
	// the network's words for the log, and is not "unavailable".
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, stop := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer stop()
	for _, ended := range []context.Context{cancelled, expired} {
		got := redisstore.Classify(ended, refused)
		if !errors.Is(got, ended.Err()) || errors.Is(got, store.ErrUnavailable) || !errors.Is(got, syscall.ECONNREFUSED) {
			t.Fatalf("error of an ended ctx (%v) classified as %q", ended.Err(), got)
		}
	}
}

// TestFullRedisIsOutOfMemoryAndUnavailable fills a Redis at 1 MB with
// noeviction until it refuses a write.
func TestFullRedisIsOutOfMemoryAndUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t, "--maxmemory", "1mb", "--maxmemory-policy", "noeviction")
	value := bytes.Repeat([]byte{'x'}, 32<<10)
	var raw error
	for i := 0; raw == nil; i++ {
		if i == 1000 {
			t.Fatal("a Redis at 1 MB took 32 MB")
		}
		raw = srv.Client.Set(t.Context(), "fill:"+strconv.Itoa(i), value, 0).Err()
	}
	if !strings.HasPrefix(raw.Error(), "OOM ") {
		t.Fatalf("a full Redis answered %v, want OOM", raw)
	}
	wantUnavailable(t, raw, true)
}

// TestStoppedRedisIsUnavailableOnEveryPath: once Redis is gone, every call
// the API and the delivery driver make reports store.ErrUnavailable.
func TestStoppedRedisIsUnavailableOnEveryPath(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	// One try per call: go-redis's own retries only make the test slower.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	s := redistest.NewStore(t, client, redisstore.Options{})
	var put store.Batch
	put.Put("k", store.Value("v"))
	mustCommit(t, s, acme, put)
	srv.Stop()

	ctx := t.Context()
	settling := store.Batch{Settles: true}
	settling.Delete("k")
	calls := map[string]func() error{
		"Get":     func() error { _, _, err := s.Get(ctx, acme, "k"); return err },
		"GetMany": func() error { _, err := s.GetMany(ctx, acme, []store.Key{"k"}); return err },
		"Scan":    func() error { _, err := s.Scan(ctx, acme, "a", "z", nil, 10); return err },
		"ReadMany": func() error {
			_, err := store.ReadMany(ctx, s, acme, []store.Read{{Keys: []store.Key{"k"}}, {Start: "a", End: "z", Limit: 10}})
			return err
		},
		"Apply":          func() error { _, err := s.Apply(ctx, acme, put); return err },
		"Apply settling": func() error { _, err := s.Apply(ctx, acme, settling); return err },
		"ApplyAll": func() error {
			_, err := s.ApplyAll(ctx, []redisstore.Item{{Partition: acme, Batch: put}, {Partition: acme, Batch: settling}})
			return err
		},
		"Due":    func() error { _, err := s.Due(ctx, 0, 1<<62, 10); return err },
		"DueAll": func() error { _, err := s.DueAll(ctx, 1<<62, 10); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, redisstore.ErrOutOfMemory) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s on a stopped Redis: %v, want store.ErrUnavailable caused by a refused connection", name, err)
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Get(cancelled, acme, "k"); !errors.Is(err, context.Canceled) || errors.Is(err, store.ErrUnavailable) {
		t.Errorf("Get with a cancelled ctx on a stopped Redis: %v, want context.Canceled alone", err)
	}
}

// TestReplicaIsUnavailable: a node demoted to a replica (a failover) refuses
// writes with READONLY; one told not to serve stale data while its master is
// out of reach refuses reads with MASTERDOWN.
func TestReplicaIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := redistest.NewStore(t, srv.Client, redisstore.Options{})
	ctx := t.Context()
	var put store.Batch
	put.Put("k", store.Value("v"))
	mustCommit(t, s, acme, put)

	// A master that accepts the connection and never answers: the link
	// stays down for as long as the test runs.
	master, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = master.Close() })
	host, port, _ := net.SplitHostPort(master.Addr().String())
	if err := srv.Client.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}

	_, err = s.Apply(ctx, acme, put)
	if !errors.Is(err, store.ErrUnavailable) || !redis.IsReadOnlyError(err) {
		t.Fatalf("Apply on a replica: %v, want store.ErrUnavailable caused by READONLY", err)
	}
	if _, err := s.ApplyAll(ctx, []redisstore.Item{{Partition: acme, Batch: put}}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ApplyAll on a replica: %v, want store.ErrUnavailable", err)
	}
	if v, found, err := s.Get(ctx, acme, "k"); err != nil || !found || string(v) != "v" {
		t.Fatalf("Get on a replica serving stale data: %q %v %v", v, found, err)
	}

	if err := srv.Client.ConfigSet(ctx, "replica-serve-stale-data", "no").Err(); err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Get":  func() error { _, _, err := s.Get(ctx, acme, "k"); return err },
		"Scan": func() error { _, err := s.Scan(ctx, acme, "a", "z", nil, 10); return err },
	} {
		if err := call(); !errors.Is(err, store.ErrUnavailable) || !redis.IsMasterDownError(err) {
			t.Errorf("%s on a replica cut off from its master: %v, want store.ErrUnavailable caused by MASTERDOWN", name, err)
		}
	}
}
