package app

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/hookverify"
	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/gopool"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/signing"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// slow is the slow lane's size.
func (c Delivery) slow() int {
	if c.SlowConcurrency == 0 {
		return delivery.DefaultSlowConcurrency
	}
	return c.SlowConcurrency
}

// Audience is the public origin, every webhook's data.audience and the
// default aud of API tokens: configured, or in development the listen
// address.
func (c Delivery) Audience(dev bool, listen string) (string, error) {
	raw := c.PublicURL
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
func (c Delivery) allowList(dev bool, log *slog.Logger) ([]netip.Prefix, error) {
	raw := c.AllowCIDRs
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

// MaxDisableAfter bounds Delivery.DisableAfter: a year of failure is
// enough to call an endpoint dead.
const MaxDisableAfter = 365 * 24 * time.Hour

// newChannel is the SSRF-guarded HTTP channel webhooks go out on; the API
// checks endpoint URLs against the same rules at registration.
func newChannel(c Delivery, allow []netip.Prefix) (*outbound.Channel, error) {
	if c.Concurrency < 1 {
		return nil, fmt.Errorf("delivery concurrency %d must be at least 1", c.Concurrency)
	}
	if c.DisableAfter != 0 && (c.DisableAfter < time.Second || c.DisableAfter > MaxDisableAfter) {
		return nil, fmt.Errorf("disable-after %v must be 0 (never) or between 1s and %v", c.DisableAfter, MaxDisableAfter)
	}
	if c.Linger < 0 || c.Linger > delivery.MaxLinger {
		return nil, fmt.Errorf("delivery linger %v must be between 0 (never) and %v", c.Linger, delivery.MaxLinger)
	}
	if c.SlowConcurrency < 0 {
		return nil, fmt.Errorf("delivery slow concurrency %d must be at least 1", c.SlowConcurrency)
	}
	// Both lanes' calls: those waiting on a slow host must not take the
	// connections of the fires beside them.
	return outbound.NewChannel(outbound.ChannelOptions{Allow: allow, MaxConns: (c.Concurrency + c.slow()) * schema.MaxMaxInFlight})
}

// newDriver builds the delivery driver and the timers it fires: outcome
// delivery, the idempotency sweep and the log sweep. A nil tp traces
// nothing.
func newDriver(c Delivery, retention time.Duration, st *redisstore.Store, ch *outbound.Channel, signer *signing.MkitSigner, audience string, reg prometheus.Registerer, clk clock.Clock, log *slog.Logger, tp trace.TracerProvider, goroutines *gopool.Pool, committed func(store.Partition, []store.Write)) (*delivery.Driver, error) {
	m, err := delivery.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	arrivals := delivery.NewArrivals(max(c.Concurrency/4, 1))
	handler := &delivery.Handler{
		Linger:       c.Linger,
		Arrivals:     arrivals,
		Sink:         &delivery.Webhooks{Sender: &outbound.Sender{Channel: ch, Mkit: signer}, Audience: audience},
		Logger:       log,
		Metrics:      m,
		Clock:        clk,
		Retention:    retention,
		DisableAfter: c.DisableAfter,
		// Operator events go through the outbox, as any outcome does.
		Events: &outbox.Appender{Store: st, Clock: clk},
	}
	if tp != nil {
		handler.Tracer = tp.Tracer(delivery.TracerName)
	}
	timersReg, err := timers.NewHandlers(handler, &outbox.SeenSweeper{Logger: log}, &outbox.LogSweeper{Retention: retention, Logger: log},
		&outbox.RecoveryRunner{Clock: clk})
	if err != nil {
		return nil, err
	}
	return delivery.New(delivery.Config{Store: st, Handlers: timersReg, Clock: clk, Goroutines: goroutines, Concurrency: c.Concurrency,
		SlowConcurrency: c.slow(), PollInterval: c.FullPollEvery, Logger: log, Metrics: m, Arrivals: arrivals, Committed: committed})
}
