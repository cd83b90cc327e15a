package bench

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

// fanoutTable reads the table of a run with -endpoints: each row by phase
// and endpoint count ("e2e/2"), by column name; a refused row holds its
// text under "refused".
func fanoutTable(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	rows := map[string]map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		cells := strings.Fields(line)
		if len(cells) < 3 || !slices.Contains(fanoutPhases, cells[0]) {
			continue
		}
		if _, err := strconv.Atoi(cells[1]); err != nil {
			continue // a line under the table
		}
		key := cells[0] + "/" + cells[1]
		if cells[2] == "refused:" {
			rows[key] = map[string]string{"refused": strings.Join(cells[2:], " ")}
			continue
		}
		if len(cells) != len(fanoutColumns) {
			t.Fatalf("row %q has %d cells, want %d", line, len(cells), len(fanoutColumns))
		}
		row := map[string]string{}
		for i, c := range fanoutColumns {
			row[c] = cells[i]
		}
		rows[key] = row
	}
	return rows
}

// checkFanout asserts what the fan-out table promises: a row for every
// phase and count, every outcome accepted, every webhook (outcomes times
// endpoints) delivered once, positive rates, and a refusal for each count
// in refused.
func checkFanout(t *testing.T, out string, counts []int, n int, refused map[int]string) map[string]map[string]string {
	t.Helper()
	rows := fanoutTable(t, out)
	for _, phase := range fanoutPhases {
		for _, e := range counts {
			key := phase + "/" + strconv.Itoa(e)
			row, ok := rows[key]
			if !ok {
				t.Fatalf("no %s row in\n%s", key, out)
			}
			if want, ok := refused[e]; ok {
				if row["refused"] != want {
					t.Errorf("%s: %v, want %q\n%s", key, row, want, out)
				}
				continue
			}
			if row["refused"] != "" {
				t.Fatalf("%s: %s\n%s", key, row["refused"], out)
			}
			if row["errors"] != "0" || row["outcomes"] != strconv.Itoa(n) {
				t.Errorf("%s: %s outcomes with %s errors, want %d and none\n%s", key, row["outcomes"], row["errors"], n, out)
			}
			if number(t, row, "outcomes/s") <= 0 {
				t.Errorf("%s: outcomes/s %s is not positive", key, row["outcomes/s"])
			}
			if phase != phaseE2E {
				if row["webhooks"] != "-" || row["webhooks/s"] != "-" {
					t.Errorf("%s: an ingest phase delivered: %v", key, row)
				}
				continue
			}
			if row["webhooks"] != strconv.Itoa(n*e) || row["duplicates"] != "0" {
				t.Errorf("%s: %s webhooks with %s duplicates, want %d × %d and none\n%s", key, row["webhooks"], row["duplicates"], n, e, out)
			}
			// Every outcome's webhooks arrived, so the webhook rate is the
			// outcome rate times the endpoints, as both are printed.
			got, want := number(t, row, "webhooks/s"), number(t, row, "outcomes/s")*float64(e)
			if got <= 0 || got < want-float64(e) || got > want+float64(e) {
				t.Errorf("%s: %s webhooks/s, want %s outcomes/s × %d", key, row["webhooks/s"], row["outcomes/s"], e)
			}
		}
	}
	return rows
}

// Past the hard limit relay refuses the endpoints, and the row says so;
// up to it the bench raises the limit it builds relay with: 9 endpoints is
// more than relay's default.
func TestBenchFanoutRunsEachCountAndSaysWhichRelayRefused(t *testing.T) {
	if outbox.DefaultMaxEndpoints >= 9 || outbox.HardMaxEndpoints != 10 {
		t.Fatalf("limits %d and %d: pick counts between and past them", outbox.DefaultMaxEndpoints, outbox.HardMaxEndpoints)
	}
	var out bytes.Buffer
	args := []string{"-redis", "", "-endpoints", "1,2,9,11", "-n", "200", "-streams", "2", "-concurrency", "8"}
	if err := Main(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	rows := checkFanout(t, out.String(), []int{1, 2, 9, 11}, 200, map[int]string{11: "refused: limit 10"})
	for key, row := range rows {
		if row["refused"] == "" && (row["redis cmds/outcome"] != "-" || row["redis bytes/outcome"] != "-") {
			t.Errorf("%s: miniredis commands and bytes should be unknown: %v", key, row)
		}
	}
	if !strings.Contains(out.String(), " endpoints=1,2,9,11;") {
		t.Errorf("the settings line should name the counts:\n%s", out.String())
	}
	// The rows are aligned whatever the refused ones say.
	var widths []int
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "phase" || len(f) == len(fanoutColumns)) {
			widths = append(widths, utf8.RuneCountInString(line))
		}
	}
	if len(widths) != 1+3*3 || slices.Min(widths) != slices.Max(widths) {
		t.Errorf("rows of widths %v, want 10 alike:\n%s", widths, out.String())
	}
}

func TestBenchFanoutCountsRedisCommandsAndBytesAndLeavesNoKeyBehind(t *testing.T) {
	client := redistest.RealClient(t)
	out, res := runAndPrint(t, []string{"-redis", os.Getenv(redistest.EnvRedisURL), "-endpoints", "1,2,11", "-n", "200", "-streams", "2", "-concurrency", "8"})
	rows := checkFanout(t, out, []int{1, 2, 11}, 200, map[int]string{11: "refused: limit 10"})
	for _, phase := range fanoutPhases {
		for _, e := range []string{"1", "2"} {
			row := rows[phase+"/"+e]
			if row["redis cmds/outcome"] == "-" || number(t, row, "redis cmds/outcome") <= 0 {
				t.Errorf("%s/%s: Redis commands per outcome %q, want a positive number", phase, e, row["redis cmds/outcome"])
			}
			// Memory is read before streams deliver: ingest only.
			if phase == phaseE2E {
				if row["redis bytes/outcome"] != "-" {
					t.Errorf("%s/%s: bytes %q measured while streams deliver", phase, e, row["redis bytes/outcome"])
				}
			} else if row["redis bytes/outcome"] == "-" || number(t, row, "redis bytes/outcome") <= 0 {
				t.Errorf("%s/%s: Redis bytes per outcome %q, want a positive number", phase, e, row["redis bytes/outcome"])
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !strings.HasPrefix(res.Prefix, "relaybench:") {
		t.Fatalf("bench prefix %q", res.Prefix)
	}
	keys, _, err := client.Scan(ctx, 0, res.Prefix+"*", 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("%d keys left under %q, e.g. %q", len(keys), res.Prefix, keys[0])
	}
}

// MEMORY USAGE summed over a prefix counts that prefix's keys, every one,
// and no other's.
func TestBenchKeyBytesSumsTheKeysUnderThePrefix(t *testing.T) {
	client := redistest.RealClient(t)
	ctx := t.Context()
	prefix := "relaybench:" + randomHex(6) + ":"
	other := prefix[:len(prefix)-1] + "-other:0"
	t.Cleanup(func() {
		iter := client.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
		for iter.Next(context.Background()) {
			client.Del(context.Background(), iter.Val())
		}
		client.Del(context.Background(), other)
	})
	empty, err := redisKeyBytes(ctx, client, prefix)
	if err != nil || empty != 0 {
		t.Fatalf("no keys: %d bytes, %v", empty, err)
	}
	big := strings.Repeat("x", 10_000)
	// More keys than a pipeline of MEMORY USAGE takes.
	for i := range 600 {
		if err := client.Set(ctx, prefix+strconv.Itoa(i), big, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Set(ctx, other, big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := redisKeyBytes(ctx, client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if got < 600*10_000 || got > 600*12_000 {
		t.Errorf("600 keys of 10,000 bytes take %d bytes by MEMORY USAGE, want a little over 6,000,000", got)
	}
}

func TestBenchEndpointsFlag(t *testing.T) {
	c, err := parseBench([]string{"-endpoints", "1, 8,100,1000"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.endpoints, []int{1, 8, 100, 1000}) || !slices.Equal(c.phases, fanoutPhases) {
		t.Errorf("endpoints %v, phases %v: want 1,8,100,1000 over %v", c.endpoints, c.phases, fanoutPhases)
	}
	// Ingest before e2e whatever the order given: the driver starts with e2e.
	if c, err := parseBench([]string{"-endpoints", "2", "-phases", "e2e,single"}); err != nil || !slices.Equal(c.phases, []string{phaseSingle, phaseE2E}) {
		t.Errorf("-phases e2e,single: %v %v", c.phases, err)
	}
	if c, err := parseBench(nil); err != nil || c.endpoints != nil || !slices.Equal(c.phases, benchPhases) {
		t.Errorf("no -endpoints: %v %v %v", c.endpoints, c.phases, err)
	}
	for _, bad := range [][]string{
		{"-endpoints", "0"},
		{"-endpoints", "1,,2"},
		{"-endpoints", "2,2"},
		{"-endpoints", "x"},
		{"-endpoints", "100001"},
		{"-endpoints", "1", "-phases", "single,latency"},
	} {
		if _, err := parseBench(bad); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// A webhook is an outcome at an endpoint: the same reservation id at two
// paths is two, each counted once, and the tracker of a phase whose
// outcomes go to two endpoints is done when both arrived.
func TestBenchReceiverCountsEachEndpointsWebhook(t *testing.T) {
	t.Parallel()
	rc, err := startBenchReceiver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.close)
	tr := newDeliveryTracker("run-e2e-e2-", 0, 0, 2)
	rc.track(tr)
	if !tr.reserve(t.Context(), 1) {
		t.Fatal("no room")
	}
	tr.answered(1, 0)
	tr.sendsDone()
	post := func(path, rid string) {
		t.Helper()
		body := `{"type":"outcome.expired","data":{"reservation_id":"` + rid + `"}}`
		resp, err := http.Post(rc.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	post("/ns/bench-0", "run-e2e-e2-0")
	post("/ns/bench-0", "run-e2e-e2-0")
	select {
	case <-tr.done:
		t.Fatal("done with one endpoint's webhook of two")
	default:
	}
	post("/ns/bench-1", "run-e2e-e2-0")
	// The receiver told the tracker before it answered.
	select {
	case <-tr.done:
	default:
		t.Fatalf("not done with both endpoints' webhooks: %+v", tr.counts())
	}
	if got := tr.counts(); got.accepted != 2 || got.delivered != 2 {
		t.Errorf("tracker counts %+v, want 2 webhooks accepted and delivered", got)
	}
	if got := rc.duplicates("run-e2e-e2-"); got != 1 {
		t.Errorf("duplicates = %d, want 1", got)
	}
}

func TestBenchFanoutTableSaysWhatWasRefused(t *testing.T) {
	t.Parallel()
	res := benchResult{
		Target: "in-process", Redis: "redis", Prefix: "relaybench:x:", Streams: 8, Concurrency: 64, N: 2000, PerRequest: 100,
		Payload: 256, Scheme: "standard-webhooks", MaxInFlight: 16, Window: 5000, GOMAXPROCS: 2, Endpoints: []int{1, 100},
		Phases: []phaseResult{
			{Name: phaseSingle, Endpoints: 1, Outcomes: 2000, Elapsed: time.Second, Rate: 2000, Commands: 1.24, Bytes: 581.25,
				Delivered: -1, WebhookRate: -1, BacklogPeak: -1, SelfCPU: 100, RelayCPU: -1, RedisCPU: 25},
			{Name: phaseSingle, Endpoints: 100, Refused: "refused: limit 10", Delivered: -1, WebhookRate: -1, BacklogPeak: -1,
				Commands: -1, Bytes: -1, SelfCPU: -1, RelayCPU: -1, RedisCPU: -1},
			{Name: phaseE2E, Endpoints: 1, Outcomes: 2000, Errors: 2, Delivered: 1990, Elapsed: 2 * time.Second, Rate: 995, WebhookRate: 995,
				Commands: 0.6, Bytes: -1, BacklogPeak: 700, SelfCPU: 130, RelayCPU: -1, RedisCPU: 30, Stalled: "nothing accepted or delivered for 30s"},
		},
	}
	var out bytes.Buffer
	if err := printBench(&out, res); err != nil {
		t.Fatal(err)
	}
	rows := fanoutTable(t, out.String())
	if got := rows["single/1"]; got["redis cmds/outcome"] != "1.24" || got["redis bytes/outcome"] != "581.2" || got["webhooks"] != "-" || got["outcomes/s"] != "2000" {
		t.Errorf("single/1: %v", got)
	}
	if got := rows["single/100"]; got["refused"] != "refused: limit 10" {
		t.Errorf("single/100: %v", got)
	}
	if got := rows["e2e/1"]; got["webhooks"] != "1990" || got["redis bytes/outcome"] != "-" || got["backlog peak"] != "700" {
		t.Errorf("e2e/1: %v", got)
	}
	for _, want := range []string{
		"errors in e2e at 1 endpoints: ",
		"e2e at 1 endpoints: 8 webhooks of accepted outcomes not delivered: nothing accepted or delivered for 30s\n",
		"redis bytes/outcome: growth over the phase of MEMORY USAGE summed over the run's keys",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// 2 errors and 8 webhooks of accepted outcomes missing.
	if res.failures() != 10 {
		t.Errorf("failures = %d, want 10", res.failures())
	}
	// The medians' table keeps each row's count, refusal and legend.
	out.Reset()
	if err := printBench(&out, medianResult([]benchResult{res, res, res})); err != nil {
		t.Fatal(err)
	}
	rows = fanoutTable(t, out.String())
	if rows["single/100"]["refused"] != "refused: limit 10" || rows["single/1"]["redis bytes/outcome"] != "581.2" || rows["e2e/1"]["webhooks/s"] != "995" {
		t.Errorf("medians: %v", rows)
	}
	if !strings.Contains(out.String(), "median of 3 runs") || !strings.Contains(out.String(), "redis bytes/outcome: growth over the phase") {
		t.Errorf("medians' table:\n%s", out.String())
	}
}
