package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/signing"
)

// benchRelay is a relay built in this process, as serve builds it.
type benchRelay struct {
	url                 string
	token               string
	kind                string
	prefix              string
	deliveryConcurrency int
	app                 *app.App
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
	key, err := signing.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	pem, err := signing.EncodeKeyPEM(key)
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
	cfg := app.Config{
		RedisURL:       c.redis,
		Listen:         addr,
		Prefix:         r.prefix,
		Buckets:        redisstore.DefaultBuckets,
		MaxConnections: httpapi.DefaultMaxConnections,
		MaxNamespaces:  outbox.DefaultMaxNamespaces,
		MaxEndpoints:   benchMaxEndpoints(c.endpoints),
		Signing:        app.Signing{KeyFile: keyFile, KeyID: "bench"},
		Delivery:       app.Delivery{PublicURL: r.url, AllowCIDRs: "127.0.0.1/32", Concurrency: delivery.DefaultConcurrency, Linger: delivery.DefaultLinger},
		Auth:           app.Auth{Secret: string(secret), Leeway: app.DefaultLeeway},
		// What a relay keeps by default: the delivered history's writes
		// are part of the cost measured.
		Retention: outbox.DefaultRetention,
		// Relay's info lines (each endpoint registered) would bury the
		// table.
		Logger: slog.New(app.AtLeast(log.Handler(), slog.LevelWarn)),
	}
	r.deliveryConcurrency = cfg.Delivery.Concurrency
	if c.redis != "" {
		client, closeRedis, err := app.Connect(c.redis, log)
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
	var a *app.App
	labeled(ctx, "relay", func(ctx context.Context) { a, err = app.New(ctx, cfg) })
	if err != nil {
		return nil, err
	}
	r.app = a
	r.token, err = httpapi.MintHS256(secret, a.Audience(), "", httpapi.Principal{Subject: "relay-bench", Scopes: []httpapi.Scope{httpapi.ScopeAdmin}}, 24*time.Hour, time.Now())
	if err != nil {
		a.Close()
		return nil, err
	}
	srv, served, err := a.Server(ln)
	if err != nil {
		a.Close()
		return nil, err
	}
	r.srv = srv
	labeled(ctx, "relay", func(context.Context) {
		go func() { r.served <- r.srv.Serve(served) }()
	})
	return r, nil
}

// benchMaxEndpoints is the endpoint limit of the in-process relay: the
// most -endpoints asks for, up to outbox.HardMaxEndpoints, which no
// setting passes; 0, relay's default, when that is enough. A count past
// the hard limit is refused by relay, and its rows say so.
func benchMaxEndpoints(counts []int) int {
	most := 0
	for _, e := range counts {
		most = max(most, e)
	}
	if most <= outbox.DefaultMaxEndpoints {
		return 0
	}
	return min(most, outbox.HardMaxEndpoints)
}

// startDelivery starts the driver once.
func (r *benchRelay) startDelivery(ctx context.Context) error {
	if r.started {
		return nil
	}
	r.started = true
	var err error
	labeled(ctx, "relay", func(ctx context.Context) { err = r.app.Start(ctx) })
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
		if err := r.app.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop delivery: %w", err))
		}
	}
	r.app.Close()
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
