package app

import (
	"context"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/redisstore"
)

// MaxClockSkew is how far this host's clock may be from every Redis
// master's. A lease is dated by its holder's clock and judged run out by
// every other relay's, so a relay whose clock is d ahead of the holder's
// takes the timer over d early, and both call its endpoint at once. The
// shortest lease a fire runs under is three quarters of one (a timer held
// in place, timers.Row.Hold): 22.5 s of the default 30 s, against a fire
// whose calls end within 15 s (delivery: a 10 s budget and a last 5 s
// call), which leaves 7.5 s. Relays each within MaxClockSkew of Redis's
// clock are within twice it of each other, 6 s, which keeps 1.5 s for
// what passes between reading the clock and the fire's start.
const MaxClockSkew = 3 * time.Second

// ClockSkewError: this host's clock is further than MaxClockSkew from a
// Redis master's.
type ClockSkewError struct {
	redisstore.Skew
}

func (e *ClockSkewError) Error() string {
	return fmt.Sprintf("this host's clock is %s the clock of Redis at %s; relay needs them within %v, or two relays may fire one timer at once: synchronise the clocks (NTP)",
		e.away(), e.Addr, MaxClockSkew)
}

// away says how far the host's clock is from Redis's, and which way.
func (e *ClockSkewError) away() string {
	if e.Offset > 0 {
		return fmt.Sprintf("%v behind", e.Offset.Round(time.Millisecond))
	}
	return fmt.Sprintf("%v ahead of", (-e.Offset).Round(time.Millisecond))
}

// skewer is what the clock check needs of the store.
type skewer interface {
	ClockSkews(ctx context.Context, now func() time.Time) ([]redisstore.Skew, error)
}

// checkClock compares clk, the clock leases are dated by, with every Redis
// master's: one further than MaxClockSkew is a *ClockSkewError naming the
// furthest.
func checkClock(ctx context.Context, st skewer, clk clock.Clock) error {
	skews, err := st.ClockSkews(ctx, clk.Now)
	if err != nil {
		return err
	}
	var worst *redisstore.Skew
	for i, s := range skews {
		if s.Offset.Abs() > MaxClockSkew && (worst == nil || s.Offset.Abs() > worst.Offset.Abs()) {
			worst = &skews[i]
		}
	}
	if worst != nil {
		return &ClockSkewError{Skew: *worst}
	}
	return nil
}
