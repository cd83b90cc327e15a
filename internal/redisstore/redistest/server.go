package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/testlog"
	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of one test's own, free to reconfigure, fill,
// flush, stop and start again.
type Server struct {
	Addr string
	Port int
	// Client talks to the server, across its restarts; it is closed when
	// the test ends.
	Client *redis.Client

	t    testing.TB
	bin  string
	args []string

	mu  sync.Mutex
	run *serverRun // the process now; nil before the first start
}

// serverRun is one run of the server's process.
type serverRun struct {
	cmd    *exec.Cmd
	exited chan struct{}
	out    *testlog.Buffer
	once   sync.Once
}

// kill kills the process and waits until it has exited.
func (r *serverRun) kill() {
	r.once.Do(func() {
		_ = r.cmd.Process.Kill()
		<-r.exited
	})
}

// ServerOptions are how StartServerWith starts a server.
type ServerOptions struct {
	// AOF persists every write to an append-only file (fsync every second)
	// in a directory that outlives restarts; off, the server keeps nothing.
	AOF bool
	// Port picks the port to try; nil, a free loopback port. (A Cluster
	// node wants its bus port free too.)
	Port func(testing.TB) int
	// Args follow the server's own, e.g. "--maxmemory", "2mb".
	Args []string
}

// Stop kills the server and waits until it has exited, so that every later
// connection to Addr is refused (until another process takes the port). The
// test's clients stay open. Stopping twice is harmless; the test's cleanup
// stops the server anyway.
func (s *Server) Stop() {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if r != nil {
		r.kill()
	}
}

// Shutdown stops the server as an operator would (SIGTERM: the AOF is
// flushed) and waits for it to exit.
func (s *Server) Shutdown() {
	s.t.Helper()
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatal("redis-server did not stop after SIGTERM")
	}
}

// Restart starts the server again on its port and directory, after Stop or
// Shutdown, and waits until it has loaded what it persisted.
func (s *Server) Restart() error { return s.launch() }

// StartServer starts redis-server on a free loopback port with persistence
// off and the extra arguments (e.g. "--maxmemory", "2mb"), waits until it
// answers PING, and kills it when the test ends. It skips the test when
// redis-server is not on PATH (fails it under RELAY_TEST_REQUIRE_REAL=1).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	return StartServerWith(t, ServerOptions{Args: args})
}

// StartServerWith is StartServer as o says.
func StartServerWith(t testing.TB, o ServerOptions) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		requireOrSkip(t, "redis-server is not on PATH")
	}
	port := o.Port
	if port == nil {
		port = FreePort
	}
	persistence := []string{"--save", "", "--appendonly", "no"}
	if o.AOF {
		persistence = []string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec"}
	}
	s := &Server{t: t, bin: bin}
	dir := t.TempDir()
	// Another process may take the port between our probe and the server's
	// bind; a server that exits at once gets a new port.
	for range 5 {
		s.Port = port(t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		s.args = append(append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", dir}, persistence...), o.Args...)
		if err = s.launch(); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	// A client for the test, with go-redis's usual retries.
	s.Client = redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() {
		_ = s.Client.Close()
		s.Stop()
	})
	return s
}

// FreePort is a loopback port free when asked; the caller binds it soon
// after, and retries should another process take it first.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// launch starts the process and waits until it, not another server on the
// port, answers with its data loaded.
func (s *Server) launch() error {
	cmd := exec.Command(s.bin, s.args...)
	r := &serverRun{cmd: cmd, exited: make(chan struct{}), out: &testlog.Buffer{}}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	s.mu.Lock()
	s.run = r
	s.mu.Unlock()

	probe := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: time.Second})
	defer probe.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := probe.InfoMap(ctx, "server", "persistence").Result()
		if err == nil {
			// The answer must come from our process, not from another
			// server that took the port first.
			if pid := info["Server"]["process_id"]; pid != strconv.Itoa(cmd.Process.Pid) {
				r.kill()
				return fmt.Errorf("port %d is held by another server (pid %s)", s.Port, pid)
			}
			if info["Persistence"]["loading"] == "0" {
				return nil
			}
		}
		select {
		case <-r.exited:
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, r.out.String())
		case <-ctx.Done():
			r.kill()
			return fmt.Errorf("redis-server did not answer within 30s: %s", r.out.String())
		case <-tick.C:
		}
	}
}

// StartReplica starts a server replicating master and waits until its
// link is up (and so its first sync done), as StartServer does otherwise.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	replica := StartServer(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}, args...)...)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for {
		info, _ := replica.Client.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") {
			return replica
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("the replica did not link: %s", info)
		}
	}
}

// Pause stops the server's process (SIGSTOP): it holds its connections
// and answers nothing, as a host cut off would, until Resume. The test's
// cleanup resumes it.
func (s *Server) Pause() {
	s.t.Helper()
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pause redis-server: %v", err)
	}
	s.t.Cleanup(s.Resume)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	r := s.run
	s.mu.Unlock()
	_ = r.cmd.Process.Signal(syscall.SIGCONT)
}
