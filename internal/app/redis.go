package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/redisstore"
)

// checker is what readiness needs of the store.
type checker interface {
	Check(ctx context.Context) error
	skewer
}

// ready is the API's readiness check: the store answers and will not evict
// rows, and this host's clock is near enough to Redis's for leases to hold
// (a clock that drifted away since the start is logged at Error: leases
// are no longer safe). A clock that cannot be read for another reason is
// left to the store's check.
func ready(st checker, clk clock.Clock, log *slog.Logger) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := st.Check(ctx); err != nil {
			return errors.New(readiness(err))
		}
		var skew *ClockSkewError
		if err := checkClock(ctx, st, clk); errors.As(err, &skew) {
			log.ErrorContext(ctx, "not ready: leases are unsafe", "error", err)
			return errors.New(readiness(err))
		}
		return nil
	}
}

// readiness is what /readyz tells: the eviction warning and the clock's
// offset in full, any other cause without internals.
func readiness(err error) string {
	var skew *ClockSkewError
	switch {
	case errors.Is(err, redisstore.ErrEvictingPolicy):
		return "Redis may evict keys (set maxmemory-policy noeviction)"
	case errors.Is(err, redisstore.ErrScripts):
		return "Redis does not hold relay's scripts and would not load them"
	case errors.As(err, &skew):
		return fmt.Sprintf("this host's clock is %s Redis's, further than %v (synchronise the clocks)", skew.away(), MaxClockSkew)
	}
	return "Redis is unreachable"
}

// Connect opens a client for a Redis URL, a Sentinel URL, a list of Cluster seeds, or an
// embedded miniredis when addr is empty. Its errors hold no piece of the
// password in addr.
func Connect(addr string, log *slog.Logger) (redis.UniversalClient, func(), error) {
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
	if !isSentinelURL(addr) && strings.Contains(urlHosts(addr), ",") {
		// go-redis would take "h1:p1,h2:p2" for one host name, and fail
		// only when it looks the name up.
		return nil, errors.New("a Redis URL names one host: give a Redis Cluster's seeds as host1:port,host2:port, or as redis://[user:pass@]host1:port?addr=host2:port&addr=host3:port")
	}
	switch {
	case isSentinelURL(addr):
		// redis+sentinel://user:pass@host1:26379,host2:26379/mymaster/0
		opts, err := parseSentinelURL(addr)
		if err != nil {
			return nil, err
		}
		// A client of whichever server the Sentinels name master, that
		// follows a failover by itself.
		return redis.NewFailoverClient(opts), nil
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
