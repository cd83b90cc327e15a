package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/hooks"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/timers"
)

// deliveryConfig is what the delivery driver is built from.
type deliveryConfig struct {
	publicURL   string
	allow       string
	concurrency int
	// slowConcurrency is the slow lane's size; zero is the default.
	slowConcurrency int
	// envErr and slowEnvErr are malformed environment variables, reported
	// after parsing unless their flag was given.
	envErr, slowEnvErr error
}

func (c *deliveryConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.publicURL, "public-url", os.Getenv("RELAY_PUBLIC_URL"),
		"relay's canonical origin, e.g. https://relay.example.com: every webhook's data.audience (env RELAY_PUBLIC_URL; default http://<listen> without a Redis)")
	fs.StringVar(&c.allow, "allow-cidrs", os.Getenv("RELAY_ALLOW_CIDRS"),
		"comma-separated CIDRs webhooks may reach despite the SSRF guard, e.g. 10.1.2.3/32 (env RELAY_ALLOW_CIDRS; default 127.0.0.1/32,::1/128 without a Redis)")
	concurrency := delivery.DefaultConcurrency
	if v := os.Getenv("RELAY_DELIVERY_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			c.envErr = fmt.Errorf("RELAY_DELIVERY_CONCURRENCY=%q is not a whole number", v)
		}
		concurrency = n
	}
	fs.IntVar(&c.concurrency, "delivery-concurrency", concurrency,
		"streams delivered at once by this process (env RELAY_DELIVERY_CONCURRENCY)")
	slow := delivery.DefaultSlowConcurrency
	if v := os.Getenv("RELAY_DELIVERY_SLOW_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			c.slowEnvErr = fmt.Errorf("RELAY_DELIVERY_SLOW_CONCURRENCY=%q is not a whole number", v)
		}
		slow = n
	}
	fs.IntVar(&c.slowConcurrency, "delivery-slow-concurrency", slow,
		"fires this process keeps waiting on slow or failing endpoints at once, beside the others (env RELAY_DELIVERY_SLOW_CONCURRENCY)")
}

// slow is the slow lane's size.
func (c *deliveryConfig) slow() int {
	if c.slowConcurrency == 0 {
		return delivery.DefaultSlowConcurrency
	}
	return c.slowConcurrency
}

// audience is the public origin: configured, or in development the listen
// address.
func (c *deliveryConfig) audience(dev bool, listen string) (string, error) {
	raw := c.publicURL
	if raw == "" {
		if !dev {
			return "", fmt.Errorf("RELAY_PUBLIC_URL (--public-url) is required with a real Redis: it is every webhook's audience")
		}
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return "", fmt.Errorf("listen address %q: %w", listen, err)
		}
		if a, err := netip.ParseAddr(host); host == "" || (err == nil && a.IsUnspecified()) {
			// Listening on every address: the local name reaches it.
			host = "localhost"
		}
		raw = "http://" + net.JoinHostPort(host, port)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("public URL %q must be an origin such as https://relay.example.com", raw)
	}
	// The canonical spelling receivers compare data.audience with; the
	// spellings relay refuses to sign for are refused here too.
	origin, err := hookverify.Origin(raw)
	if err != nil {
		return "", fmt.Errorf("public URL must be an origin such as https://relay.example.com: %w", err)
	}
	return origin, nil
}

// allowList parses the SSRF allow-list; in development it lets loopback
// receivers through.
func (c *deliveryConfig) allowList(dev bool, log *slog.Logger) ([]netip.Prefix, error) {
	raw := c.allow
	if raw == "" && dev {
		raw = "127.0.0.1/32,::1/128"
		log.Warn("development mode: webhooks may reach loopback addresses")
	}
	var out []netip.Prefix
	for _, f := range strings.Split(raw, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("allow-list entry %q is not a CIDR", f)
		}
		out = append(out, p)
	}
	return out, nil
}

// newChannel is the SSRF-guarded HTTP channel webhooks go out on; the API
// checks endpoint URLs against the same rules at registration.
func newChannel(c deliveryConfig, allow []netip.Prefix) (*hooks.Channel, error) {
	if c.concurrency < 1 {
		return nil, fmt.Errorf("delivery concurrency %d must be at least 1", c.concurrency)
	}
	if c.slowConcurrency < 0 {
		return nil, fmt.Errorf("delivery slow concurrency %d must be at least 1", c.slowConcurrency)
	}
	// Both lanes' calls: those waiting on a slow host must not take the
	// connections of the fires beside them.
	return hooks.NewChannel(hooks.ChannelOptions{Allow: allow, MaxConns: (c.concurrency + c.slow()) * outbox.MaxMaxInFlight})
}

// newDriver builds the delivery driver and the timers it fires: outcome
// delivery and the idempotency sweep.
func newDriver(c deliveryConfig, st *redisstore.Store, ch *hooks.Channel, signer *hooks.MkitSigner, audience string, reg prometheus.Registerer, log *slog.Logger) (*delivery.Driver, error) {
	m, err := delivery.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	handler := &delivery.Handler{
		Sink:    &delivery.Webhooks{Sender: &hooks.Sender{Channel: ch, Mkit: signer}, Audience: audience},
		Logger:  log,
		Metrics: m,
		Clock:   clockSystem,
	}
	timersReg, err := timers.NewRegistry(handler, &outbox.SeenSweeper{Logger: log})
	if err != nil {
		return nil, err
	}
	return delivery.New(delivery.Config{Store: st, Registry: timersReg, Clock: clockSystem, Concurrency: c.concurrency,
		SlowConcurrency: c.slow(), Logger: log, Metrics: m})
}
