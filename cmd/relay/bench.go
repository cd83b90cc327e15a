package main

// relay bench drives load through relay's public API and prints one table.
//
// By default it builds a relay in this process, exactly as serve does, on a
// free loopback port; with -target it drives a running relay instead. Either
// way a loopback receiver takes the webhooks. The receiver does not verify
// signatures: the e2e tests verify both schemes, and here verification would
// take CPU from the relay under test on the same machine. In-process, relay
// logs warnings and errors only: its access log would bury the table.
//
// Phases, each on namespaces of its own with one endpoint each:
//
//	single   outcomes POSTed one per request, endpoints disabled so that
//	         nothing is delivered: ingest alone. Rate: accepted per second.
//	batch    the same in batches of -batch.
//	e2e      batches while fewer than -window outcomes are accepted and not
//	         yet delivered. Rate: -n over the time until the last of them
//	         first reached the receiver.
//	latency  single POSTs on an open-loop schedule of -rate per second;
//	         p50/p99/max of the time from the 202 to the webhook's first
//	         arrival. Rate: accepted per second of sending; send lag is the
//	         most any send left behind its schedule.
//
// The phases POST through a lean HTTP/1.1 client (loadConn), -concurrency
// keep-alive connections, so that the load takes little of the CPU relay
// is measured on.
//
// Redis commands per outcome are the growth of INFO commandstats (scripts'
// own calls included) over the phase, divided by the outcomes accepted: they
// count every client of that Redis, so run on a quiet one.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
)

// Phase names, in their default order.
const (
	phaseSingle  = "single"
	phaseBatch   = "batch"
	phaseE2E     = "e2e"
	phaseLatency = "latency"
)

var benchPhases = []string{phaseSingle, phaseBatch, phaseE2E, phaseLatency}

const (
	// benchStall ends a phase that neither accepts nor delivers anything
	// for this long; what is missing is reported.
	benchStall = 30 * time.Second
	// benchRequestTimeout bounds one API call.
	benchRequestTimeout = 30 * time.Second
	// benchEndpoint is the id of each namespace's one endpoint.
	benchEndpoint = "bench"
)

// benchConfig is what relay bench is run with.
type benchConfig struct {
	target      string
	token       string
	redis       string
	n           int
	concurrency int
	batch       int
	payload     int
	streams     int
	maxInFlight int
	scheme      string
	rate        int
	latencyN    int
	window      int
	phases      []string
	cpuprofile  string
}

func parseBench(args []string) (benchConfig, error) {
	fs := flag.NewFlagSet("relay bench", flag.ContinueOnError)
	var c benchConfig
	fs.StringVar(&c.target, "target", "", "URL of a running relay to drive; empty builds one in this process")
	fs.StringVar(&c.token, "token", "", "admin-scope API token for -target")
	redisFlag(fs, &c.redis,
		"Redis URL or Cluster seeds, as serve takes them; empty runs an embedded miniredis. With -target, only read for command counts (env RELAY_REDIS_URL)")
	fs.IntVar(&c.n, "n", 20000, "outcomes per phase (single, batch, e2e)")
	fs.IntVar(&c.concurrency, "concurrency", 64, "requests in flight at once")
	fs.IntVar(&c.batch, "batch", 100, "outcomes per batch, 1 to 100")
	fs.IntVar(&c.payload, "payload", 256, "bytes of each outcome's aborted.detail, at most 512")
	fs.IntVar(&c.streams, "streams", 8, "namespaces per phase, one endpoint each")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 16, "each endpoint's max_in_flight, 1 to 16")
	fs.StringVar(&c.scheme, "scheme", string(outbox.SchemeStandardWebhooks), "signing scheme of the endpoints: standard-webhooks or mkit-hook-v2")
	fs.IntVar(&c.rate, "rate", 1000, "outcomes per second the latency phase sends")
	fs.IntVar(&c.latencyN, "latency-n", 5000, "outcomes of the latency phase")
	fs.IntVar(&c.window, "window", 5000, "most outcomes accepted and not yet delivered in the e2e phase")
	phases := fs.String("phases", strings.Join(benchPhases, ","), "phases to run, comma-separated")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run (relay included when in-process) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := noArgs(fs, args); err != nil {
		return c, err
	}
	for p := range strings.SplitSeq(*phases, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(benchPhases, p) {
			return c, fmt.Errorf("unknown phase %q (known: %s)", p, strings.Join(benchPhases, ", "))
		}
		if slices.Contains(c.phases, p) {
			return c, fmt.Errorf("phase %q given twice", p)
		}
		c.phases = append(c.phases, p)
	}
	c.target = strings.TrimSuffix(c.target, "/")
	switch {
	case c.target == "" && c.token != "":
		return c, errors.New("-token goes with -target; in-process runs mint their own")
	case c.target != "" && c.token == "":
		return c, errors.New("-target needs -token, an admin-scope token of that relay")
	case c.n < 1 || c.latencyN < 1 || c.rate < 1 || c.concurrency < 1 || c.streams < 1:
		return c, errors.New("-n, -latency-n, -rate, -concurrency and -streams must be at least 1")
	case c.batch < 1 || c.batch > outbox.MaxAppendOutcomes:
		return c, fmt.Errorf("-batch must be 1 to %d", outbox.MaxAppendOutcomes)
	case c.payload < 0 || c.payload > outbox.MaxDetailBytes:
		return c, fmt.Errorf("-payload must be 0 to %d", outbox.MaxDetailBytes)
	case c.maxInFlight < outbox.MinMaxInFlight || c.maxInFlight > outbox.MaxMaxInFlight:
		return c, fmt.Errorf("-max-in-flight must be %d to %d", outbox.MinMaxInFlight, outbox.MaxMaxInFlight)
	case c.scheme != string(outbox.SchemeStandardWebhooks) && c.scheme != string(outbox.SchemeMkitHookV2):
		return c, fmt.Errorf("-scheme must be %s or %s", outbox.SchemeStandardWebhooks, outbox.SchemeMkitHookV2)
	case c.window < c.batch:
		return c, errors.New("-window must hold at least one batch")
	}
	if c.target != "" {
		if u, err := url.Parse(c.target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("-target %q must be an http(s) URL", c.target)
		}
	}
	return c, nil
}

// bench runs the phases, prints the table, and fails when any outcome
// failed or was not delivered.
func bench(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	c, err := parseBench(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var res benchResult
	labeled(ctx, "load", func(ctx context.Context) { res, err = runBench(ctx, c, log) })
	if len(res.Phases) > 0 || err == nil {
		if perr := printBench(stdout, res); perr != nil {
			return errors.Join(err, perr)
		}
	}
	if err != nil {
		return err
	}
	if n := res.failures(); n > 0 {
		return fmt.Errorf("bench: %d outcomes failed or were not delivered", n)
	}
	return nil
}

// benchResult is everything the table shows.
type benchResult struct {
	Target string // "in-process", or the URL driven
	Redis  string // embedded, redis, cluster, or unknown
	// Prefix is the in-process relay's key prefix, deleted at the end.
	Prefix              string
	Streams             int
	Concurrency         int
	N                   int
	Batch               int
	Payload             int
	Scheme              string
	MaxInFlight         int
	Window              int
	Rate                int
	LatencyN            int
	GOMAXPROCS          int
	DeliveryConcurrency int // 0 when unknown (-target)
	// BadWebhooks counts requests the receiver could find no reservation
	// id in.
	BadWebhooks int64
	Phases      []phaseResult
}

// phaseResult is one row.
type phaseResult struct {
	Name     string
	Outcomes int
	Errors   int
	// ErrorKinds counts the failed outcomes by cause.
	ErrorKinds map[string]int
	// Delivered counts outcomes that reached the receiver; -1 for a phase
	// that delivers nothing.
	Delivered int
	// Duplicates counts arrivals of the phase's outcomes after their
	// first, until the run ended, so a late one is counted too.
	Duplicates int
	Elapsed    time.Duration
	Rate       float64
	// Commands is Redis commands per accepted outcome; negative when
	// unknown.
	Commands float64
	// BacklogPeak is the most outcomes accepted and not yet delivered;
	// -1 when not tracked.
	BacklogPeak int
	HasLatency  bool
	P50         time.Duration
	P99         time.Duration
	Max         time.Duration
	SendLag     time.Duration
	// Stalled says why waiting for deliveries ended early; empty when every
	// accepted outcome arrived.
	Stalled string
}

// failures counts the outcomes that failed or did not arrive.
func (r benchResult) failures() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Errors
		if p.Delivered >= 0 && p.Delivered < p.Outcomes-p.Errors {
			n += p.Outcomes - p.Errors - p.Delivered
		}
	}
	return n
}

// benchColumns head the table; no cell below them holds a space.
var benchColumns = []string{"phase", "outcomes", "errors", "delivered", "duplicates", "seconds", "rate/s",
	"redis cmds/outcome", "backlog peak", "p50", "p99", "max", "send lag"}

// printBench writes the settings line, the table, and one line per phase
// that had errors.
func printBench(w io.Writer, r benchResult) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "relay bench: %s redis=%s streams=%d concurrency=%d n=%d batch=%d payload=%dB scheme=%s max_in_flight=%d window=%d rate=%d/s latency_n=%d GOMAXPROCS=%d",
		r.Target, r.Redis, r.Streams, r.Concurrency, r.N, r.Batch, r.Payload, r.Scheme, r.MaxInFlight, r.Window, r.Rate, r.LatencyN, r.GOMAXPROCS)
	if r.DeliveryConcurrency > 0 {
		fmt.Fprintf(&b, " delivery_concurrency=%d", r.DeliveryConcurrency)
	}
	b.WriteString("; the receiver does not verify signatures\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, strings.Join(benchColumns, "\t")+"\t\n")
	for _, p := range r.Phases {
		delivered, dups, peak, cmds := "-", "-", "-", "-"
		if p.Delivered >= 0 {
			delivered, dups = strconv.Itoa(p.Delivered), strconv.Itoa(p.Duplicates)
		}
		if p.BacklogPeak >= 0 {
			peak = strconv.Itoa(p.BacklogPeak)
		}
		if p.Commands >= 0 {
			cmds = fmt.Sprintf("%.1f", p.Commands)
		}
		p50, p99, maxLat, lag := "-", "-", "-", "-"
		if p.HasLatency {
			p50, p99, maxLat, lag = millis(p.P50), millis(p.P99), millis(p.Max), millis(p.SendLag)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Name, p.Outcomes, p.Errors, delivered, dups, p.Elapsed.Seconds(), p.Rate, cmds, peak, p50, p99, maxLat, lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Phases {
		if p.Errors > 0 {
			kinds := make([]string, 0, len(p.ErrorKinds))
			for k := range p.ErrorKinds {
				kinds = append(kinds, k)
			}
			slices.SortFunc(kinds, func(a, b string) int {
				if c := p.ErrorKinds[b] - p.ErrorKinds[a]; c != 0 {
					return c
				}
				return strings.Compare(a, b)
			})
			parts := make([]string, len(kinds))
			for i, k := range kinds {
				parts[i] = fmt.Sprintf("%d × %s", p.ErrorKinds[k], k)
			}
			fmt.Fprintf(&b, "errors in %s: %s\n", p.Name, strings.Join(parts, "; "))
		}
		if p.Stalled != "" {
			fmt.Fprintf(&b, "%s: %d accepted outcomes not delivered: %s\n", p.Name, p.Outcomes-p.Errors-p.Delivered, p.Stalled)
		}
	}
	if r.BadWebhooks > 0 {
		fmt.Fprintf(&b, "the receiver got %d webhooks without a data.reservation_id\n", r.BadWebhooks)
	}
	_, err := w.Write(b.Bytes())
	return err
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}

// bencher drives one run.
type bencher struct {
	cfg   benchConfig
	base  string
	token string
	// http makes the setup calls; the load phases' POSTs go over conns.
	http *http.Client
	// load is where the load phases send; set once base and token are.
	load  *loadTarget
	conns []*loadConn
	recv  *benchReceiver
	// counter reads INFO commandstats; nil when commands are unknown.
	counter redis.UniversalClient
	// startDelivery starts the in-process relay's driver; nil with -target,
	// whose driver runs anyway.
	startDelivery func(context.Context) error
	// run makes this run's reservation ids its own.
	run    string
	detail string
	now    int64
	// namespaces registered, for -target's cleanup.
	namespaces []string
}

// runBench runs the configured phases. The result holds the phases that
// finished even when it returns an error.
func runBench(ctx context.Context, c benchConfig, log *slog.Logger) (res benchResult, err error) {
	res = benchResult{
		Target: "in-process", Redis: "embedded",
		Streams: c.streams, Concurrency: c.concurrency, N: c.n, Batch: c.batch, Payload: c.payload,
		Scheme: c.scheme, MaxInFlight: c.maxInFlight, Window: c.window, Rate: c.rate, LatencyN: c.latencyN,
		GOMAXPROCS: runtime.GOMAXPROCS(0),
	}
	recv, err := startBenchReceiver(ctx)
	if err != nil {
		return res, err
	}
	defer recv.close()
	transport := &http.Transport{
		Proxy:           nil,
		DialContext:     (&net.Dialer{Timeout: benchDialTimeout}).DialContext,
		IdleConnTimeout: 90 * time.Second,
	}
	defer transport.CloseIdleConnections()
	b := &bencher{
		cfg:    c,
		http:   &http.Client{Transport: transport, Timeout: benchRequestTimeout},
		recv:   recv,
		run:    randomHex(4),
		detail: benchDetail(c.payload),
		now:    time.Now().UnixMilli(),
	}
	if c.target == "" {
		r, rerr := startBenchRelay(ctx, c, log)
		if rerr != nil {
			return res, rerr
		}
		defer func() { err = errors.Join(err, r.stop()) }()
		b.base, b.token, b.counter, b.startDelivery = r.url, r.token, r.counter, r.startDelivery
		res.Redis, res.Prefix, res.DeliveryConcurrency = r.kind, r.prefix, r.deliveryConcurrency
	} else {
		b.base, b.token = c.target, c.token
		res.Target, res.Redis = c.target, "unknown"
		if c.redis != "" {
			client, closeRedis, cerr := connect(c.redis, log)
			if cerr != nil {
				return res, cerr
			}
			defer closeRedis()
			b.counter, res.Redis = client, redisKind(client)
		}
		defer func() { err = errors.Join(err, b.deleteEndpoints(log)) }()
	}
	if b.load, err = newLoadTarget(b.base, b.token); err != nil {
		return res, err
	}
	b.conns = make([]*loadConn, c.concurrency)
	for i := range b.conns {
		b.conns[i] = b.load.conn()
	}
	defer func() {
		for _, lc := range b.conns {
			lc.close()
		}
	}()
	for _, name := range c.phases {
		p, perr := b.phase(ctx, name)
		if perr != nil {
			return res, fmt.Errorf("phase %s: %w", name, perr)
		}
		res.Phases = append(res.Phases, p)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	for i := range res.Phases {
		if p := &res.Phases[i]; p.Delivered >= 0 {
			p.Duplicates = recv.duplicates(b.ridPrefix(p.Name))
		}
	}
	res.BadWebhooks = recv.bad.Load()
	return res, nil
}

// phase registers the phase's endpoints and runs it.
func (b *bencher) phase(ctx context.Context, name string) (phaseResult, error) {
	delivers := name == phaseE2E || name == phaseLatency
	if delivers && b.startDelivery != nil {
		if err := b.startDelivery(ctx); err != nil {
			return phaseResult{}, err
		}
	}
	nss := make([]string, b.cfg.streams)
	for i := range nss {
		nss[i] = fmt.Sprintf("bench-%s-%d", name, i)
		if err := b.putEndpoint(ctx, nss[i], delivers); err != nil {
			return phaseResult{}, err
		}
	}
	switch name {
	case phaseSingle:
		return b.ingest(ctx, name, b.requests(name, nss, b.cfg.n, 1))
	case phaseBatch:
		return b.ingest(ctx, name, b.requests(name, nss, b.cfg.n, b.cfg.batch))
	case phaseE2E:
		return b.endToEnd(ctx, name, b.requests(name, nss, b.cfg.n, b.cfg.batch))
	default:
		return b.latency(ctx, name, b.requests(name, nss, b.cfg.latencyN, 1))
	}
}

// putEndpoint registers ns's one endpoint, pointing at the receiver.
func (b *bencher) putEndpoint(ctx context.Context, ns string, enabled bool) error {
	body := map[string]any{
		"url":           b.recv.url + "/" + ns,
		"scheme":        b.cfg.scheme,
		"enabled":       enabled,
		"max_in_flight": b.cfg.maxInFlight,
	}
	if b.cfg.scheme == string(outbox.SchemeStandardWebhooks) {
		secret, err := outbox.NewSecret()
		if err != nil {
			return err
		}
		body["secret"] = string(secret)
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	code, answer, err := b.call(ctx, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+benchEndpoint, raw)
	if err != nil {
		return fmt.Errorf("register endpoint of %s: %w", ns, err)
	}
	if code != http.StatusOK && code != http.StatusCreated {
		hint := ""
		if code == http.StatusUnprocessableEntity {
			hint = " (relay must allow webhooks to 127.0.0.1/32: RELAY_ALLOW_CIDRS)"
		}
		return fmt.Errorf("register endpoint of %s: HTTP %d %s%s", ns, code, bytes.TrimSpace(answer), hint)
	}
	b.namespaces = append(b.namespaces, ns)
	return nil
}

// deleteEndpoints drops what the run registered on a -target relay, rows
// included.
func (b *bencher) deleteEndpoints(log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, ns := range b.namespaces {
		code, answer, err := b.call(ctx, http.MethodDelete, "/v1/namespaces/"+ns+"/endpoints/"+benchEndpoint+"?force=true", nil)
		if err == nil && code != http.StatusOK && code != http.StatusNotFound {
			err = fmt.Errorf("HTTP %d %s", code, bytes.TrimSpace(answer))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete endpoint of %s: %w", ns, err))
		}
	}
	if len(errs) == 0 && len(b.namespaces) > 0 {
		log.Info("bench endpoints deleted", "namespaces", len(b.namespaces))
	}
	return errors.Join(errs...)
}

// call sends one API request and reads the whole answer.
func (b *bencher) call(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	resp, err := b.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, answer, err
}

// benchRequest is one prepared POST of outcomes first..first+n-1.
type benchRequest struct {
	// wire is the request as it is written, head and body.
	wire  []byte
	first int
	n     int
}

// requests encodes a phase's n outcomes before its clock starts, per to a
// request (1: one outcome alone, not a batch), the requests round-robin
// over the namespaces.
func (b *bencher) requests(phase string, nss []string, n, per int) []benchRequest {
	heads := make([]string, len(nss))
	for i, ns := range nss {
		heads[i] = b.load.head("/v1/namespaces/" + ns + "/outcomes")
	}
	out := make([]benchRequest, 0, (n+per-1)/per)
	for first := 0; first < n; first += per {
		k := min(per, n-first)
		outcomes := make([]outbox.Outcome, k)
		for i := range outcomes {
			outcomes[i] = outbox.Outcome{
				ReservationID:  b.rid(phase, first+i),
				Repository:     "bench/relay",
				OccurredUnixMs: b.now,
				Aborted:        &outbox.Aborted{Reason: "bench", Detail: b.detail},
			}
		}
		var v any = map[string]any{"outcomes": outcomes}
		if per == 1 {
			v = outcomes[0]
		}
		body, err := json.Marshal(v)
		if err != nil {
			panic(err) // plain structs always encode
		}
		out = append(out, benchRequest{wire: loadRequest(heads[len(out)%len(heads)], body), first: first, n: k})
	}
	return out
}

// ridPrefix starts every reservation id of a phase of this run.
func (b *bencher) ridPrefix(phase string) string { return b.run + "-" + phase + "-" }

func (b *bencher) rid(phase string, i int) string { return b.ridPrefix(phase) + strconv.Itoa(i) }

// errorCounts counts a phase's failed outcomes by cause.
type errorCounts struct {
	mu    sync.Mutex
	n     int
	kinds map[string]int
}

func (e *errorCounts) add(why string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	e.n += n
	e.kinds[why] += n
}

// acceptedMarker marks an accepted outcome in a 202's results, as
// relay's compact JSON writes it.
var acceptedMarker = []byte(`"status":"accepted"`)

// post sends one request on c and returns how many of its outcomes were
// accepted; every other one is counted in errs under its cause.
func (b *bencher) post(ctx context.Context, c *loadConn, rq *benchRequest, errs *errorCounts) int {
	code, answer, err := c.do(ctx, rq.wire)
	if err != nil {
		errs.add("transport: "+err.Error(), rq.n)
		return 0
	}
	if code != http.StatusAccepted {
		var problem struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(answer, &problem)
		errs.add(strings.TrimSpace(fmt.Sprintf("HTTP %d %s", code, strings.TrimPrefix(problem.Type, httpapi.ProblemTypePrefix))), rq.n)
		return 0
	}
	if bytes.Count(answer, acceptedMarker) == rq.n {
		return rq.n
	}
	var results struct {
		Results []struct {
			Status string `json:"status"`
		} `json:"results"`
	}
	if err := json.Unmarshal(answer, &results); err != nil || len(results.Results) != rq.n {
		errs.add("202 with an unreadable answer", rq.n)
		return 0
	}
	accepted := 0
	for _, r := range results.Results {
		if r.Status == "accepted" {
			accepted++
		} else {
			errs.add("202 with status "+r.Status, 1)
		}
	}
	return accepted
}

// ingest posts the requests with -concurrency workers; nothing is
// delivered.
func (b *bencher) ingest(ctx context.Context, name string, reqs []benchRequest) (phaseResult, error) {
	var errs errorCounts
	var next, accepted atomic.Int64
	before := b.commands(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range b.conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) {
					return
				}
				if ctx.Err() != nil {
					errs.add("not sent: "+ctx.Err().Error(), reqs[i].n)
					continue
				}
				accepted.Add(int64(b.post(ctx, c, &reqs[i], &errs)))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	p := b.result(name, reqs, &errs, elapsed)
	p.Rate = float64(accepted.Load()) / elapsed.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), int(accepted.Load()))
	return p, nil
}

// endToEnd posts batches while the backlog of accepted, undelivered
// outcomes leaves room under -window, and waits until every accepted one
// has arrived.
func (b *bencher) endToEnd(ctx context.Context, name string, reqs []benchRequest) (phaseResult, error) {
	tr := newDeliveryTracker(b.ridPrefix(name), b.cfg.window, b.cfg.batch)
	b.recv.track(tr)
	defer b.recv.track(nil)
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(pctx, tr.wakeAll)()

	var errs errorCounts
	var next, sent atomic.Int64
	before := b.commands(ctx)
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range b.conns {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) || !tr.reserve(pctx, reqs[i].n) {
					return
				}
				sent.Add(int64(reqs[i].n))
				acc := b.post(pctx, c, &reqs[i], &errs)
				tr.answered(acc, reqs[i].n-acc)
			}
		})
	}
	go func() {
		wg.Wait()
		tr.sendsDone()
	}()
	stalled := tr.wait(pctx, benchStall)
	cancel(stalled)
	wg.Wait()
	if unsent := b.cfg.n - int(sent.Load()); unsent > 0 {
		errs.add("not sent: "+context.Cause(pctx).Error(), unsent)
	}
	got := tr.counts()
	elapsed := got.last.Sub(start)
	if got.delivered == 0 {
		elapsed = time.Since(start)
	}
	p := b.result(name, reqs, &errs, elapsed)
	p.Delivered, p.BacklogPeak = got.delivered, got.peak
	p.Rate = float64(got.delivered) / elapsed.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), got.accepted)
	if stalled != nil {
		p.Stalled = stalled.Error()
	}
	return p, nil
}

// latency sends single outcomes on an open-loop schedule, outcome i at
// start + i/rate, each on its own goroutine and on whichever connection is
// free. A send that finds -concurrency requests in flight waits, and the
// schedule does not slow for it: the sends behind it go as soon as they
// can, and the lag is reported.
func (b *bencher) latency(ctx context.Context, name string, reqs []benchRequest) (phaseResult, error) {
	tr := newDeliveryTracker(b.ridPrefix(name), 0, 0)
	b.recv.track(tr)
	defer b.recv.track(nil)

	var errs errorCounts
	acceptedAt := make([]time.Time, len(reqs)) // each written by its own send
	free := make(chan *loadConn, len(b.conns))
	for _, c := range b.conns {
		free <- c
	}
	period := max(time.Second/time.Duration(b.cfg.rate), time.Millisecond)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	var wg sync.WaitGroup
	var lag time.Duration
	before := b.commands(ctx)
	start := time.Now()
	next := 0
send:
	for next < len(reqs) {
		due := min(int(time.Since(start).Seconds()*float64(b.cfg.rate))+1, len(reqs))
		for ; next < due; next++ {
			var c *loadConn
			select {
			case c = <-free:
			case <-ctx.Done():
				break send
			}
			scheduled := start.Add(time.Duration(float64(next) / float64(b.cfg.rate) * float64(time.Second)))
			lag = max(lag, time.Since(scheduled))
			rq := &reqs[next]
			wg.Go(func() {
				defer func() { free <- c }()
				acc := b.post(ctx, c, rq, &errs)
				if acc == 1 {
					acceptedAt[rq.first] = time.Now()
				}
				tr.answered(acc, 1-acc)
			})
		}
		if next == len(reqs) {
			break
		}
		select {
		case <-ticker.C:
		case <-ctx.Done():
			break send
		}
	}
	if unsent := len(reqs) - next; unsent > 0 {
		errs.add("not sent: "+ctx.Err().Error(), unsent)
	}
	wg.Wait()
	sendTime := time.Since(start)
	tr.sendsDone()
	stalled := tr.wait(ctx, benchStall)
	got := tr.counts()

	var lat []time.Duration
	for i := range reqs {
		if acceptedAt[i].IsZero() {
			continue
		}
		if got, ok := b.recv.firstSeen(b.rid(name, i)); ok {
			lat = append(lat, max(got.Sub(acceptedAt[i]), 0))
		}
	}
	slices.Sort(lat)
	p := b.result(name, reqs, &errs, sendTime)
	p.Delivered = got.delivered
	p.Rate = float64(got.accepted) / sendTime.Seconds()
	p.Commands = perOutcome(before, b.commands(ctx), got.accepted)
	p.HasLatency, p.SendLag = true, lag
	if len(lat) > 0 {
		p.P50, p.P99, p.Max = percentile(lat, 0.50), percentile(lat, 0.99), lat[len(lat)-1]
	}
	if stalled != nil {
		p.Stalled = stalled.Error()
	}
	return p, nil
}

// result fills what every phase reports alike.
func (b *bencher) result(name string, reqs []benchRequest, errs *errorCounts, elapsed time.Duration) phaseResult {
	n := 0
	for i := range reqs {
		n += reqs[i].n
	}
	errs.mu.Lock()
	defer errs.mu.Unlock()
	return phaseResult{
		Name: name, Outcomes: n, Errors: errs.n, ErrorKinds: maps.Clone(errs.kinds),
		Delivered: -1, BacklogPeak: -1, Commands: -1, Elapsed: elapsed,
	}
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// commands is the Redis command count now; -1 when unknown.
func (b *bencher) commands(ctx context.Context) int64 {
	if b.counter == nil {
		return -1
	}
	n, err := redisCommands(ctx, b.counter)
	if err != nil {
		return -1
	}
	return n
}

func perOutcome(before, after int64, outcomes int) float64 {
	if before < 0 || after < 0 || outcomes <= 0 {
		return -1
	}
	return float64(after-before) / float64(outcomes)
}

// redisCommands sums calls= over INFO commandstats, which counts the
// commands scripts issue too. On a Cluster it sums the masters: a replica
// counts again the writes it copies, which relay did not send.
func redisCommands(ctx context.Context, client redis.UniversalClient) (int64, error) {
	read := func(ctx context.Context, c *redis.Client) (int64, error) {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %w", err)
		}
		var total int64
		for line := range strings.SplitSeq(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_") {
				continue
			}
			_, rest, _ := strings.Cut(line, ":calls=")
			n, _, _ := strings.Cut(rest, ",")
			v, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO commandstats: unreadable line %q", line)
			}
			total += v
		}
		return total, nil
	}
	switch c := client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		var total int64
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			v, err := read(ctx, n)
			mu.Lock()
			defer mu.Unlock()
			total += v
			return err
		})
		return total, err
	case *redis.Client:
		return read(ctx, c)
	}
	return 0, fmt.Errorf("cannot count the commands of a %T", client)
}

func redisKind(c redis.UniversalClient) string {
	if _, ok := c.(*redis.ClusterClient); ok {
		return "cluster"
	}
	return "redis"
}

// benchDetail is n bytes of printable text.
func benchDetail(n int) string {
	const text = "relay bench payload; "
	return strings.Repeat(text, n/len(text)+1)[:n]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails since Go 1.24.
	return hex.EncodeToString(b)
}

// benchRelay is a relay built in this process, as serve builds it.
type benchRelay struct {
	url                 string
	token               string
	kind                string
	prefix              string
	deliveryConcurrency int
	app                 *app
	srv                 *http.Server
	served              chan error
	// counter is a client of the same Redis, for command counts and the
	// final cleanup; nil for the embedded miniredis.
	counter      redis.UniversalClient
	closeCounter func()
	started      bool
}

// startBenchRelay builds a relay on a free loopback port under a fresh key
// prefix, with a throwaway signing key and token secret, and serves its
// API. Its delivery driver waits for startDelivery.
func startBenchRelay(ctx context.Context, c benchConfig, log *slog.Logger) (_ *benchRelay, err error) {
	dir, err := os.MkdirTemp("", "relay-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	key, err := hooks.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	pem, err := hooks.EncodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "hook.pem")
	if err := os.WriteFile(keyFile, pem, 0o600); err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	defer func() {
		if err != nil {
			ln.Close()
		}
	}()
	addr := ln.Addr().String()
	r := &benchRelay{url: "http://" + addr, kind: "embedded", prefix: "relaybench:" + randomHex(6) + ":", served: make(chan error, 1)}
	cfg := config{
		redis:   c.redis,
		listen:  addr,
		prefix:  r.prefix,
		buckets: redisstore.DefaultBuckets,
		signing: signingConfig{keyFile: keyFile, keyID: "bench"},
		deliver: deliveryConfig{publicURL: r.url, allow: "127.0.0.1/32", concurrency: delivery.DefaultConcurrency},
		auth:    authConfig{secret: string(secret), leeway: defaultLeeway},
	}
	r.deliveryConcurrency = cfg.deliver.concurrency
	if c.redis != "" {
		client, closeRedis, err := connect(c.redis, log)
		if err != nil {
			return nil, err
		}
		r.counter, r.closeCounter, r.kind = client, closeRedis, redisKind(client)
		defer func() {
			if err != nil {
				r.cleanup()
			}
		}()
	}
	// Relay's info lines (each endpoint registered) would bury the table.
	var a *app
	labeled(ctx, "relay", func(ctx context.Context) { a, err = build(ctx, cfg, slog.New(warnOnly{log.Handler()})) })
	if err != nil {
		return nil, err
	}
	r.app = a
	r.token, err = httpapi.MintHS256(secret, a.audience, "", httpapi.Principal{Subject: "relay-bench", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, 24*time.Hour, time.Now())
	if err != nil {
		a.close()
		return nil, err
	}
	srv, served, err := a.server(ln, httpapi.DefaultMaxConnections)
	if err != nil {
		a.close()
		return nil, err
	}
	r.srv = srv
	labeled(ctx, "relay", func(context.Context) {
		go func() { r.served <- r.srv.Serve(served) }()
	})
	return r, nil
}

// startDelivery starts the driver once.
func (r *benchRelay) startDelivery(ctx context.Context) error {
	if r.started {
		return nil
	}
	r.started = true
	var err error
	labeled(ctx, "relay", func(ctx context.Context) { err = r.app.driver.Start(context.WithoutCancel(ctx)) })
	return err
}

// stop stops taking requests, stops delivery within a deadline, closes the
// store and deletes every key the run wrote.
func (r *benchRelay) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var errs []error
	if err := r.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stop the API: %w", err))
	}
	if err := <-r.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve the API: %w", err))
	}
	if r.started {
		if err := r.app.driver.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop delivery: %w", err))
		}
	}
	r.app.close()
	if err := r.cleanup(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cleanup deletes the run's keys from a real Redis and closes the client.
func (r *benchRelay) cleanup() error {
	if r.counter == nil {
		return nil
	}
	defer r.closeCounter()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := redisstore.DeletePrefix(ctx, r.counter, r.prefix); err != nil {
		return fmt.Errorf("delete the bench keys under %q: %w", r.prefix, err)
	}
	return nil
}

// labeled runs f, and every goroutine it starts, under the profile label
// side=load, relay or receiver, so that -cpuprofile tells relay's own CPU
// from the bench's (go tool pprof -tags, -tagfocus side=relay). ctx must
// carry the caller's labels: they are restored from it afterwards.
func labeled(ctx context.Context, side string, f func(context.Context)) {
	pprof.Do(ctx, pprof.Labels("side", side), f)
}

// warnOnly passes on a handler's records of level Warn and above.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnOnly{h.Handler.WithAttrs(attrs)}
}

func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
