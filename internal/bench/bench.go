package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"strconv"
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
	// benchEndpoint is the id of each namespace's one endpoint, and the
	// stem of the ids of each namespace's endpoints under -endpoints.
	benchEndpoint = "bench"
	// maxBenchEndpoints bounds a count of -endpoints: far above any limit
	// relay takes, and small enough that registering them is no run of
	// its own.
	maxBenchEndpoints = 100_000
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
	// endpoints is -endpoints: each phase runs once per count, with
	// namespaces of that many endpoints. Nil runs each phase once, with
	// one endpoint per namespace.
	endpoints []int
}

// fanoutPhases are the phases -endpoints runs, in the order they run: the
// ingest phases before the driver starts, so their endpoints can be
// enabled and still deliver nothing.
var fanoutPhases = []string{phaseSingle, phaseList, phaseE2E}

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
	endpoints := fs.String("endpoints", "", "endpoint counts per namespace, comma-separated (such as 1,8,100,1000): each of single, list and e2e runs once per count, on -streams namespaces of that many endpoints; empty: one endpoint per namespace")
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
	if *endpoints != "" {
		var err error
		if c.endpoints, err = parseEndpoints(*endpoints); err != nil {
			return c, err
		}
		if !fs.Given("phases") {
			c.phases = fanoutPhases
		}
		if slices.Contains(c.phases, phaseLatency) {
			return c, errors.New("-endpoints runs single, list and e2e; the latency phase takes one endpoint per namespace")
		}
		// In their own order, whatever -phases said: ingest first.
		c.phases = slices.DeleteFunc(slices.Clone(fanoutPhases), func(p string) bool { return !slices.Contains(c.phases, p) })
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

// parseEndpoints reads -endpoints: distinct counts from 1 to
// maxBenchEndpoints.
func parseEndpoints(list string) ([]int, error) {
	var counts []int
	for f := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxBenchEndpoints {
			return nil, fmt.Errorf("-endpoints: %q is not a count from 1 to %d", f, maxBenchEndpoints)
		}
		if slices.Contains(counts, n) {
			return nil, fmt.Errorf("-endpoints: %d given twice", n)
		}
		counts = append(counts, n)
	}
	return counts, nil
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
	// driving says the delivery driver runs: it always does with -target.
	driving bool
	// prefix is the in-process relay's key prefix, whose keys' memory the
	// bench reads; empty with -target.
	prefix string
	// run makes this run's reservation ids its own.
	run    string
	detail string
	now    int64
	// registered are the endpoints registered, for -target's cleanup.
	registered []benchEndpointRef
}

// benchEndpointRef names one registered endpoint.
type benchEndpointRef struct{ ns, id string }

// runBench runs the configured phases. The result holds the phases that
// finished even when it returns an error.
func runBench(ctx context.Context, c benchConfig, log *slog.Logger) (res benchResult, err error) {
	res = benchResult{
		Target: "in-process", Redis: "embedded",
		Streams: c.streams, Concurrency: c.concurrency, N: c.n, PerRequest: c.perRequest, Payload: c.payload,
		Scheme: c.scheme, MaxInFlight: c.maxInFlight, Window: c.window, Rate: c.rate, LatencyN: c.latencyN,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Endpoints: c.endpoints,
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
		b.base, b.token, b.counter, b.startDelivery, b.prefix = r.url, r.token, r.counter, r.startDelivery, r.prefix
		res.Redis, res.Prefix, res.DeliveryConcurrency = r.kind, r.prefix, r.deliveryConcurrency
	} else {
		b.base, b.token, b.driving = c.target, c.token, true
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
		defer func() { err = errors.Join(err, b.deleteRegistered(log)) }()
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
	counts := c.endpoints
	if counts == nil {
		counts = []int{0} // one endpoint per namespace, named as ever
	} else if err := b.warmUp(ctx, false); err != nil {
		return res, err
	}
	for _, name := range c.phases {
		for _, e := range counts {
			p, perr := b.phase(ctx, name, e)
			if perr != nil {
				return res, fmt.Errorf("phase %s: %w", caseName(name, e), perr)
			}
			res.Phases = append(res.Phases, p)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
		}
	}
	for i := range res.Phases {
		if p := &res.Phases[i]; p.Delivered >= 0 {
			p.Duplicates = recv.duplicates(b.ridPrefix(caseName(p.Name, p.Endpoints)))
		}
	}
	res.BadWebhooks = recv.bad.Load()
	return res, nil
}

// caseName names a phase run at e endpoints per namespace (0: one, as
// without -endpoints) in its namespaces and reservation ids.
func caseName(phase string, e int) string {
	if e == 0 {
		return phase
	}
	return phase + "-e" + strconv.Itoa(e)
}

// phase registers the phase's endpoints and runs it: -streams namespaces
// of e endpoints each, or of one when e is 0. A phase whose endpoints
// relay refuses is a row that says so.
//
// Without -endpoints an ingest phase's endpoints are disabled, as they
// always were. With it they are enabled, as healthy endpoints are, while
// no driver runs (in-process, before the e2e phase starts it), and
// disabled where one does (-target); either way they are deleted once
// measured, so that the driver later finds nothing of theirs to deliver
// and no phase's rows wait for the end of the run.
func (b *bencher) phase(ctx context.Context, name string, e int) (phaseResult, error) {
	delivers := name == phaseE2E || name == phaseLatency
	if delivers && !b.driving {
		if err := b.startDelivery(ctx); err != nil {
			return phaseResult{}, err
		}
		b.driving = true
		if e > 0 {
			if err := b.warmUp(ctx, true); err != nil {
				return phaseResult{}, err
			}
		}
	}
	enabled := delivers || (e > 0 && !b.driving)
	key := caseName(name, e)
	nss := make([]string, b.cfg.streams)
	var eps []benchEndpointRef
	for i := range nss {
		nss[i] = fmt.Sprintf("bench-%s-%d", key, i)
		for k := range max(e, 1) {
			ep := benchEndpointRef{ns: nss[i], id: benchEndpoint}
			if e > 0 {
				ep.id = benchEndpoint + "-" + strconv.Itoa(k)
			}
			err := b.putEndpoint(ctx, ep, enabled)
			if limit := (*endpointLimitError)(nil); errors.As(err, &limit) {
				// Nothing of a refused phase stays to be fired.
				return refusedPhase(name, e, limit), b.deleteEndpoints(ctx, eps)
			}
			if err != nil {
				return phaseResult{}, err
			}
			eps = append(eps, ep)
		}
	}
	var p phaseResult
	var err error
	switch name {
	case phaseSingle:
		p, err = b.ingest(ctx, name, b.requests(key, nss, b.cfg.n, 1))
	case phaseList:
		p, err = b.ingest(ctx, name, b.requests(key, nss, b.cfg.n, b.cfg.perRequest))
	case phaseE2E:
		p, err = b.endToEnd(ctx, name, b.requests(key, nss, b.cfg.n, b.cfg.perRequest), max(e, 1))
	default:
		p, err = b.latency(ctx, name, b.requests(key, nss, b.cfg.latencyN, 1))
	}
	p.Endpoints, p.Paused = e, !enabled
	if err == nil && e > 0 && !delivers {
		err = b.deleteEndpoints(ctx, eps)
	}
	return p, err
}

// warmUp sends a few outcomes on every load connection, unmeasured, to a
// namespace of its own: the rows of -endpoints compare counts within a
// phase, and the first count would otherwise pay alone for the load
// connections dialled, relay's Redis connections and scripts loaded, and
// (deliver, once the driver started) the driver's first fires.
func (b *bencher) warmUp(ctx context.Context, deliver bool) error {
	name := "warmup"
	if deliver {
		name = "warmup-e2e"
	}
	ep := benchEndpointRef{ns: "bench-" + name, id: benchEndpoint}
	if err := b.putEndpoint(ctx, ep, deliver); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var p phaseResult
	var err error
	if deliver {
		p, err = b.endToEnd(ctx, name, b.requests(name, []string{ep.ns}, 4*len(b.conns), b.cfg.perRequest), 1)
	} else {
		p, err = b.ingest(ctx, name, b.requests(name, []string{ep.ns}, 4*len(b.conns), 1))
	}
	if n := (benchResult{Phases: []phaseResult{p}}).failures(); err == nil && n > 0 {
		err = fmt.Errorf("%d of %d outcomes failed or were not delivered", n, p.Outcomes)
	}
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if deliver {
		// Kept: every webhook arrived, but a fire may still be
		// acknowledging the last, and a forced delete under it leaves
		// relay warning and the fire's retries to the first phase. Its
		// one endpoint has nothing more to deliver; the run's keys go at
		// its end.
		return nil
	}
	return b.deleteEndpoints(ctx, []benchEndpointRef{ep})
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
