package relayclient

import (
	"context"
	"time"
)

// SetSleep replaces the wait between attempts, so tests see every wait the
// client would make without making it.
func SetSleep(c *Client, sleep func(ctx context.Context, d time.Duration) error) { c.sleep = sleep }

// SetNow replaces the clock Retry-After dates are read against.
func SetNow(c *Client, now func() time.Time) { c.now = now }

// MaxDuration is the wait a Retry-After beyond time.Duration's range reads as.
const MaxDuration = maxDuration
