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
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/httpapi"
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
		return serve(ctx, args, log, stdout)
	case "token":
		return token(args, stdout)
	case "keygen":
		return keygen(args, stdout)
	case "receive":
		return receive(ctx, args, stdout)
	case "bench":
		return bench(ctx, args, log, stdout)
	}
	// The word is not quoted: "relay redis://:pass@host" puts a password
	// here.
	return errors.New("unknown command (known: serve, token, keygen, receive, bench; with none, or only flags, relay serves)")
}

// noArgs refuses what is left on the command line after the flags of fs,
// without quoting it: a value split at a space, a password holding one,
// lands there, as does a Redis URL given without -redis.
func noArgs(fs *flag.FlagSet, args []string) error {
	n := fs.NArg()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s takes flags only, but %d unexpected argument(s) follow them, from argument %d on: give each flag as -name value before anything else, and quote a value that holds a space", fs.Name(), n, len(args)-n+1)
}

type config struct {
	redis   string
	listen  string
	prefix  string
	buckets int
	// maxConns bounds the API connections open at once.
	maxConns int
	// backlogEvery is how often the backlog gauges are sampled; 0 never.
	backlogEvery time.Duration
	signing      signingConfig
	deliver      deliveryConfig
	auth         authConfig
}

func parse(args []string) (config, error) {
	fs := flag.NewFlagSet("relay serve", flag.ContinueOnError)
	var c config
	redisFlag(fs, &c.redis,
		"Redis URL (redis[s]://[user:pass@]host:port/db); a Redis Cluster as comma-separated host:port seeds or redis://[user:pass@]host:port?addr=host2:port2&addr=...; empty starts an embedded in-memory miniredis (env RELAY_REDIS_URL)")
	fs.StringVar(&c.listen, "listen", envOr("RELAY_LISTEN", "127.0.0.1:8080"), "HTTP listen address (env RELAY_LISTEN)")
	fs.StringVar(&c.prefix, "prefix", envOr("RELAY_REDIS_PREFIX", redisstore.DefaultPrefix), "prefix of every Redis key (env RELAY_REDIS_PREFIX)")
	buckets := redisstore.DefaultBuckets
	var bucketsErr error
	if v := os.Getenv("RELAY_BUCKETS"); v != "" {
		if buckets, bucketsErr = strconv.Atoi(v); bucketsErr != nil {
			bucketsErr = fmt.Errorf("RELAY_BUCKETS=%q is not a whole number", v)
		}
	}
	fs.IntVar(&c.buckets, "buckets", buckets, "due-index buckets; fixed when a keyspace is first used (env RELAY_BUCKETS)")
	maxConns, maxConnsErr := envInt("RELAY_MAX_CONNECTIONS", httpapi.DefaultMaxConnections)
	fs.IntVar(&c.maxConns, "max-connections", maxConns, "API connections open at once; at the limit a new one closes the one idle longest, or with none idle is answered 503 and closed (env RELAY_MAX_CONNECTIONS)")
	backlogEvery, backlogErr := envDuration("RELAY_BACKLOG_SAMPLE_EVERY", delivery.DefaultBacklogEvery)
	fs.DurationVar(&c.backlogEvery, "backlog-sample-every", backlogEvery, "how often the backlog gauges are sampled from Redis; 0 turns them off (env RELAY_BACKLOG_SAMPLE_EVERY)")
	c.signing.flags(fs)
	c.deliver.flags(fs)
	c.auth.flags(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.deliver.envErr != nil && !flagSet(fs, "delivery-concurrency") {
		return c, c.deliver.envErr
	}
	if c.deliver.slowEnvErr != nil && !flagSet(fs, "delivery-slow-concurrency") {
		return c, c.deliver.slowEnvErr
	}
	if bucketsErr != nil && !flagSet(fs, "buckets") {
		return c, bucketsErr
	}
	if maxConnsErr != nil && !flagSet(fs, "max-connections") {
		return c, maxConnsErr
	}
	if backlogErr != nil && !flagSet(fs, "backlog-sample-every") {
		return c, backlogErr
	}
	if c.backlogEvery < 0 {
		return c, fmt.Errorf("backlog sample interval %v must not be negative", c.backlogEvery)
	}
	if c.maxConns < 1 {
		return c, fmt.Errorf("max connections %d must be at least 1", c.maxConns)
	}
	if err := noArgs(fs, args); err != nil {
		return c, err
	}
	return c, nil
}

// redisFlag defines -redis, taken from RELAY_REDIS_URL unless given. A Func
// flag has no default to print, so the usage text never shows the URL and
// its password.
func redisFlag(fs *flag.FlagSet, dst *string, usage string) {
	*dst = os.Getenv("RELAY_REDIS_URL")
	fs.Func("redis", usage, func(v string) error { *dst = v; return nil })
}

// flagSet reports whether the command line set the flag.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// envInt is the whole number in the variable name, or fallback when it is
// unset.
func envInt(name string, fallback int) (int, error) {
	v := os.Getenv(name)
	if v == "" {
		return fallback, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return fallback, fmt.Errorf("%s=%q is not a whole number", name, v)
	}
	return n, nil
}

// envDuration is the duration in the variable name, or fallback when it is
// unset.
func envDuration(name string, fallback time.Duration) (time.Duration, error) {
	v := os.Getenv(name)
	if v == "" {
		return fallback, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return fallback, fmt.Errorf("%s=%q is not a duration such as 15s", name, v)
	}
	return d, nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
