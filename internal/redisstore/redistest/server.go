package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/testlog"
	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of one test's own, free to reconfigure, fill or
// flush.
type Server struct {
	Addr string
	// Client talks to the server; it is closed when the test ends.
	Client *redis.Client

	stop func()
}

// Stop kills the server and waits until it has exited, so that every later
// connection to Addr is refused (until another process takes the port). The
// test's clients stay open. Stopping twice is harmless; the test's cleanup
// stops the server anyway.
func (s *Server) Stop() { s.stop() }

// StartServer starts redis-server on a free loopback port with persistence
// off and the extra arguments (e.g. "--maxmemory", "2mb"), waits until it
// answers PING, and kills it when the test ends. It skips the test when
// redis-server is not on PATH (fails it under RELAY_TEST_REQUIRE_REAL=1).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		requireOrSkip(t, "redis-server is not on PATH")
	}
	dir := t.TempDir()
	var lastErr error
	// Another process may take the port between our probe and the server's
	// bind; a server that exits at once gets a new port.
	for range 5 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		srv, err := startServer(t, bin, dir, port, args)
		if err == nil {
			return srv
		}
		lastErr = err
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startServer(t testing.TB, bin, dir string, port int, extra []string) (*Server, error) {
	t.Helper()
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
	}, extra...)
	cmd := exec.Command(bin, args...)
	var out testlog.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// The answer must come from our process, not from another server
		// that took the port first.
		if pid, err := serverPID(ctx, client); err == nil {
			if pid == cmd.Process.Pid {
				break
			}
			_ = client.Close()
			kill()
			return nil, fmt.Errorf("port %d is held by another server (pid %d)", port, pid)
		}
		select {
		case <-exited:
			_ = client.Close()
			return nil, fmt.Errorf("redis-server on port %d exited: %s", port, out.String())
		case <-ctx.Done():
			_ = client.Close()
			kill()
			return nil, errors.New("redis-server did not answer PING within 15s: " + out.String())
		case <-tick.C:
		}
	}
	_ = client.Close()
	// A client for the test, with go-redis's usual retries.
	client = redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		_ = client.Close()
		kill()
	})
	return &Server{Addr: addr, Client: client, stop: kill}, nil
}

func serverPID(ctx context.Context, client *redis.Client) (int, error) {
	info, err := client.InfoMap(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(info["Server"]["process_id"])
}
