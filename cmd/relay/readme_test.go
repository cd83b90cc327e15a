package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// readmeBlock is the shell block after the marker <!-- name --> in
// README.md.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- "+name+" -->\n```sh\n")
	if !ok {
		t.Fatalf("README.md has no %s block", name)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatalf("the %s block does not end", name)
	}
	return block
}

// receiveLine is the arguments of the quick start's `relay receive` line.
func receiveLine(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\ngo run ./cmd/relay receive ")
	if !ok {
		t.Fatal("README.md has no `go run ./cmd/relay receive` line")
	}
	line, _, _ := strings.Cut(rest, "\n")
	return line
}

// readmeSays is the line the quick start says the receiver prints.
func readmeSays(t *testing.T) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "The receiver prints\n`")
	if !ok {
		t.Fatal("README.md does not say what the receiver prints")
	}
	line, _, _ := strings.Cut(rest, "`")
	return line
}

// TestReadmeQuickStartWorks runs the README's curl lines, as written, against
// the development server and the receiver the README starts; only the two
// addresses are replaced by free ones, so the test never collides with a
// relay already on port 8080.
func TestReadmeQuickStartWorks(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	// The lines run here the moment the receiver prints, where a person
	// takes seconds: a fire lingering for the next outcome acknowledges
	// this one up to a linger later, and the resend would find it still
	// pending.
	p, token := startRelay(t, []string{"RELAY_REDIS_URL=", "RELAY_DELIVERY_LINGER=0"}, true)
	relayAddr := strings.TrimPrefix(p.URL, "http://")

	// The receiver as the README starts it, on a free address.
	args := strings.Fields(strings.ReplaceAll(receiveLine(t), "127.0.0.1:8080", relayAddr))
	rp := relaytest.StartReceive(t, args...)
	recvAddr := strings.TrimPrefix(rp.URL, "http://")
	lines := rp.Lines()

	addrs := strings.NewReplacer("127.0.0.1:8080", relayAddr, "127.0.0.1:9000", recvAddr)
	run := func(block string) string {
		sh := exec.Command("bash", "-euo", "pipefail", "-c", addrs.Replace(readmeBlock(t, block)))
		sh.Env = append(os.Environ(), "RELAY_TOKEN="+token)
		res, err := sh.CombinedOutput()
		if err != nil {
			t.Fatalf("the %s lines failed: %v\n%s", block, err, res)
		}
		return string(res)
	}
	run("quickstart")
	want := readmeSays(t)
	await := func() {
		t.Helper()
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
	await()
	// Once delivered, the outcome's story says so, and a resend reaches
	// the receiver again.
	out := run("see-what-happened")
	for _, w := range []string{`"state":"delivered"`, `"due_at"`} {
		if !strings.Contains(out, w) {
			t.Errorf("the see-what-happened lines printed no %s:\n%s", w, out)
		}
	}
	await()
}
