package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

// smallBench is a bench quick enough for a test.
var smallBench = []string{"-n", "300", "-latency-n", "100", "-rate", "500", "-streams", "2", "-concurrency", "8"}

// benchTable reads the printed table: each phase's row by column name.
func benchTable(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	rows := map[string]map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		cells := strings.Fields(line)
		if len(cells) != len(benchColumns) || !slices.Contains(benchPhases, cells[0]) {
			continue
		}
		row := map[string]string{}
		for i, c := range benchColumns {
			row[c] = cells[i]
		}
		rows[cells[0]] = row
	}
	return rows
}

func number(t *testing.T, row map[string]string, column string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimSuffix(row[column], "ms"), 64)
	if err != nil {
		t.Fatalf("%s of %s is %q, not a number", column, row["phase"], row[column])
	}
	return v
}

// checkEveryPhaseDelivered asserts what a user reads first: every phase
// ran, nothing failed, every delivering phase delivered everything, and
// every rate is positive.
func checkEveryPhaseDelivered(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	rows := benchTable(t, out)
	for _, phase := range benchPhases {
		row, ok := rows[phase]
		if !ok {
			t.Fatalf("no %s row in\n%s", phase, out)
		}
		if row["errors"] != "0" {
			t.Errorf("%s: %s errors\n%s", phase, row["errors"], out)
		}
		if number(t, row, "rate/s") <= 0 {
			t.Errorf("%s: rate %s is not positive", phase, row["rate/s"])
		}
		if phase == phaseE2E || phase == phaseLatency {
			if row["delivered"] != row["outcomes"] {
				t.Errorf("%s: %s of %s outcomes delivered\n%s", phase, row["delivered"], row["outcomes"], out)
			}
		}
	}
	want := map[string]string{phaseSingle: "300", phaseBatch: "300", phaseE2E: "300", phaseLatency: "100"}
	for phase, n := range want {
		if rows[phase]["outcomes"] != n {
			t.Errorf("%s: %s outcomes, want %s", phase, rows[phase]["outcomes"], n)
		}
	}
	if lat := rows[phaseLatency]; number(t, lat, "p50") > number(t, lat, "p99") || number(t, lat, "p99") > number(t, lat, "max") {
		t.Errorf("latency percentiles out of order: %v", lat)
	}
	return rows
}

// Not parallel, here or in the next test: a bench measures, and tests
// running beside it would only make it slower.
func TestBenchRunsEveryPhaseInProcessOnTheEmbeddedStore(t *testing.T) {
	var out bytes.Buffer
	args := append([]string{"bench", "-redis", ""}, smallBench...)
	if err := run(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if !strings.Contains(out.String(), "redis=embedded") || !strings.Contains(out.String(), "does not verify signatures") {
		t.Errorf("the settings line should name the embedded store and say signatures go unverified:\n%s", out.String())
	}
	rows := checkEveryPhaseDelivered(t, out.String())
	for _, phase := range benchPhases {
		if rows[phase]["redis cmds/outcome"] != "-" {
			t.Errorf("%s: miniredis commands should be unknown, got %s", phase, rows[phase]["redis cmds/outcome"])
		}
	}
}

func TestBenchCountsRedisCommandsAndLeavesNoKeyBehind(t *testing.T) {
	client := redistest.RealClient(t)
	c, err := parseBench(append([]string{"-redis", os.Getenv(redistest.EnvRedisURL)}, smallBench...))
	if err != nil {
		t.Fatal(err)
	}
	res, err := runBench(context.Background(), c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var out bytes.Buffer
	if perr := printBench(&out, res); perr != nil {
		t.Fatal(perr)
	}
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	rows := checkEveryPhaseDelivered(t, out.String())
	for _, phase := range benchPhases {
		if rows[phase]["redis cmds/outcome"] == "-" || number(t, rows[phase], "redis cmds/outcome") <= 0 {
			t.Errorf("%s: Redis commands per outcome %q, want a positive number", phase, rows[phase]["redis cmds/outcome"])
		}
	}
	if !strings.HasPrefix(res.Prefix, "relaybench:") {
		t.Fatalf("bench prefix %q", res.Prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, res.Prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("%d keys left under %q, e.g. %q", len(keys), res.Prefix, keys[0])
	}
}

func TestBenchTableIsAlignedAndReportsEveryError(t *testing.T) {
	t.Parallel()
	res := benchResult{
		Target: "in-process", Redis: "redis", Streams: 8, Concurrency: 64, N: 20000, Batch: 100, Payload: 256,
		Scheme: "standard-webhooks", MaxInFlight: 16, Window: 5000, Rate: 1000, LatencyN: 5000, GOMAXPROCS: 2,
		Phases: []phaseResult{
			{Name: phaseSingle, Outcomes: 20000, Elapsed: 2 * time.Second, Rate: 10000, Commands: 3.14, Delivered: -1, BacklogPeak: -1},
			{Name: phaseBatch, Outcomes: 20000, Errors: 300, ErrorKinds: map[string]int{"HTTP 503 contended": 200, "transport: connection reset": 100},
				Elapsed: time.Second, Rate: 19700, Commands: -1, Delivered: -1, BacklogPeak: -1},
			{Name: phaseE2E, Outcomes: 20000, Delivered: 19990, Elapsed: 4 * time.Second, Rate: 4997.5, Commands: 2.5, BacklogPeak: 4800,
				Stalled: "nothing accepted or delivered for 30s"},
			{Name: phaseLatency, Outcomes: 5000, Delivered: 5000, Elapsed: 5 * time.Second, Rate: 1000, Commands: 40, BacklogPeak: -1,
				HasLatency: true, P50: 1500 * time.Microsecond, P99: 12 * time.Millisecond, Max: 30 * time.Millisecond, SendLag: time.Millisecond},
		},
	}
	var out bytes.Buffer
	if err := printBench(&out, res); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasPrefix(lines[0], "relay bench: in-process redis=redis streams=8 concurrency=64 n=20000 ") ||
		!strings.Contains(lines[0], "scheme=standard-webhooks max_in_flight=16") || !strings.Contains(lines[0], "GOMAXPROCS=2") {
		t.Errorf("settings line: %q", lines[0])
	}
	table := lines[1:6]
	for _, l := range table {
		if len(l) != len(table[0]) {
			t.Fatalf("table rows differ in width:\n%s", out.String())
		}
	}
	rows := benchTable(t, out.String())
	if got := rows[phaseSingle]; got["redis cmds/outcome"] != "3.1" || got["delivered"] != "-" || got["p50"] != "-" || got["rate/s"] != "10000" {
		t.Errorf("single row: %v", got)
	}
	if got := rows[phaseBatch]; got["errors"] != "300" || got["redis cmds/outcome"] != "-" {
		t.Errorf("batch row: %v", got)
	}
	if got := rows[phaseE2E]; got["delivered"] != "19990" || got["backlog peak"] != "4800" {
		t.Errorf("e2e row: %v", got)
	}
	if got := rows[phaseLatency]; got["p50"] != "1.50ms" || got["p99"] != "12.00ms" || got["max"] != "30.00ms" || got["send lag"] != "1.00ms" {
		t.Errorf("latency row: %v", got)
	}
	for _, want := range []string{
		"errors in batch: 200 × HTTP 503 contended; 100 × transport: connection reset\n",
		"e2e: 10 accepted outcomes not delivered: nothing accepted or delivered for 30s\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if res.failures() != 310 {
		t.Errorf("failures = %d, want 300 errors and 10 undelivered", res.failures())
	}
}
