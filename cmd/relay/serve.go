package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/console"
	"github.com/hookrelay/relay/internal/envflag"
)

// parse reads relay serve's flags and RELAY_* variables; internal/app
// checks what they hold.
func parse(args []string) (app.Config, error) {
	f := envflag.New("relay serve")
	c := app.Defaults()
	f.HiddenFromEnv(&c.RedisURL, "redis", "RELAY_REDIS_URL",
		"Redis URL (redis[s]://[user:pass@]host:port/db); behind Redis Sentinel redis[s]+sentinel://[user:pass@]sentinel1:port,sentinel2:port/mastername[/db]; a Redis Cluster as comma-separated host:port seeds or redis://[user:pass@]host:port?addr=host2:port2&addr=...; empty starts an embedded in-memory miniredis (env RELAY_REDIS_URL)")
	f.StringFromEnv(&c.Durability, "durability", "RELAY_DURABILITY", c.Durability,
		"when an ingest is answered 202, and an operator's change answered: memory (once the Redis master ran it; a failover before replication loses it) or replicas=N (once N replicas also acknowledged it, by WAIT; fewer within the timeout answers 503, and the producer's retry answers duplicate) (env RELAY_DURABILITY)")
	f.DurationFromEnv(&c.DurabilityTimeout, "durability-timeout", "RELAY_DURABILITY_TIMEOUT", c.DurabilityTimeout,
		"how long an ingest or an operator's change waits for replicas with --durability replicas=N, at most 2s (env RELAY_DURABILITY_TIMEOUT)")
	f.StringFromEnv(&c.Listen, "listen", "RELAY_LISTEN", c.Listen, "HTTP listen address (env RELAY_LISTEN)")
	f.StringFromEnv(&c.Prefix, "prefix", "RELAY_REDIS_PREFIX", c.Prefix, "prefix of every Redis key (env RELAY_REDIS_PREFIX)")
	f.IntFromEnv(&c.Buckets, "buckets", "RELAY_BUCKETS", c.Buckets, "due-index buckets; fixed when a keyspace is first used (env RELAY_BUCKETS)")
	f.IntFromEnv(&c.MaxConnections, "max-connections", "RELAY_MAX_CONNECTIONS", c.MaxConnections, "API connections open at once; at the limit a new one closes one silent for a second or the one idle longest, or with neither is answered 503 and closed (env RELAY_MAX_CONNECTIONS)")
	f.IntFromEnv(&c.MaxNamespaces, "max-namespaces", "RELAY_MAX_NAMESPACES", c.MaxNamespaces, "namespaces relay holds (those with an endpoint); at the limit the first endpoint of another is refused with 422 too-many-namespaces (env RELAY_MAX_NAMESPACES)")
	f.DurationFromEnv(&c.BacklogEvery, "backlog-sample-every", "RELAY_BACKLOG_SAMPLE_EVERY", c.BacklogEvery, "how often the backlog gauges are sampled from Redis; 0 turns them off (env RELAY_BACKLOG_SAMPLE_EVERY)")
	f.StringFromEnv(&c.LogLevel, "log-level", "RELAY_LOG_LEVEL", "info",
		"lowest level logged: debug, info, warn or error; info logs a line per API request, warn leaves those out; the start-up line is always logged (env RELAY_LOG_LEVEL)")
	f.DurationFromEnv(&c.Retention, "retention", "RELAY_RETENTION", c.Retention,
		"how long a delivered outcome's history (its body, state per endpoint and attempts) is kept for lookup, resend and recovery; 0 deletes it once delivered (env RELAY_RETENTION)")
	signingFlags(f, &c.Signing)
	deliveryFlags(f, &c.Delivery)
	authFlags(f, &c.Auth)
	if err := f.Parse(args); err != nil {
		return c, err
	}
	c.Auth.SecretOnCommandLine = f.Given("jwt-secret")
	if _, err := app.ParseLogLevel(c.LogLevel); err != nil {
		return c, fmt.Errorf("--log-level/RELAY_LOG_LEVEL: %w", err)
	}
	if _, err := app.ParseDurability(c.Durability, c.DurabilityTimeout); err != nil {
		return c, fmt.Errorf("--durability/RELAY_DURABILITY, --durability-timeout/RELAY_DURABILITY_TIMEOUT: %w", err)
	}
	return c, nil
}

func signingFlags(f *envflag.Set, c *app.Signing) {
	f.StringFromEnv(&c.KeyFile, "hook-key", "RELAY_HOOK_KEY_FILE", c.KeyFile,
		"PEM Ed25519 private key (relay keygen writes one) signing mkit-hook v2 webhooks of every namespace; required with a real Redis (env RELAY_HOOK_KEY_FILE)")
	f.StringFromEnv(&c.KeyID, "hook-key-id", "RELAY_HOOK_KEY_ID", c.KeyID,
		"key id of the signing key, 1-64 of [A-Za-z0-9._-] (env RELAY_HOOK_KEY_ID)")
	f.StringFromEnv(&c.PublishedKeys, "published-keys", "RELAY_PUBLISHED_KEYS", c.PublishedKeys,
		"JSON key list of other public keys to publish beside the signing key: the next one before a rotation, the previous one after it (env RELAY_PUBLISHED_KEYS)")
}

func deliveryFlags(f *envflag.Set, c *app.Delivery) {
	f.StringFromEnv(&c.PublicURL, "public-url", "RELAY_PUBLIC_URL", c.PublicURL,
		"relay's canonical origin, e.g. https://relay.example.com: every webhook's data.audience (env RELAY_PUBLIC_URL; default http://<listen> without a Redis)")
	f.StringFromEnv(&c.AllowCIDRs, "allow-cidrs", "RELAY_ALLOW_CIDRS", c.AllowCIDRs,
		"comma-separated CIDRs webhooks may reach despite the SSRF guard, e.g. 10.1.2.3/32 (env RELAY_ALLOW_CIDRS; default 127.0.0.1/32,::1/128 without a Redis)")
	f.IntFromEnv(&c.Concurrency, "delivery-concurrency", "RELAY_DELIVERY_CONCURRENCY", c.Concurrency,
		"streams delivered at once by this process (env RELAY_DELIVERY_CONCURRENCY)")
	f.IntFromEnv(&c.SlowConcurrency, "delivery-slow-concurrency", "RELAY_DELIVERY_SLOW_CONCURRENCY", c.SlowConcurrency,
		"fires this process keeps waiting on slow or failing endpoints at once, beside the others (env RELAY_DELIVERY_SLOW_CONCURRENCY)")
	f.DurationFromEnv(&c.FullPollEvery, "delivery-full-poll-every", "RELAY_DELIVERY_FULL_POLL_EVERY", c.FullPollEvery,
		"how often this process reads every due index for timers other processes wrote (env RELAY_DELIVERY_FULL_POLL_EVERY)")
	f.DurationFromEnv(&c.Linger, "delivery-linger", "RELAY_DELIVERY_LINGER", c.Linger,
		"how long a fire that delivered its stream's every row waits for the next outcome ingested by this process, to send it under the same lease; at most 1s, 0 never waits (env RELAY_DELIVERY_LINGER)")
	f.DurationFromEnv(&c.DisableAfter, "disable-after", "RELAY_DISABLE_AFTER", c.DisableAfter,
		"disable an endpoint (reason failing, rows kept) that has delivered nothing this long while its calls failed, e.g. 120h; 0 never does (env RELAY_DISABLE_AFTER)")
}

func authFlags(f *envflag.Set, c *app.Auth) {
	f.HiddenFromEnv(&c.Secret, "jwt-secret", "RELAY_JWT_SECRET",
		"HS256 secret, at least 32 bytes, that API tokens are signed with (env RELAY_JWT_SECRET; prefer the env: flags show in the process list)")
	f.StringFromEnv(&c.PublicKeys, "jwt-public-keys", "RELAY_JWT_PUBLIC_KEYS", c.PublicKeys,
		"Ed25519 public keys that API tokens (EdDSA) are signed with: comma-separated files of PEM \"PUBLIC KEY\" blocks, each entry path or kid=path; a kid=path file holds one key, which then verifies only tokens whose kid header names it (env RELAY_JWT_PUBLIC_KEYS)")
	f.StringFromEnv(&c.Issuer, "jwt-issuer", "RELAY_JWT_ISSUER", c.Issuer,
		"iss every API token must carry; unchecked when empty (env RELAY_JWT_ISSUER)")
	f.StringFromEnv(&c.Audience, "jwt-audience", "RELAY_JWT_AUDIENCE", c.Audience,
		"aud every API token must contain (env RELAY_JWT_AUDIENCE; default the public URL)")
	c.Leeway = envflag.FromEnv(f, "jwt-leeway", "RELAY_JWT_LEEWAY", c.Leeway, time.ParseDuration, "a duration such as 5s")
	f.Func("jwt-leeway",
		"clock skew tolerated on token times, at most 30s (env RELAY_JWT_LEEWAY; default 5s)",
		func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return errors.New("not a duration such as 5s")
			}
			c.Leeway = d
			return nil
		})
}

func serve(ctx context.Context, args []string, log *slog.Logger, stdout io.Writer) error {
	cfg, err := parse(args)
	if err != nil {
		return err
	}
	// The start-up line below goes to the unfiltered log: it says where
	// relay listens and how it is set up, whatever the level.
	level, _ := app.ParseLogLevel(cfg.LogLevel)
	cfg.Logger = slog.New(app.AtLeast(log.Handler(), level))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A second signal kills at once.
	context.AfterFunc(ctx, stop)
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()

	tcp, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv, ln, err := a.Server(tcp)
	if err != nil {
		_ = tcp.Close()
		return err
	}
	build := buildinfo.Read()
	log.Info("relay listening", "addr", ln.Addr().String(), "buckets", a.Buckets(), "durability", cfg.Durability, "audience", a.Audience(),
		"gc_percent", gcPercent(), "memory_limit", memoryLimit(),
		"version", build.Version, "commit", build.Commit, "go_version", build.GoVersion)
	if tok := a.DevToken(); tok != "" {
		// The console where this process answers: the listen address may
		// have asked for any port.
		origin := a.Audience()
		if cfg.Delivery.PublicURL == "" {
			origin = "http://" + ln.Addr().String()
		}
		// Printed, never logged: the one place this secret appears.
		fmt.Fprintf(stdout, "\nDevelopment admin token (valid %s; tokens signed with a key made at this start):\n\n  export RELAY_TOKEN=%s\n\nConsole (the token rides in the fragment, which the browser keeps to itself):\n\n  %s\n\n",
			app.DevTokenTTL, tok, console.Link(origin, tok))
	}
	return a.Run(ctx, srv, ln)
}

// gcPercent is the collector's percent as the process runs with it
// (gctarget, or GOGC); the runtime has no call that only reads it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// memoryLimit is the soft memory limit in bytes, "none" when there is none.
func memoryLimit() string {
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		return strconv.FormatInt(l, 10)
	}
	return "none"
}
