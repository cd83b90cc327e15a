package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestBenchMedianTakesEachColumnAlone(t *testing.T) {
	t.Parallel()
	run := func(rate, cpu, redisCPU float64, p99 time.Duration, errs int) benchResult {
		return benchResult{Target: "in-process", Redis: "redis", Phases: []phaseResult{
			{Name: phaseSingle, Outcomes: 100, Errors: errs, ErrorKinds: map[string]int{"HTTP 503 contended": errs}, Delivered: -1, BacklogPeak: -1,
				Rate: rate, Commands: 3, SelfCPU: cpu, RelayCPU: -1, RedisCPU: redisCPU, Elapsed: time.Second},
			{Name: phaseLatency, Outcomes: 100, Delivered: 100, BacklogPeak: -1, Rate: rate, Commands: 30, SelfCPU: cpu, RelayCPU: -1, RedisCPU: 1,
				HasLatency: true, P50: time.Millisecond, P99: p99, Max: p99, SendLag: time.Millisecond, Elapsed: time.Second},
		}}
	}
	m := medianResult([]benchResult{
		// Medians that no mean equals.
		run(100, 90, 40, 30*time.Millisecond, 0),
		run(1000, 10, -1, 3*time.Millisecond, 5),
		run(200, 80, 50, 6*time.Millisecond, 1),
	})
	var out bytes.Buffer
	if err := printBench(&out, m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "; median of 3 runs") {
		t.Errorf("the settings line should say it is a median:\n%s", out.String())
	}
	rows := benchTable(t, out.String())
	if got := rows[phaseSingle]; got["rate/s"] != "200" || got["bench process cpu µs"] != "80.0" || got["errors"] != "1" ||
		got["redis cpu µs"] != "-" || got["relay cpu µs"] != "-" || got["delivered"] != "-" {
		t.Errorf("single row: %v", got)
	}
	if got := rows[phaseLatency]; got["p99"] != "6.00ms" || got["delivered"] != "100" || got["redis cpu µs"] != "1.0" {
		t.Errorf("latency row: %v", got)
	}
	if strings.Contains(out.String(), "errors in") {
		t.Errorf("the median table should leave the errors to the runs' own tables:\n%s", out.String())
	}
	if got := medianOf([]float64{4, 1, 3, 2}, func(v float64) float64 { return v }); got != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", got)
	}
}

func TestBenchRunsPrintsEachRunThenTheMedians(t *testing.T) {
	if _, err := parseBench([]string{"-runs", "0"}); err == nil {
		t.Error("-runs 0 accepted")
	}
	var out bytes.Buffer
	args := append([]string{"-redis", "", "-runs", "2", "-phases", "list"}, smallBench...)
	if err := Main(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), "relay bench: "); n != 3 {
		t.Fatalf("%d tables, want two runs' and the median's:\n%s", n, out.String())
	}
	last := out.String()[strings.LastIndex(out.String(), "relay bench: "):]
	if !strings.Contains(last, "median of 2 runs") || benchTable(t, last)[phaseList]["outcomes"] != "300" {
		t.Errorf("the last table should be the median of both runs:\n%s", last)
	}
}
