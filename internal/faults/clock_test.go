package faults

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/delivery"
	"github.com/hookrelay/relay/internal/outbound"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// jumpingClock is a wall clock an offset away from the real one, which the
// test moves as an NTP step or an operator's date command would.
type jumpingClock struct{ offset atomic.Int64 }

func (j *jumpingClock) Now() time.Time { return time.Now().Add(time.Duration(j.offset.Load())) }

func (j *jumpingClock) jump(d time.Duration) { j.offset.Add(int64(d)) }

// TestClockJumps runs relay in this process, assembled as the binary
// assembles it, over a wall clock that jumps 10 minutes forward and then
// back while outcomes flow and fail their first attempt: nothing is lost and
// nothing waits for the clock to come round again. The binary cannot be
// given a wall clock of the test's own, hence the assembly.
func TestClockJumps(t *testing.T) {
	need(t)
	srv := startRedis(t)
	ctx := t.Context()
	st, err := redisstore.New(ctx, srv.Client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wall := &jumpingClock{}
	// As cmd/relay does: one clock, never going backward, for everything.
	clk := clock.NewSteady(wall)
	ch, err := outbound.NewChannel(outbound.ChannelOptions{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	if err != nil {
		t.Fatal(err)
	}
	handler := &delivery.Handler{Sink: &delivery.Webhooks{Sender: &outbound.Sender{Channel: ch}, Audience: "http://relay.test"}, Clock: clk}
	reg, err := timers.NewHandlers(handler, &outbox.SeenSweeper{})
	if err != nil {
		t.Fatal(err)
	}
	drv, err := delivery.New(delivery.Config{Store: st, Handlers: reg, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.Start(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = drv.Stop(stopCtx)
	})
	app := &outbox.Appender{Store: st, Clock: clk}
	admin := &outbox.Admin{Store: st, Clock: clk}

	notify := make(chan struct{}, 1)
	// The first attempt of every tenth outcome, and of every one posted
	// while the clock is ahead, fails: a fire that meets one first backs
	// off, dated by the clock as it is then.
	failFirst := func(rid string, attempt int) relaytest.Answer {
		if attempt == 0 && (strings.HasSuffix(rid, "0") || strings.Contains(rid, "-ahead-")) {
			return relaytest.Answer{Status: http.StatusServiceUnavailable}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}
	var targets []target
	for _, ns := range []string{"clock-a", "clock-b"} {
		rc := newReceiver(t, ns, notify, failFirst)
		_, err := admin.PutEndpoint(ctx, store.Partition{Namespace: ns}, "hook", outbox.EndpointSpec{
			URL: rc.URL, Scheme: schema.SchemeStandardWebhooks, Enabled: true, MaxInFlight: 1, Secret: schema.Secret(rc.Secret),
		})
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, target{ns: ns, rc: rc})
	}
	p := &producer{accepted: map[string][]string{}, posted: map[string]map[string]bool{}, acceptedAt: map[string]time.Time{}, codes: map[int]int{}}
	appendAll := func(phase string, n int) {
		t.Helper()
		for _, tg := range targets {
			part := store.Partition{Namespace: tg.ns}
			ids := rids(tg.ns+"-"+phase, n)
			for i := 0; i < len(ids); i += 10 {
				var os []schema.Outcome
				for _, rid := range ids[i:min(i+10, len(ids))] {
					os = append(os, outboxtest.Committed(rid))
				}
				res, err := app.Append(ctx, part, os)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for j, r := range res {
					if r.Code != outbox.Accepted {
						t.Fatalf("append %s: %s", os[j].ReservationID, r.Code)
					}
					got = append(got, os[j].ReservationID)
				}
				p.record(tg.ns, got, map[string]any{})
				drv.WakePartition(part)
			}
		}
	}

	start := time.Now()
	appendAll("before", 60)
	awaitDeliveries(t, notify, targets, 60)
	t.Logf("%.2fs: jump forward", time.Since(start).Seconds())
	wall.jump(10 * time.Minute)
	appendAll("ahead", 5)
	// Back as soon as a row has failed under the clock ahead: its retry is
	// dated 10 minutes on.
	relaytest.Eventually(t, settleWithin, notify, func() error {
		if !failedAhead(targets) {
			return errors.New("no row failed while the clock was ahead")
		}
		return nil
	})
	t.Logf("%.2fs: jump back", time.Since(start).Seconds())
	// Nothing is posted after the jump back: an append would pull the
	// stream's timer to now and hide a stall.
	wall.jump(-10 * time.Minute)
	settle(t, p, notify, targets...)
	_, dups := report(t, "clock ±10 min", p, time.Since(start), targets...)
	boundDuplicates(t, dups, p.total()*len(targets))
}

// failedAhead reports whether a receiver refused a row posted while the
// clock was ahead.
func failedAhead(targets []target) bool {
	for _, tg := range targets {
		for rid, n := range tg.rc.Attempts() {
			if strings.Contains(rid, "-ahead-") && n > 0 {
				return true
			}
		}
	}
	return false
}
