package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestBenchParseProcStatReadsUserAndSystemTicks(t *testing.T) {
	t.Parallel()
	// Fields 3 to 13, then utime and stime, then the rest of a real line.
	const head, tail = "S 1 1 1 0 -1 4194560 1234 0 0 0", " 0 0 20 0 9 0 4242 123456789 1234 18446744073709551615"
	for _, tc := range []struct {
		name, line string
		want       time.Duration
	}{
		{"plain", "4242 (relay) " + head + " 250 75" + tail, 3250 * time.Millisecond},
		{"spaces and parentheses in the name", "4242 (re) (lay x) " + head + " 1 2" + tail + "\n", 30 * time.Millisecond},
		{"nothing after stime", "7 (relay) " + head + " 0 1", 10 * time.Millisecond},
	} {
		got, err := parseProcStat(tc.line)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	for _, line := range []string{
		"",
		"garbage",
		"4242 relay " + head + " 250 75" + tail,  // no parentheses
		"4242 (relay) " + head + " 250",          // no stime
		"4242 (relay)",                           // nothing after the name
		"4242 (relay) " + head + " -5 75" + tail, // negative
		"4242 (relay) " + head + " 2.5 75" + tail,          // not a count
		"4242 (relay) " + head + " 0x10 75" + tail,         // not decimal
		"4242 (relay) " + head + " 9223372036854775807 1",  // beyond a Duration
		"4242 (relay) " + head + " 99999999999999999999 1", // beyond 64 bits
		"4242 (relay) " + head + " 250 75) 1 2",            // a ')' after the fields shifts them
	} {
		if got, err := parseProcStat(line); err == nil {
			t.Errorf("%q: read as %v, want an error", line, got)
		}
	}
}

func TestBenchParseInfoCPUSumsTheServerProcessAlone(t *testing.T) {
	t.Parallel()
	const section = "# CPU\r\nused_cpu_sys:31.571270\r\nused_cpu_user:32.608118\r\nused_cpu_sys_children:7.000000\r\n" +
		"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:30.210839\r\nused_cpu_user_main_thread:31.794907\r\n"
	got, err := parseInfoCPU(section)
	if want := 64179388 * time.Microsecond; err != nil || got != want {
		t.Errorf("%v, %v; want %v: the children and main-thread fields are not the process's own", got, err, want)
	}
	if got, err := parseInfoCPU("used_cpu_user:0.5\nused_cpu_sys:0.25"); err != nil || got != 750*time.Millisecond {
		t.Errorf("without CRs: %v, %v", got, err)
	}
	for _, info := range []string{
		"",
		"# CPU\r\n",
		"garbage\x00\xff:::",
		"used_cpu_sys:1.0\r\n", // no user
		"used_cpu_user:1.0\r\nused_cpu_sys_children:1.0\r\n", // children are not sys
		"used_cpu_sys:1.0\r\nused_cpu_user:\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:abc\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:-1\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:NaN\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:+Inf\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:1e300\r\n",
		"used_cpu_sys:1.0\r\nused_cpu_user:1.0\r\nused_cpu_user:2.0\r\n", // given twice
	} {
		if got, err := parseInfoCPU(info); err == nil {
			t.Errorf("%q: read as %v, want an error", info, got)
		}
	}
}

func TestBenchCPUPerOutcomeIsUnknownUnlessBothEndsAreKnown(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	var p phaseResult
	cpuPerOutcome(&p, cpuTimes{self: 10 * ms, relay: 1 * ms, redis: 5 * ms}, cpuTimes{self: 30 * ms, relay: 3 * ms, redis: 6 * ms}, 100)
	if p.SelfCPU != 200 || p.RelayCPU != 20 || p.RedisCPU != 10 {
		t.Errorf("per outcome %v / %v / %v µs, want 200 / 20 / 10", p.SelfCPU, p.RelayCPU, p.RedisCPU)
	}
	for _, tc := range []struct {
		name          string
		before, after cpuTimes
		outcomes      int
	}{
		{"unknown before", cpuTimes{-1, -1, -1}, cpuTimes{ms, ms, ms}, 100},
		{"unknown after", cpuTimes{ms, ms, ms}, cpuTimes{-1, -1, -1}, 100},
		{"backwards", cpuTimes{2 * ms, 2 * ms, 2 * ms}, cpuTimes{ms, ms, ms}, 100},
		{"no outcomes", cpuTimes{ms, ms, ms}, cpuTimes{2 * ms, 2 * ms, 2 * ms}, 0},
	} {
		var p phaseResult
		cpuPerOutcome(&p, tc.before, tc.after, tc.outcomes)
		if p.SelfCPU >= 0 || p.RelayCPU >= 0 || p.RedisCPU >= 0 {
			t.Errorf("%s: %v / %v / %v, want all unknown", tc.name, p.SelfCPU, p.RelayCPU, p.RedisCPU)
		}
	}
}

// idleChildEnv makes the test binary an idle process: it says it is
// ready and waits for its stdin to close.
const idleChildEnv = "RELAY_BENCH_IDLE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(idleChildEnv) == "1" {
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The relay column reads the -target-pid process, so the CPU this process
// burns, load generator and receiver, is not in it.
func TestBenchRelayCPUIsTheTargetProcessAlone(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/<pid>/stat is Linux's")
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), idleChildEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child said %q, %v", line, err)
	}
	b := &bencher{cfg: benchConfig{targetPID: cmd.Process.Pid}}
	before := b.cpu(t.Context())
	// Burn CPU here until getrusage has seen 300ms of it: far more than the
	// idle child spends, and thirty of /proc's ticks.
	var sink bytes.Buffer
	for {
		now, err := selfCPU()
		if err != nil {
			t.Fatal(err)
		}
		if now-before.self >= 300*time.Millisecond {
			break
		}
		sink.Reset()
		sink.WriteString(strings.Repeat("relay", 1000))
	}
	after := b.cpu(t.Context())
	if before.relay < 0 || after.relay < 0 {
		t.Fatalf("the child's CPU unread: %v, %v", before.relay, after.relay)
	}
	self, relay := after.self-before.self, after.relay-before.relay
	if relay > self/3 {
		t.Errorf("relay's CPU grew %v while this process burnt %v: it counts this process", relay, self)
	}
	if b.counter != nil || after.redis >= 0 {
		t.Errorf("Redis CPU %v without a Redis", after.redis)
	}
}

func TestBenchTargetPIDMustBeAProcessOfTheTarget(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-target-pid", "1"},
		{"-target", "http://127.0.0.1:1", "-token", "t", "-target-pid", "-3"},
	} {
		if _, err := parseBench(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	c, err := parseBench([]string{"-target", "http://127.0.0.1:1", "-token", "t", "-target-pid", "2147483647"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = runBench(t.Context(), c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "-target-pid") {
		t.Errorf("a pid of no process: %v, want a -target-pid error", err)
	}
}
