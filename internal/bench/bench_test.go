package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
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
	if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
		err = errors.New("not finite")
	}
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
			// With no fault every outcome arrives once.
			if row["duplicates"] != "0" {
				t.Errorf("%s: %s duplicate deliveries\n%s", phase, row["duplicates"], out)
			}
		}
	}
	want := map[string]string{phaseSingle: "300", phaseList: "300", phaseE2E: "300", phaseLatency: "100"}
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
	args := append([]string{"-redis", ""}, smallBench...)
	if err := Main(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
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
		// In-process relay's CPU cannot be told from the load's, so it
		// is never shown as relay's; the process's is.
		if rows[phase]["relay cpu µs"] != "-" {
			t.Errorf("%s: relay cpu %s in-process, where it holds the load generator's", phase, rows[phase]["relay cpu µs"])
		}
		if number(t, rows[phase], "bench process cpu µs") <= 0 {
			t.Errorf("%s: bench process cpu %s, want a positive number", phase, rows[phase]["bench process cpu µs"])
		}
		if rows[phase]["redis cpu µs"] != "-" {
			t.Errorf("%s: miniredis CPU should be unknown, got %s", phase, rows[phase]["redis cpu µs"])
		}
	}
	if !strings.Contains(out.String(), "bench process: relay, load generator and receiver together\n") {
		t.Errorf("the legend should say the process CPU holds relay and the load together:\n%s", out.String())
	}
}

// runAndPrint runs relay bench with args and returns its table and result,
// failing the test, table shown, when the run fails.
func runAndPrint(t *testing.T, args []string) (string, benchResult) {
	t.Helper()
	c, err := parseBench(args)
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
	return out.String(), res
}

func TestBenchCountsRedisCommandsAndLeavesNoKeyBehind(t *testing.T) {
	client := redistest.RealClient(t)
	out, res := runAndPrint(t, append([]string{"-redis", os.Getenv(redistest.EnvRedisURL)}, smallBench...))
	rows := checkEveryPhaseDelivered(t, out)
	for _, phase := range benchPhases {
		if rows[phase]["redis cmds/outcome"] == "-" || number(t, rows[phase], "redis cmds/outcome") <= 0 {
			t.Errorf("%s: Redis commands per outcome %q, want a positive number", phase, rows[phase]["redis cmds/outcome"])
		}
		if number(t, rows[phase], "redis cpu µs") <= 0 {
			t.Errorf("%s: Redis CPU per outcome %q, want a positive number", phase, rows[phase]["redis cpu µs"])
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
		Target: "in-process", Redis: "redis", Streams: 8, Concurrency: 64, N: 20000, PerRequest: 100, Payload: 256,
		Scheme: "standard-webhooks", MaxInFlight: 16, Window: 5000, Rate: 1000, LatencyN: 5000, GOMAXPROCS: 2,
		Phases: []phaseResult{
			{Name: phaseSingle, Outcomes: 20000, Elapsed: 2 * time.Second, Rate: 10000, Commands: 3.14, Delivered: -1, BacklogPeak: -1,
				SelfCPU: 183.26, RelayCPU: -1, RedisCPU: 48.04},
			{Name: phaseList, Outcomes: 20000, Errors: 300, ErrorKinds: map[string]int{"HTTP 503 contended": 200, "transport: connection reset": 100},
				Elapsed: time.Second, Rate: 19700, Commands: -1, Delivered: -1, BacklogPeak: -1, SelfCPU: -1, RelayCPU: -1, RedisCPU: -1},
			{Name: phaseE2E, Outcomes: 20000, Delivered: 19990, Duplicates: 16, Elapsed: 4 * time.Second, Rate: 4997.5, Commands: 2.5, BacklogPeak: 4800,
				SelfCPU: 0, RelayCPU: -1, RedisCPU: 1234.56, Stalled: "nothing accepted or delivered for 30s"},
			{Name: phaseLatency, Outcomes: 5000, Delivered: 5000, Elapsed: 5 * time.Second, Rate: 1000, Commands: 40, BacklogPeak: -1,
				SelfCPU: 900, RelayCPU: -1, RedisCPU: -1, HasLatency: true, P50: 1500 * time.Microsecond, P99: 12 * time.Millisecond, Max: 30 * time.Millisecond, SendLag: time.Millisecond},
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
		// Terminals and tabwriter count runes; "µs" is two bytes.
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(table[0]) {
			t.Fatalf("table rows differ in width:\n%s", out.String())
		}
	}
	rows := benchTable(t, out.String())
	if got := rows[phaseSingle]; got["bench process cpu µs"] != "183.3" || got["relay cpu µs"] != "-" || got["redis cpu µs"] != "48.0" {
		t.Errorf("single row's CPU: %v", got)
	}
	if got := rows[phaseList]; got["bench process cpu µs"] != "-" || got["relay cpu µs"] != "-" || got["redis cpu µs"] != "-" {
		t.Errorf("list row's unknown CPU: %v", got)
	}
	if got := rows[phaseE2E]; got["bench process cpu µs"] != "0.0" || got["redis cpu µs"] != "1234.6" {
		t.Errorf("e2e row's CPU: %v", got)
	}
	if got := rows[phaseLatency]; got["bench process cpu µs"] != "900.0" || got["redis cpu µs"] != "-" {
		t.Errorf("latency row's CPU: %v", got)
	}
	if got := rows[phaseSingle]; got["redis cmds/outcome"] != "3.1" || got["delivered"] != "-" || got["duplicates"] != "-" || got["p50"] != "-" || got["rate/s"] != "10000" {
		t.Errorf("single row: %v", got)
	}
	if got := rows[phaseList]; got["errors"] != "300" || got["redis cmds/outcome"] != "-" {
		t.Errorf("list row: %v", got)
	}
	if got := rows[phaseE2E]; got["delivered"] != "19990" || got["duplicates"] != "16" || got["backlog peak"] != "4800" {
		t.Errorf("e2e row: %v", got)
	}
	if got := rows[phaseLatency]; got["p50"] != "1.50ms" || got["p99"] != "12.00ms" || got["max"] != "30.00ms" || got["send lag"] != "1.00ms" {
		t.Errorf("latency row: %v", got)
	}
	for _, want := range []string{
		"errors in list: 200 × HTTP 503 contended; 100 × transport: connection reset\n",
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

func TestBenchReadAnswerFramesEveryKindOfAnswer(t *testing.T) {
	t.Parallel()
	// next follows every answer that leaves the connection usable: reading
	// it proves the answer before was read to its last byte and no further.
	const next = "HTTP/1.1 204 No Content\r\n\r\n"
	for _, tc := range []struct {
		name, answer string
		code         int
		body         string
		keep         bool
	}{
		{"content-length", "HTTP/1.1 202 Accepted\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", 202, "hello", true},
		{"chunked, with an extension and a trailer", "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n", 202, "hello", true},
		{"chunked wins over a content-length", "HTTP/1.1 202 Accepted\r\nContent-Length: 99\r\nTransfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 202, "hello", true},
		{"1xx before the answer", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\nok", 202, "ok", true},
		{"no body for 204", "HTTP/1.1 204 No Content\r\nContent-Length: 7\r\n\r\n", 204, "", true},
		{"bare line feeds, any case, no reason", "HTTP/1.1 503\ncontent-LENGTH:  2 \n\nno", 503, "no", true},
		{"repeated equal content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", 200, "ok", true},
		{"connection close", "HTTP/1.1 202 Accepted\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nok", 202, "ok", false},
		{"HTTP/1.0 closes by default", "HTTP/1.0 202 Accepted\r\nContent-Length: 2\r\n\r\nok", 202, "ok", false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 202 Accepted\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 202, "ok", true},
		{"body to the end of the connection", "HTTP/1.1 200 OK\r\n\r\nall of it", 200, "all of it", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			br := bufio.NewReader(strings.NewReader(tc.answer + next))
			if !tc.keep {
				br = bufio.NewReader(strings.NewReader(tc.answer))
			}
			code, body, keep, err := readAnswer(br, nil)
			if err != nil || code != tc.code || string(body) != tc.body || keep != tc.keep {
				t.Fatalf("readAnswer = %d %q keep=%v %v, want %d %q keep=%v", code, body, keep, err, tc.code, tc.body, tc.keep)
			}
			if !tc.keep {
				return
			}
			if code, body, keep, err := readAnswer(br, body[:0]); err != nil || code != 204 || len(body) != 0 || !keep {
				t.Fatalf("the answer after it: %d %q keep=%v %v", code, body, keep, err)
			}
		})
	}
}

func TestBenchReadAnswerRefusesWhatItCannotFrame(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, answer string
		want         error
	}{
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", errBadAnswer},
		{"HTTP/2 status line", "HTTP/2 202\r\n\r\n", errBadAnswer},
		{"letters in the status", "HTTP/1.1 2x2 Accepted\r\n\r\n", errBadAnswer},
		{"header without a colon", "HTTP/1.1 202 Accepted\r\nContent-Length 2\r\n\r\nok", errBadAnswer},
		{"folded header", "HTTP/1.1 202 Accepted\r\nX-A: b\r\n c\r\nContent-Length: 2\r\n\r\nok", errBadAnswer},
		{"conflicting content-lengths", "HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok", errBadAnswer},
		{"negative content-length", "HTTP/1.1 202 Accepted\r\nContent-Length: -2\r\n\r\nok", errBadAnswer},
		{"a coding besides chunked", "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", errBadAnswer},
		{"bad chunk size", "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", errBadAnswer},
		{"chunk longer than its size", "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n", errBadAnswer},
		{"short body", "HTTP/1.1 202 Accepted\r\nContent-Length: 10\r\n\r\nok", io.ErrUnexpectedEOF},
		{"chunks cut off", "HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", io.ErrUnexpectedEOF},
		{"headers cut off", "HTTP/1.1 202 Accepted\r\nContent-Len", io.ErrUnexpectedEOF},
		{"status line cut off", "HTTP/1.1 202 Acc", io.ErrUnexpectedEOF},
		{"nothing", "", io.EOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, keep, err := readAnswer(bufio.NewReader(strings.NewReader(tc.answer)), nil)
			if !errors.Is(err, tc.want) || keep {
				t.Fatalf("readAnswer = %d keep=%v %v, want %v and a connection not kept", code, keep, err, tc.want)
			}
		})
	}
	big := fmt.Sprintf("HTTP/1.1 202 Accepted\r\nContent-Length: %d\r\n\r\n", benchAnswerLimit+1)
	if _, _, _, err := readAnswer(bufio.NewReader(strings.NewReader(big)), nil); err == nil {
		t.Fatal("an answer longer than the limit was read")
	}
}

func TestBenchLoadTargetWritesTheRequestLineAndHeadersOfTheURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, addr, head string
		tls              bool
	}{
		{"http://127.0.0.1:8080", "127.0.0.1:8080", "POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n", false},
		{"http://relay.internal/prefix", "relay.internal:80", "POST /prefix/v1/x HTTP/1.1\r\nHost: relay.internal\r\n", false},
		{"https://[::1]", "[::1]:443", "POST /v1/x HTTP/1.1\r\nHost: [::1]\r\n", true},
	} {
		lt, err := newLoadTarget(tc.base, "t0k")
		if err != nil {
			t.Fatal(err)
		}
		req := string(appendRequest(nil, lt.head("/v1/x"), []byte(`{"a":1}`)))
		want := tc.head + "Authorization: Bearer t0k\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
		if lt.addr != tc.addr || (lt.tls != nil) != tc.tls || req != want {
			t.Errorf("%s: dials %s (tls %v) with\n%q\nwant %s (tls %v) with\n%q", tc.base, lt.addr, lt.tls != nil, req, tc.addr, tc.tls, want)
		}
	}
	if _, err := newLoadTarget("http://h", "a\r\nX-Evil: 1"); err == nil {
		t.Error("a token with a line break was taken")
	}
}

func TestBenchRequestsAreTheOutcomesEncodedWhole(t *testing.T) {
	t.Parallel()
	lt, err := newLoadTarget("http://127.0.0.1:8080", "t0k")
	if err != nil {
		t.Fatal(err)
	}
	b := &bencher{load: lt, run: "r1", now: 1_700_000_000_000, detail: `a "quoted" detail`}
	outcome := func(i int) schema.Outcome {
		return schema.Outcome{
			ReservationID: b.rid("single", i), Repository: "bench/relay", OccurredUnixMs: b.now,
			Aborted: &schema.Aborted{Reason: "bench", Detail: b.detail},
		}
	}
	for _, per := range []int{1, 3} {
		pr := b.requests("single", []string{"n0", "n1"}, 7, per)
		var wire, scratch []byte
		seen := 0
		for i, rq := range pr.reqs {
			wire, scratch = pr.wire(wire, scratch, i)
			var want any = outcome(rq.first)
			if per > 1 {
				list := make([]schema.Outcome, rq.n)
				for k := range list {
					list[k] = outcome(rq.first + k)
				}
				want = map[string]any{"outcomes": list}
			}
			body, err := json.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(wire), string(appendRequest(nil, lt.head("/v1/namespaces/n"+strconv.Itoa(i%2)+"/outcomes"), body)); got != want {
				t.Fatalf("per %d, request %d:\n%q\nwant\n%q", per, i, got, want)
			}
			seen += rq.n
		}
		if seen != 7 || pr.outcomes() != 7 {
			t.Errorf("per %d: the requests carry %d outcomes (%d counted), want 7", per, seen, pr.outcomes())
		}
	}
}

// loadServer answers by path: /length with a Content-Length, /chunked in
// chunks, /close with Connection: close. It notes each request's client
// address and headers.
type loadServer struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []*http.Request
}

func newLoadServer(t *testing.T, tlsToo bool) *loadServer {
	ls := &loadServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ls.mu.Lock()
		ls.got = append(ls.got, r)
		ls.mu.Unlock()
		switch r.URL.Path {
		case "/chunked":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte("first half, "))
			w.(http.Flusher).Flush()
			_, _ = w.Write(body)
		case "/close":
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(body)
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write(body)
		}
	})
	if tlsToo {
		ls.srv = httptest.NewTLSServer(h)
	} else {
		ls.srv = httptest.NewServer(h)
	}
	t.Cleanup(ls.srv.Close)
	return ls
}

func (ls *loadServer) requests() []*http.Request {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return slices.Clone(ls.got)
}

func TestBenchLoadConnKeepsItsConnectionUntilTheServerClosesIt(t *testing.T) {
	t.Parallel()
	for _, overTLS := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", overTLS), func(t *testing.T) {
			t.Parallel()
			ls := newLoadServer(t, overTLS)
			lt, err := newLoadTarget(ls.srv.URL, "t0k")
			if err != nil {
				t.Fatal(err)
			}
			if overTLS {
				lt.tls.RootCAs = ls.srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
			}
			c := lt.conn()
			defer c.close()
			for _, step := range []struct{ path, want string }{
				{"/length", "one"},
				{"/chunked", "first half, two"},
				{"/close", "three"},
				{"/length", "four"},
			} {
				body := strings.TrimPrefix(step.want, "first half, ")
				code, answer, err := c.do(context.Background(), appendRequest(nil, lt.head(step.path), []byte(body)))
				if err != nil || code != http.StatusAccepted || string(answer) != step.want {
					t.Fatalf("%s: %d %q %v, want 202 %q", step.path, code, answer, err, step.want)
				}
			}
			c.idle = 0 // the next request finds the connection rested too long
			if _, _, err := c.do(context.Background(), appendRequest(nil, lt.head("/length"), []byte("five"))); err != nil {
				t.Fatal(err)
			}
			got := ls.requests()
			var addrs []string
			for _, r := range got {
				addrs = append(addrs, r.RemoteAddr)
				if r.Header.Get("Authorization") != "Bearer t0k" || r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
					t.Errorf("%s %s arrived with headers %v", r.Method, r.URL, r.Header)
				}
			}
			// One connection for the first three, whose last answer closed
			// it; a new one for the fourth; another after the rest.
			if len(addrs) != 5 || addrs[0] != addrs[1] || addrs[1] != addrs[2] || addrs[3] == addrs[2] || addrs[4] == addrs[3] {
				t.Errorf("client addresses %v: want the first three alike, then two new ones", addrs)
			}
		})
	}
}

// silentServer reads requests and never answers; got has a value for each
// connection once it has sent something.
func silentServer(t *testing.T) (addr string, got <-chan struct{}) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan struct{}, 16)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			go func() {
				buf := make([]byte, 4096)
				if _, err := nc.Read(buf); err == nil {
					ch <- struct{}{}
				}
				_, _ = io.Copy(io.Discard, nc)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), ch
}

func TestBenchLoadConnGivesUpOnAnAnswerThatDoesNotCome(t *testing.T) {
	t.Parallel()
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		url, _ := silentServer(t)
		lt, err := newLoadTarget(url, "t0k")
		if err != nil {
			t.Fatal(err)
		}
		c := lt.conn()
		c.timeout = 50 * time.Millisecond
		if _, _, err := c.do(context.Background(), appendRequest(nil, lt.head("/"), nil)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("do = %v, want a deadline exceeded", err)
		}
		if c.nc != nil {
			t.Error("the connection that timed out stayed open")
		}
	})
	t.Run("context", func(t *testing.T) {
		t.Parallel()
		url, got := silentServer(t)
		lt, err := newLoadTarget(url, "t0k")
		if err != nil {
			t.Fatal(err)
		}
		c := lt.conn() // its own deadline is far beyond the wait below
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, _, err := c.do(ctx, appendRequest(nil, lt.head("/"), nil)); done <- err }()
		<-got
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("do = %v, want the context's error", err)
			}
		case <-time.After(benchRequestTimeout / 3):
			t.Fatal("do went on waiting for its answer after its context ended")
		}
		if c.nc != nil {
			t.Error("the connection of the canceled request stayed open")
		}
	})
}

func TestBenchPostCountsEveryOutcomeThatWasNotAccepted(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/contended":
			httpapi.WriteProblem(w, r, httpapi.NewProblem(httpapi.SlugContended, ""))
		case "/duplicate":
			httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"results": []map[string]string{
				{"status": "accepted"}, {"status": "duplicate"}, {"status": "conflict"}}})
		case "/garbled":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte("{"))
		default:
			httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"results": []map[string]string{
				{"status": "accepted"}, {"status": "accepted"}, {"status": "accepted"}}})
		}
	}))
	defer srv.Close()
	// gone takes connections and closes them at once.
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	go func() {
		for {
			nc, err := gone.Accept()
			if err != nil {
				return
			}
			nc.Close()
		}
	}()

	var b bencher
	var errs errorCounts
	send := func(base, path string) int {
		t.Helper()
		lt, err := newLoadTarget(base, "t0k")
		if err != nil {
			t.Fatal(err)
		}
		c := lt.conn()
		defer c.close()
		return b.post(context.Background(), c, appendRequest(nil, lt.head(path), []byte("{}")), 3, &errs)
	}
	for path, want := range map[string]int{"/ok": 3, "/contended": 0, "/duplicate": 1, "/garbled": 0} {
		if got := send(srv.URL, path); got != want {
			t.Errorf("%s: %d accepted, want %d", path, got, want)
		}
	}
	if got := send("http://"+gone.Addr().String(), "/ok"); got != 0 {
		t.Errorf("a closed connection: %d accepted", got)
	}
	transport := 0
	for k, n := range errs.kinds {
		if strings.HasPrefix(k, "transport: ") {
			transport += n
		}
	}
	want := map[string]int{"HTTP 503 contended": 3, "202 with status duplicate": 1, "202 with status conflict": 1, "202 with an unreadable answer": 3}
	for k, n := range want {
		if errs.kinds[k] != n {
			t.Errorf("%d × %q, want %d; all: %v", errs.kinds[k], k, n, errs.kinds)
		}
	}
	if transport != 3 || errs.n != 11 {
		t.Errorf("%d transport errors of %d in all, want 3 of 11: %v", transport, errs.n, errs.kinds)
	}
}

func TestBenchReceiverCountsEveryArrivalAfterTheFirst(t *testing.T) {
	t.Parallel()
	rc, err := startBenchReceiver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.close)
	post := func(rid string) {
		t.Helper()
		body := `{"type":"outcome.expired","data":{"reservation_id":"` + rid + `"}}`
		resp, err := http.Post(rc.url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, rid := range []string{"run-e2e-1", "run-e2e-2", "run-e2e-1", "run-e2e-1", "run-latency-1", "run-e2e-2"} {
		post(rid)
	}
	if got := rc.duplicates("run-e2e-"); got != 3 {
		t.Errorf("duplicates of run-e2e- = %d, want 3", got)
	}
	if got := rc.duplicates("run-latency-"); got != 0 {
		t.Errorf("duplicates of run-latency- = %d, want 0", got)
	}
}

// -memprofile writes the run's allocations, every one of them, and leaves
// the process's sampling as it found it.
func TestBenchMemprofileWritesTheRunsAllocations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allocs.pprof")
	prev := runtime.MemProfileRate
	var out bytes.Buffer
	args := []string{"-redis", "", "-phases", "single", "-n", "50", "-memprofile", path}
	if err := Main(context.Background(), args, slog.New(slog.NewTextHandler(io.Discard, nil)), &out); err != nil {
		t.Fatalf("bench: %v\n%s", err, out.String())
	}
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile: %d bytes, %v; want a gzipped profile", len(b), err)
	}
	if runtime.MemProfileRate != prev {
		t.Errorf("sampling left at %d, was %d", runtime.MemProfileRate, prev)
	}
}
