package relaytest

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/testlog"
)

// ReceiveProcess is a running `relay receive`, its stdout as lines.
type ReceiveProcess struct {
	URL   string
	lines chan string
}

// StartReceive runs `relay receive -listen <free address> args...` and
// waits for the line that says it listens.
func StartReceive(t testing.TB, args ...string) *ReceiveProcess {
	t.Helper()
	addr := FreeAddr(t)
	cmd := exec.Command(Binary(t), append([]string{"receive", "-listen", addr}, args...)...)
	var stderr testlog.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	rp := &ReceiveProcess{URL: "http://" + addr, lines: make(chan string, 256)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			rp.lines <- sc.Text()
		}
		close(rp.lines)
	}()
	select {
	case l := <-rp.lines:
		if !strings.HasPrefix(l, "receiving on ") {
			_ = cmd.Wait() // stderr is complete once the process is reaped
			t.Fatalf("receiver %q: %q\n%s", args, l, stderr.String())
		}
	case <-time.After(startWithin):
		t.Fatal("the receiver did not start")
	}
	return rp
}

// Lines are the receiver's lines of output after the first; the channel
// closes when it exits.
func (rp *ReceiveProcess) Lines() <-chan string { return rp.lines }

// Next is the receiver's next line; it fails the test when none comes.
func (rp *ReceiveProcess) Next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-rp.lines:
		if !ok {
			t.Fatal("the receiver stopped")
		}
		return l
	case <-time.After(startWithin):
		t.Fatal("the receiver printed nothing more")
	}
	return ""
}
