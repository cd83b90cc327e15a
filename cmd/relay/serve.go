package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
)

// devTokenTTL is how long the development admin token printed at start
// lasts.
const devTokenTTL = 24 * time.Hour

// app is one relay process: its store, delivery driver and API.
type app struct {
	handler http.Handler
	metrics *httpapi.Metrics
	driver  *delivery.Driver
	// backlog samples the backlog gauges; nil when they are off.
	backlog  *delivery.BacklogSampler
	store    *redisstore.Store
	audience string
	// devToken is an admin token minted at start in development, when no
	// token key is configured; empty otherwise.
	devToken string
	close    func()
}

// build connects to Redis (or starts an embedded miniredis) and builds the
// delivery driver and the API from cfg. The driver is not started.
func build(ctx context.Context, cfg config, log *slog.Logger) (*app, error) {
	dev := cfg.redis == ""
	sign, err := cfg.signing.load(dev, log)
	if err != nil {
		return nil, err
	}
	audience, err := cfg.deliver.audience(dev, cfg.listen)
	if err != nil {
		return nil, err
	}
	allow, err := cfg.deliver.allowList(dev, log)
	if err != nil {
		return nil, err
	}
	auth, devSecret, err := cfg.auth.load(dev, audience, log)
	if err != nil {
		return nil, err
	}
	client, closeRedis, err := connect(cfg.redis, log)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			closeRedis()
		}
	}()
	scrub := newScrubber(cfg.redis).scrub
	st, err := redisstore.New(ctx, client, redisstore.Options{Prefix: cfg.prefix, Buckets: cfg.buckets})
	if err != nil {
		return nil, scrub(fmt.Errorf("open store: %w", err))
	}
	if !dev && !st.Shebang() {
		log.Warn("Redis does not take #!lua scripts (Redis 7+ needed): a full Redis may refuse batches it should drain")
	}
	if err := st.Check(ctx); err != nil {
		log.Warn("store check failed; /readyz will say so", "error", scrub(err))
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	channel, err := newChannel(cfg.deliver, allow)
	if err != nil {
		return nil, err
	}
	driver, err := newDriver(cfg.deliver, st, channel, sign.signer, audience, metrics, log)
	if err != nil {
		return nil, err
	}
	apiMetrics, err := httpapi.NewMetrics(metrics)
	if err != nil {
		return nil, err
	}
	var backlog *delivery.BacklogSampler
	if cfg.backlogEvery > 0 {
		backlog, err = delivery.NewBacklogSampler(delivery.BacklogConfig{
			Store: st, Registerer: metrics, Clock: clockSystem, Every: cfg.backlogEvery, Logger: log,
		})
		if err != nil {
			return nil, err
		}
	}
	handler, err := httpapi.New(httpapi.Config{
		Appender:       &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: clockSystem}},
		Admin:          &outbox.Admin{Store: st, Clock: clockSystem},
		Auth:           auth,
		Wake:           driver.WakePartition,
		CheckURL:       channel.CheckURL,
		Ready:          ready(st),
		Keys:           hooks.KeysHandler(sign.keys),
		MetricsHandler: promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}),
		Metrics:        apiMetrics,
		Clock:          clockSystem,
		Logger:         log,
	})
	if err != nil {
		return nil, err
	}
	a := &app{handler: handler, metrics: apiMetrics, driver: driver, backlog: backlog, store: st, audience: audience, close: closeRedis}
	if devSecret != nil {
		p := httpapi.Principal{Subject: "dev-admin", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}
		if a.devToken, err = httpapi.MintHS256(devSecret, audience, cfg.auth.issuer, p, devTokenTTL, time.Now()); err != nil {
			return nil, err
		}
	}
	ok = true
	return a, nil
}

func serve(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := build(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.close()

	tcp, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv, ln, err := a.server(tcp, cfg.maxConns)
	if err != nil {
		_ = tcp.Close()
		return err
	}
	log.Info("relay listening", "addr", ln.Addr().String(), "buckets", a.store.Buckets(), "audience", a.audience)
	if a.devToken != "" {
		// Printed, never logged: the one place this secret appears.
		fmt.Fprintf(stdout, "\nDevelopment admin token (valid %s; tokens signed with a key made at this start):\n\n  export RELAY_TOKEN=%s\n\n", devTokenTTL, a.devToken)
	}
	if err := a.driver.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	if a.backlog != nil {
		if err := a.backlog.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		defer a.backlog.Stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	// A second signal kills at once.
	stop()
	// Stop taking requests and launching fires at once; let requests and
	// fires in flight finish, each within its own deadline. A fire lasts up
	// to about 15 s; one still running at its deadline writes nothing, and
	// its stream resumes once its lease expires.
	stopped := make(chan error, 1)
	go func() {
		drainCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stopped <- a.driver.Stop(drainCtx)
	}()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		serveErr = errors.Join(serveErr, err)
	}
	if err := <-stopped; err != nil {
		log.Warn("delivery stopped at its deadline; unfinished fires resume after their lease", "error", err)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	log.Info("relay stopped cleanly")
	return nil
}

// server is the HTTP server of the API on tcp, at most maxConns
// connections open at once.
func (a *app) server(tcp net.Listener, maxConns int) (*http.Server, *httpapi.Listener, error) {
	ln, err := httpapi.NewListener(tcp, httpapi.ListenerConfig{MaxConnections: maxConns, Metrics: a.metrics})
	if err != nil {
		return nil, nil, err
	}
	return httpapi.NewServer(a.handler, ln), ln, nil
}

// checker is what readiness needs of the store.
type checker interface {
	Check(ctx context.Context) error
}

// ready is the API's readiness check: the store answers and will not evict
// rows.
func ready(st checker) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := st.Check(ctx); err != nil {
			return errors.New(readiness(err))
		}
		return nil
	}
}

// readiness is what /readyz tells: the eviction warning in full, any other
// cause without internals.
func readiness(err error) string {
	switch {
	case errors.Is(err, redisstore.ErrEvictingPolicy):
		return "Redis may evict keys (set maxmemory-policy noeviction)"
	case errors.Is(err, redisstore.ErrScripts):
		return "Redis does not hold relay's scripts and would not load them"
	}
	return "Redis is unreachable"
}

// connect opens a client for a Redis URL, a list of Cluster seeds, or an
// embedded miniredis when addr is empty. Its errors hold no piece of the
// password in addr.
func connect(addr string, log *slog.Logger) (redis.UniversalClient, func(), error) {
	if addr == "" {
		m, err := miniredis.Run()
		if err != nil {
			return nil, nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		log.Warn("NO REDIS CONFIGURED: using an embedded in-memory miniredis; everything is lost when relay stops. Set RELAY_REDIS_URL for real use.")
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		return c, func() { c.Close(); m.Close() }, nil
	}
	c, err := open(addr)
	if err != nil {
		return nil, nil, newScrubber(addr).scrub(err)
	}
	return c, func() { c.Close() }, nil
}

func open(addr string) (redis.UniversalClient, error) {
	if missingSlashes(addr) {
		return nil, errors.New(`the Redis URL has no "//" after its scheme: write redis://[user:pass@]host:port/db, and rediss:// or unix:// alike`)
	}
	if err := checkCredentials(credentials(addr)); err != nil {
		return nil, err
	}
	switch {
	case strings.Contains(addr, "://") && strings.Contains(addr, "addr="):
		// redis://user:pass@host1:7001?addr=host2:7002&addr=host3:7003
		opts, err := redis.ParseClusterURL(addr)
		if err != nil {
			return nil, fmt.Errorf("redis cluster URL: %w", redactURLError(err))
		}
		return redis.NewClusterClient(opts), nil
	case !strings.Contains(addr, "://") && strings.Contains(addr, ","):
		seeds := strings.Split(addr, ",")
		for i := range seeds {
			seeds[i] = strings.TrimSpace(seeds[i])
			if strings.Contains(seeds[i], "@") {
				return nil, errors.New("a list of Redis Cluster seeds takes host:port only; credentials go in a URL: redis://user:pass@host1:port?addr=host2:port")
			}
		}
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds}), nil
	default:
		opts, err := redis.ParseURL(addr)
		if err != nil {
			return nil, fmt.Errorf("redis URL: %w", redactURLError(err))
		}
		return redis.NewClient(opts), nil
	}
}

// clockSystem is the one clock of the process: the outbox, the delivery
// driver and its handler read it. It is the wall clock, made never to go
// backward, so that a clock stepped back does not stall rows dated by it.
var clockSystem = clock.NewSteady(clock.System{})
