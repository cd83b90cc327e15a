package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/console"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/gopool"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/hookrelay/relay/internal/tracing"
)

// App is one relay process: its store, delivery driver and API.
type App struct {
	handler  http.Handler
	metrics  *httpapi.Metrics
	maxConns int
	log      *slog.Logger
	driver   *delivery.Driver
	// backlog samples the backlog gauges; nil when they are off.
	backlog  *delivery.BacklogSampler
	store    *redisstore.Store
	audience string
	// devToken is an admin token minted at start in development, when no
	// token key is configured; empty otherwise.
	devToken string
	tracing  *tracing.Tracing
	close    func()
}

// New connects to Redis (or starts an embedded miniredis) and builds the
// delivery driver and the API from cfg. Delivery waits for Start; Close
// releases Redis.
func New(ctx context.Context, cfg Config) (*App, error) {
	if cfg.BacklogEvery < 0 {
		return nil, fmt.Errorf("backlog sample interval %v must not be negative", cfg.BacklogEvery)
	}
	if cfg.Retention < 0 || cfg.Retention > outbox.MaxRetention {
		return nil, fmt.Errorf("retention %v must be between 0 and %v", cfg.Retention, outbox.MaxRetention)
	}
	if cfg.MaxConnections < 1 {
		return nil, fmt.Errorf("max connections %d must be at least 1", cfg.MaxConnections)
	}
	if cfg.MaxNamespaces < 1 {
		return nil, fmt.Errorf("max namespaces %d must be at least 1", cfg.MaxNamespaces)
	}
	if cfg.MaxEndpoints < 0 || cfg.MaxEndpoints > outbox.HardMaxEndpoints {
		return nil, fmt.Errorf("max endpoints %d must be 0 (the default, %d) to %d", cfg.MaxEndpoints, outbox.DefaultMaxEndpoints, outbox.HardMaxEndpoints)
	}
	durability, err := ParseDurability(cfg.Durability, cfg.DurabilityTimeout)
	if err != nil {
		return nil, err
	}
	if durability.Replicas > 0 && cfg.RedisURL == "" {
		return nil, errors.New("durability replicas=N needs a Redis with replicas: set RELAY_REDIS_URL (the embedded miniredis has none)")
	}
	log, clk := cfg.Logger, cfg.Clock
	if log == nil {
		log = slog.Default()
	}
	if clk == nil {
		clk = clock.NewSteady(clock.System{})
	}
	// Tracing is set up by the OTEL_* variables, which the SDK reads.
	tr, err := tracing.New(ctx, buildinfo.Read().Version, log)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = tr.Shutdown(context.Background())
		}
	}()
	var tp trace.TracerProvider
	if tr.On() {
		tp = tr.TracerProvider()
		log = slog.New(tracing.LogHandler(log.Handler()))
	}
	dev := cfg.RedisURL == ""
	sign, err := cfg.Signing.load(dev, log)
	if err != nil {
		return nil, err
	}
	audience, err := cfg.Delivery.Audience(dev, cfg.Listen)
	if err != nil {
		return nil, err
	}
	allow, err := cfg.Delivery.allowList(dev, log)
	if err != nil {
		return nil, err
	}
	auth, devSecret, err := cfg.Auth.Load(dev, audience, log)
	if err != nil {
		return nil, err
	}
	client, closeRedis, err := Connect(cfg.RedisURL, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !ok {
			closeRedis()
		}
	}()
	scrub := newScrubber(cfg.RedisURL).scrub
	st, err := redisstore.New(ctx, client, redisstore.Options{Prefix: cfg.Prefix, Buckets: cfg.Buckets, Durability: durability})
	if err != nil {
		return nil, scrub(fmt.Errorf("open store: %w", err))
	}
	if !dev && !st.Shebang() {
		log.Warn("Redis does not take #!lua scripts (Redis 7+ needed): a full Redis may refuse the batches that settle what it holds")
	}
	if err := st.Check(ctx); err != nil {
		log.Warn("store check failed; /readyz will say so", "error", scrub(err))
	}
	// Leases are dated by this clock and judged by every relay's: one
	// too far from Redis's would let two relays fire one timer at once.
	if err := checkClock(ctx, st, clk); err != nil {
		var skew *ClockSkewError
		if errors.As(err, &skew) {
			return nil, scrub(err)
		}
		log.Warn("could not compare this host's clock with Redis's; /readyz compares them again", "error", scrub(err))
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildGauge(buildinfo.Read()))
	channel, err := newChannel(cfg.Delivery, allow)
	if err != nil {
		return nil, err
	}
	// The fires' claims and completions are folded into what ingest holds
	// of their namespaces, so ingest need not read them again.
	// Ingest's flushers and delivery's fires share one set of kept goroutines.
	goroutines := new(gopool.Pool)
	ingest := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: clk}, Goroutines: goroutines}
	if tp != nil {
		ingest.Appender.Tracer = tp.Tracer(outbox.TracerName)
	}
	driver, err := newDriver(cfg.Delivery, cfg.Retention, st, channel, sign.signer, audience, metrics, clk, log, tp, goroutines, ingest.Observe)
	if err != nil {
		return nil, err
	}
	// A stream an ingest leaves due is fired at once, with no scan; a new
	// one's timer is written held by this process, for no claim either.
	ingest.Appender.Due, ingest.Appender.Hold = driver.FireDue, driver.HoldFor
	apiMetrics, err := httpapi.NewMetrics(metrics)
	if err != nil {
		return nil, err
	}
	var backlog *delivery.BacklogSampler
	if cfg.BacklogEvery > 0 {
		backlog, err = delivery.NewBacklogSampler(delivery.BacklogConfig{
			Store: st, Registerer: metrics, Clock: clk, Every: cfg.BacklogEvery, Logger: log,
		})
		if err != nil {
			return nil, err
		}
	}
	var oldest httpapi.OldestPending
	if backlog != nil {
		oldest = backlog.Oldest
	}
	handler, err := httpapi.New(httpapi.Config{
		Appender:       ingest,
		Oldest:         oldest,
		Admin:          &outbox.Admin{Store: st, Clock: clk, Retention: cfg.Retention, MaxNamespaces: cfg.MaxNamespaces, MaxEndpoints: cfg.MaxEndpoints},
		Auth:           auth,
		Wake:           driver.WakePartition,
		Ingested:       driver.Ingested,
		CheckURL:       channel.CheckURL,
		Ready:          ready(st, clk, log),
		Keys:           signing.KeysHandler(sign.keys),
		MetricsHandler: promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}),
		Metrics:        apiMetrics,
		Console:        console.Handler(),
		PublicURL:      audience,
		Clock:          clk,
		Logger:         log,
		TracerProvider: tp,
	})
	if err != nil {
		return nil, err
	}
	a := &App{handler: handler, metrics: apiMetrics, maxConns: cfg.MaxConnections, log: log, driver: driver, backlog: backlog,
		store: st, audience: audience, tracing: tr, close: closeRedis}
	if devSecret != nil {
		p := httpapi.Principal{Subject: "dev-admin", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}
		if a.devToken, err = httpapi.MintHS256(devSecret, audience, cfg.Auth.Issuer, p, DevTokenTTL, clk.Now()); err != nil {
			return nil, err
		}
	}
	ok = true
	return a, nil
}

// Handler is the API.
func (a *App) Handler() http.Handler { return a.handler }

// Audience is relay's public origin.
func (a *App) Audience() string { return a.audience }

// Buckets is the store's number of due-index buckets.
func (a *App) Buckets() int { return a.store.Buckets() }

// DevToken is the admin token minted in development when no token key is
// configured; empty otherwise. It is a secret: print it, never log it.
func (a *App) DevToken() string { return a.devToken }

// Server is the HTTP server of the API on tcp, and the listener to serve it
// on: at most MaxConnections connections open at once.
func (a *App) Server(tcp net.Listener) (*http.Server, net.Listener, error) {
	ln, err := httpapi.NewListener(tcp, httpapi.ListenerConfig{MaxConnections: a.maxConns, Metrics: a.metrics})
	if err != nil {
		return nil, nil, err
	}
	return httpapi.NewServer(a.handler, ln), ln, nil
}

// Start starts delivery and the backlog sampler. They run until Stop: the
// end of ctx does not stop them, and only its values are kept.
func (a *App) Start(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	if err := a.driver.Start(ctx); err != nil {
		return err
	}
	go a.rebuildFleet(ctx)
	if a.backlog != nil {
		return a.backlog.Start(ctx)
	}
	return nil
}

// rebuildFleet gives a keyspace written before relay kept the fleet's
// totals its marks and totals (outbox.Admin.RebuildFleet), in the
// background: until it ends the fleet's figures count only what changed
// since the start. Cut short, the next start does it again.
func (a *App) rebuildFleet(ctx context.Context) {
	started := time.Now()
	rebuilt, err := (&outbox.Admin{Store: a.store, Clock: clock.System{}}).RebuildFleet(ctx)
	switch {
	case err != nil:
		a.log.Error("rebuilding the fleet's totals failed; the next start tries again", "error", err)
	case rebuilt:
		a.log.Info("rebuilt the fleet's totals of a keyspace written before relay kept them", "took", time.Since(started).Round(time.Millisecond).String())
	}
}

// Stop stops launching fires and waits for those in flight, within ctx:
// once ctx ends it cancels them, and a canceled fire writes nothing; its
// stream resumes once its lease expires. It returns ctx's error then. The
// backlog sampler stops too. Then the spans not yet exported are, and
// tracing stops.
func (a *App) Stop(ctx context.Context) error {
	err := a.stopDelivery(ctx)
	a.stopTracing()
	return err
}

func (a *App) stopDelivery(ctx context.Context) error {
	err := a.driver.Stop(ctx)
	if a.backlog != nil {
		a.backlog.Stop()
	}
	return err
}

// flushWithin bounds the export of the spans left at Stop: a collector that
// does not answer holds up no exit for longer.
const flushWithin = 5 * time.Second

// stopTracing exports the spans left and stops the exporter; a failure is
// logged, as it loses only spans.
func (a *App) stopTracing() {
	ctx, cancel := context.WithTimeout(context.Background(), flushWithin)
	defer cancel()
	if err := a.tracing.Shutdown(ctx); err != nil {
		a.log.Warn("tracing: spans not exported at stop", "error", err)
	}
}

// Close releases Redis, or the embedded miniredis, and stops tracing if
// Stop did not.
func (a *App) Close() {
	a.stopTracing()
	a.close()
}

// Run starts delivery and serves srv on ln until ctx ends or serving
// fails, then stops taking requests and lets delivery finish its fires.
func (a *App) Run(ctx context.Context, srv *http.Server, ln net.Listener) error {
	if err := a.Start(ctx); err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	// Stop taking requests and launching fires at once; let requests and
	// fires in flight finish, each within its own deadline. A fire lasts up
	// to about 15 s; one still running at its deadline writes nothing, and
	// its stream resumes once its lease expires.
	stopped := make(chan error, 1)
	go func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- a.stopDelivery(stopCtx)
	}()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		serveErr = errors.Join(serveErr, err)
	}
	if err := <-stopped; err != nil {
		a.log.Warn("delivery stopped at its deadline; unfinished fires resume after their lease", "error", err)
	}
	// Last, so that the spans of the requests and fires that finished
	// above are exported too.
	a.stopTracing()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	a.log.Info("relay stopped cleanly")
	return nil
}

// buildGauge is relay_build_info, 1 with the build as its labels, so that
// a dashboard can tell which relay each process runs.
func buildGauge(b buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "relay_build_info",
		Help:        "Always 1; its labels say which relay this process runs: its version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "go_version": b.GoVersion},
	})
	g.Set(1)
	return g
}
