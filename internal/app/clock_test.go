package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/testlog"
	"github.com/hookrelay/relay/internal/timers"
)

// offsetClock is the wall clock moved by a fixed offset: a host whose clock
// is that far from Redis's, which runs on this host's.
type offsetClock time.Duration

func (o offsetClock) Now() time.Time { return time.Now().Add(time.Duration(o)) }

// Two relays each within MaxClockSkew of Redis's clock differ by at most
// twice it, which must leave the shortest lease a fire runs under (three
// quarters of the default one: a timer held in place) longer than a fire.
func TestTheClockBoundKeepsAFireWithinItsLease(t *testing.T) {
	fire := 3 * delivery.DefaultSinkTimeout // a 10 s budget and a last 5 s call
	if lease := timers.DefaultLease * 3 / 4; 2*MaxClockSkew >= lease-fire {
		t.Fatalf("two clocks %v apart would end a lease of %v before a fire of %v", 2*MaxClockSkew, lease, fire)
	}
}

// A relay whose clock is further than MaxClockSkew from Redis's refuses to
// start, ahead or behind; one within it starts. The embedded miniredis runs
// on this host's clock.
func TestARelayWithItsClockFarFromRedisDoesNotStart(t *testing.T) {
	for _, off := range []time.Duration{MaxClockSkew + time.Second, -MaxClockSkew - time.Second, 30 * 24 * time.Hour} {
		c := Defaults()
		c.Logger, c.Clock = slog.New(slog.DiscardHandler), offsetClock(off)
		a, err := New(t.Context(), c)
		var skew *ClockSkewError
		if !errors.As(err, &skew) || !strings.Contains(err.Error(), "synchronise the clocks") {
			if a != nil {
				a.Close()
			}
			t.Fatalf("clock %v from Redis's: %v, want a clock skew refusal", off, err)
		}
	}
	c := Defaults()
	c.Logger, c.Clock = slog.New(slog.DiscardHandler), offsetClock(MaxClockSkew-time.Second)
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("clock within the bound: %v", err)
	}
	a.Close()
}

// The same on a real Redis, which names itself in the refusal.
func TestARelayWithItsClockFarFromARealRedisDoesNotStart(t *testing.T) {
	srv := redistest.StartServer(t)
	creds := relaytest.NewCredentials(t, "clock")
	c := Defaults()
	c.RedisURL = "redis://" + srv.Addr
	c.Delivery.PublicURL = relaytest.PublicURL
	c.Auth.Secret = creds.Secret
	c.Signing.KeyFile = creds.KeyFile
	c.Logger = slog.New(slog.DiscardHandler)

	c.Clock = offsetClock(-10 * time.Second)
	_, err := New(t.Context(), c)
	var skew *ClockSkewError
	if !errors.As(err, &skew) || !strings.Contains(err.Error(), "behind the clock of Redis at "+srv.Addr) {
		t.Fatalf("a clock 10s behind: %v, want a clock skew refusal naming the Redis", err)
	}
	if skew.Offset < 9*time.Second {
		t.Fatalf("offset %v, want about 10s", skew.Offset)
	}
	c.Clock = nil
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatalf("the host's own clock: %v", err)
	}
	a.Close()
}

// A relay whose clock drifts from Redis's after its start is not ready, and
// says so in its log at Error; once back near Redis's it is ready again.
func TestNotReadyWhileTheClockIsFarFromRedis(t *testing.T) {
	st, m := redistest.MiniredisServer(t, redisstore.Options{})
	at := time.Date(2025, 11, 30, 0, 0, 0, 0, time.UTC)
	m.SetTime(at)
	clk := clock.NewManual(at.UnixMilli())
	var logs testlog.Buffer
	h := routesReady(t, st, testKeys(t), ready(st, clk, slog.New(slog.NewJSONHandler(&logs, nil))))
	if code, body := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the clocks together = %d %q", code, body)
	}
	for _, tc := range []struct {
		off  time.Duration
		want string
	}{
		{MaxClockSkew + time.Second, "4s ahead of Redis's"},
		{-MaxClockSkew - time.Second, "4s behind Redis's"},
	} {
		clk.Set(at.Add(tc.off).UnixMilli())
		code, body := get(t, h, "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, tc.want) || strings.Contains(body, m.Addr()) {
			t.Fatalf("/readyz with the clock %v off = %d %q, want 503 saying %q, without Redis's address", tc.off, code, body, tc.want)
		}
	}
	var errorsLogged int
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(logs.String())), []byte("\n")) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["level"] == "ERROR" && strings.Contains(fmt.Sprint(r["error"]), "clock of Redis at "+m.Addr()) {
			errorsLogged++
		}
	}
	if errorsLogged != 2 {
		t.Fatalf("%d clock errors logged, want 2: %s", errorsLogged, logs.String())
	}
	clk.Set(at.Add(MaxClockSkew).UnixMilli())
	if code, body := get(t, h, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz with the clock at the bound = %d %q", code, body)
	}
}
