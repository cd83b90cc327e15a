package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// quickStart is the shell block after the quickstart marker in README.md.
func quickStart(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- quickstart -->\n```sh\n")
	if !ok {
		t.Fatal("README.md has no quickstart block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("the quickstart block does not end")
	}
	return block
}

// TestReadmeQuickStartWorks runs the README's curl lines, as written, against
// the development server and the receiver the README starts; only the two
// addresses are replaced by free ones, so the test never collides with a
// relay already on port 8080.
func TestReadmeQuickStartWorks(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	p, token := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	relayAddr := strings.TrimPrefix(p.url, "http://")

	recvAddr := freeAddr(t)
	recv := exec.Command(relayBinary(t), "receive", "-listen", recvAddr, "-keys", p.url+"/.well-known/mkit-hook-keys.json")
	out, err := recv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := recv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = recv.Process.Kill()
		_ = recv.Wait()
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	// The receiver says where it listens once it does.
	select {
	case l := <-lines:
		if !strings.HasPrefix(l, "receiving on ") {
			t.Fatalf("receiver: %q", l)
		}
	case <-time.After(settle):
		t.Fatal("the receiver did not start")
	}

	script := strings.NewReplacer("127.0.0.1:8080", relayAddr, "127.0.0.1:9000", recvAddr).Replace(quickStart(t))
	sh := exec.Command("bash", "-euo", "pipefail", "-c", script)
	sh.Env = append(os.Environ(), "RELAY_TOKEN="+token)
	if res, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the quick start failed: %v\n%s", err, res)
	}
	want := `verified mkit-hook-v1 "/hooks" "outcome.committed" reservation_id="r-7f3a"`
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the receiver stopped")
			}
			if l == want {
				return
			}
			if strings.HasPrefix(l, "REJECTED") {
				t.Fatalf("receiver: %s", l)
			}
		case <-time.After(settle):
			t.Fatalf("the receiver never printed %s", want)
		}
	}
}
