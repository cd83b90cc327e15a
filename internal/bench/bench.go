package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/envflag"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// Phase names, in their default order.
const (
	phaseSingle  = "single"
	phaseList    = "list"
	phaseE2E     = "e2e"
	phaseLatency = "latency"
)

var benchPhases = []string{phaseSingle, phaseList, phaseE2E, phaseLatency}

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
	perRequest  int
	payload     int
	streams     int
	maxInFlight int
	scheme      string
	rate        int
	latencyN    int
	window      int
	phases      []string
	cpuprofile  string
	memprofile  string
	targetPID   int
	runs        int
}

// benchSchemes are the schemes -scheme takes: every one relay registers.
// v1a endpoints need nothing from the bench: relay makes their key pairs.
var benchSchemes = []schema.Scheme{schema.SchemeStandardWebhooks, schema.SchemeStandardWebhooksV1a, schema.SchemeMkitHookV2}

func parseBench(args []string) (benchConfig, error) {
	fs := envflag.New("relay bench")
	var c benchConfig
	fs.StringVar(&c.target, "target", "", "URL of a running relay to drive; empty builds one in this process")
	fs.StringVar(&c.token, "token", "", "admin-scope API token for -target")
	fs.HiddenFromEnv(&c.redis, "redis", "RELAY_REDIS_URL",
		"Redis URL or Cluster seeds, as serve takes them; empty runs an embedded miniredis. With -target, only read for command counts (env RELAY_REDIS_URL)")
	fs.IntVar(&c.n, "n", 20000, "outcomes per phase (single, list, e2e)")
	fs.IntVar(&c.concurrency, "concurrency", 64, "requests in flight at once")
	fs.IntVar(&c.perRequest, "per-request", 100, "outcomes per request of the list and e2e phases, 1 to 100")
	fs.IntVar(&c.payload, "payload", 256, "bytes of each outcome's aborted.detail, at most 512")
	fs.IntVar(&c.streams, "streams", 8, "namespaces per phase, one endpoint each")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 16, "each endpoint's max_in_flight, 1 to 16")
	fs.StringVar(&c.scheme, "scheme", string(schema.SchemeStandardWebhooks), "signing scheme of the endpoints: standard-webhooks, standard-webhooks-v1a or mkit-hook-v2")
	fs.IntVar(&c.rate, "rate", 1000, "outcomes per second the latency phase sends")
	fs.IntVar(&c.latencyN, "latency-n", 5000, "outcomes of the latency phase")
	fs.IntVar(&c.window, "window", 5000, "most outcomes accepted and not yet delivered in the e2e phase")
	phases := fs.String("phases", strings.Join(benchPhases, ","), "phases to run, comma-separated")
	fs.IntVar(&c.targetPID, "target-pid", 0, "process id of the -target relay, when it runs on this machine, to report its CPU per outcome")
	fs.IntVar(&c.runs, "runs", 1, "times to run the whole bench; more than 1 prints each run's table, then one of the medians")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole run (relay included when in-process) to this file")
	fs.StringVar(&c.memprofile, "memprofile", "", "write a profile of the whole run's allocations (relay included when in-process) to this file")
	if err := fs.Parse(args); err != nil {
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
	case c.n < 1 || c.latencyN < 1 || c.rate < 1 || c.concurrency < 1 || c.streams < 1 || c.runs < 1:
		return c, errors.New("-n, -latency-n, -rate, -concurrency, -streams and -runs must be at least 1")
	case c.perRequest < 1 || c.perRequest > outbox.MaxAppendOutcomes:
		return c, fmt.Errorf("-per-request must be 1 to %d", outbox.MaxAppendOutcomes)
	case c.payload < 0 || c.payload > schema.MaxDetailBytes:
		return c, fmt.Errorf("-payload must be 0 to %d", schema.MaxDetailBytes)
	case c.maxInFlight < schema.MinMaxInFlight || c.maxInFlight > schema.MaxMaxInFlight:
		return c, fmt.Errorf("-max-in-flight must be %d to %d", schema.MinMaxInFlight, schema.MaxMaxInFlight)
	case !slices.Contains(benchSchemes, schema.Scheme(c.scheme)):
		return c, fmt.Errorf("-scheme must be %s, %s or %s", benchSchemes[0], benchSchemes[1], benchSchemes[2])
	case c.targetPID != 0 && c.target == "":
		return c, errors.New("-target-pid goes with -target; in-process, relay shares this process with the load")
	case c.targetPID < 0:
		return c, errors.New("-target-pid must be a process id")
	case c.window < c.perRequest:
		return c, errors.New("-window must hold at least -per-request outcomes")
	}
	if c.target != "" {
		if u, err := url.Parse(c.target); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("-target %q must be an http(s) URL", c.target)
		}
	}
	return c, nil
}

// Main is relay bench: it parses args, runs the phases, prints the table,
// and fails when any outcome failed or was not delivered.
func Main(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
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
	if c.memprofile != "" {
		// Every allocation, not a sample of one in 512 KiB: the run is
		// short, and allocations per outcome are what it is for.
		prev := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		defer func() { runtime.MemProfileRate = prev }()
		defer writeAllocs(c.memprofile, log)
	}
	var runs []benchResult
	failures := 0
	for range c.runs {
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
		failures += res.failures()
		runs = append(runs, res)
	}
	if len(runs) > 1 {
		if _, err := fmt.Fprintln(stdout); err != nil {
			return err
		}
		if err := printBench(stdout, medianResult(runs)); err != nil {
			return err
		}
	}
	if failures > 0 {
		return fmt.Errorf("bench: %d outcomes failed or were not delivered", failures)
	}
	return nil
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
		Streams: c.streams, Concurrency: c.concurrency, N: c.n, PerRequest: c.perRequest, Payload: c.payload,
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
		res.Target, res.Redis, res.TargetPID = c.target, "unknown", c.targetPID
		if c.targetPID > 0 {
			// A wrong pid is better refused now than shown as "-" after
			// the run.
			if _, perr := processCPU(c.targetPID); perr != nil {
				return res, fmt.Errorf("-target-pid: %w", perr)
			}
		}
		if c.redis != "" {
			client, closeRedis, cerr := app.Connect(c.redis, log)
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
	case phaseList:
		return b.ingest(ctx, name, b.requests(name, nss, b.cfg.n, b.cfg.perRequest))
	case phaseE2E:
		return b.endToEnd(ctx, name, b.requests(name, nss, b.cfg.n, b.cfg.perRequest))
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
	if b.cfg.scheme == string(schema.SchemeStandardWebhooks) {
		secret, err := schema.NewSecret()
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

// writeAllocs writes the allocations since the run began to path.
func writeAllocs(path string, log *slog.Logger) {
	f, err := os.Create(path)
	if err != nil {
		log.Error("memory profile", "error", err)
		return
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		log.Error("memory profile", "error", err)
	}
}
