// Command relay runs the webhook relay. With no Redis configured it starts
// an embedded, in-memory miniredis for development.
package main

import (
	"context"
	"errors"
	"flag"
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

	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/redisstore"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), os.Args[1:], log, os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "relay:", err)
		}
		os.Exit(2)
	}
}

// run dispatches a subcommand; with none, or only flags, relay serves.
func run(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serve(ctx, args, log)
	case "keygen":
		return keygen(args, stdout)
	case "receive":
		return receive(ctx, args, stdout)
	}
	return fmt.Errorf("unknown command %q (known: serve, keygen, receive)", cmd)
}

type config struct {
	redis   string
	listen  string
	prefix  string
	buckets int
	signing signingConfig
	deliver deliveryConfig
}

func parse(args []string) (config, error) {
	fs := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	var c config
	fs.StringVar(&c.redis, "redis", os.Getenv("RELAY_REDIS_URL"),
		"Redis URL (redis[s]://[user:pass@]host:port/db); a Redis Cluster as comma-separated host:port seeds or redis://[user:pass@]host:port?addr=host2:port2&addr=...; empty starts an embedded in-memory miniredis (env RELAY_REDIS_URL)")
	fs.StringVar(&c.listen, "listen", envOr("RELAY_LISTEN", "127.0.0.1:8080"), "HTTP listen address (env RELAY_LISTEN)")
	fs.StringVar(&c.prefix, "prefix", envOr("RELAY_REDIS_PREFIX", redisstore.DefaultPrefix), "prefix of every Redis key (env RELAY_REDIS_PREFIX)")
	fs.IntVar(&c.buckets, "buckets", redisstore.DefaultBuckets, "due-index buckets; fixed when a keyspace is first used")
	c.signing.flags(fs)
	c.deliver.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.deliver.envErr != nil && !flagSet(fs, "delivery-concurrency") {
		return c, c.deliver.envErr
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, nil
}

// flagSet reports whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func serve(ctx context.Context, args []string, log *slog.Logger) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	dev := cfg.redis == ""
	sign, err := cfg.signing.load(dev, log)
	if err != nil {
		return err
	}
	audience, err := cfg.deliver.audience(dev, cfg.listen)
	if err != nil {
		return err
	}
	allow, err := cfg.deliver.allowList(dev, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	client, closeRedis, err := connect(cfg.redis, log)
	if err != nil {
		return err
	}
	defer closeRedis()
	st, err := redisstore.New(ctx, client, redisstore.Options{Prefix: cfg.prefix, Buckets: cfg.buckets})
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	if cfg.redis != "" && !st.Shebang() {
		log.Warn("Redis does not take #!lua scripts (Redis 7+ needed): a full Redis may refuse batches it should drain")
	}
	if err := st.Check(ctx); err != nil {
		log.Warn("store check failed; /readyz will say so", "error", err)
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	driver, err := newDriver(cfg.deliver, st, sign.signer, audience, allow, metrics, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mux := routes(st, sign.keys)
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("relay listening", "addr", ln.Addr().String(), "buckets", st.Buckets(), "audience", audience)
	if err := driver.Start(context.WithoutCancel(ctx)); err != nil {
		return err
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
		stopped <- driver.Stop(drainCtx)
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

// checker is what the health routes need of the store.
type checker interface {
	Check(ctx context.Context) error
}

// routes serves /healthz (the process answers), /readyz (the store is
// reachable and will not evict rows) and the mkit-hook public key list.
func routes(st checker, keys hooks.KeyList) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(hooks.KeysPath, hooks.KeysHandler(keys))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := st.Check(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready:", readiness(err))
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// readiness is what /readyz tells: the eviction warning in full, any other
// cause without internals.
func readiness(err error) string {
	if errors.Is(err, redisstore.ErrEvictingPolicy) {
		return "Redis may evict keys (set maxmemory-policy noeviction)"
	}
	return "Redis is unreachable"
}

// connect opens a client for a Redis URL, a list of Cluster seeds, or an
// embedded miniredis when addr is empty.
func connect(addr string, log *slog.Logger) (redis.UniversalClient, func(), error) {
	switch {
	case addr == "":
		m, err := miniredis.Run()
		if err != nil {
			return nil, nil, fmt.Errorf("start embedded miniredis: %w", err)
		}
		log.Warn("NO REDIS CONFIGURED: using an embedded in-memory miniredis; everything is lost when relay stops. Set RELAY_REDIS_URL for real use.")
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		return c, func() { c.Close(); m.Close() }, nil
	case strings.Contains(addr, "addr="):
		// redis://user:pass@host1:7001?addr=host2:7002&addr=host3:7003
		opts, err := redis.ParseClusterURL(addr)
		if err != nil {
			return nil, nil, fmt.Errorf("redis cluster URL: %w", err)
		}
		c := redis.NewClusterClient(opts)
		return c, func() { c.Close() }, nil
	case strings.Contains(addr, ","):
		seeds := strings.Split(addr, ",")
		for i := range seeds {
			seeds[i] = strings.TrimSpace(seeds[i])
		}
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
		return c, func() { c.Close() }, nil
	default:
		opts, err := redis.ParseURL(addr)
		if err != nil {
			return nil, nil, fmt.Errorf("redis URL: %w", err)
		}
		c := redis.NewClient(opts)
		return c, func() { c.Close() }, nil
	}
}
