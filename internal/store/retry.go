package store

import (
	"context"
	"errors"
	"time"
)

// UnavailableAttempts is how many times a write that must outlive an outage
// is sent: with waits doubling to a second, about 25 s, inside a fire's
// default 30 s lease.
const UnavailableAttempts = 30

// RetryUnavailable runs op until it succeeds, fails with an error other than
// ErrUnavailable, has run attempts times, or ctx ends, waiting between runs
// from 20 ms doubling to a second. It returns op's last error. It is for
// writes that must not be lost to a Redis restart or failover of a few
// seconds, such as a fire's completion: guarded batches are safe to send
// again, since a batch that committed fails its guard the second time.
func RetryUnavailable(ctx context.Context, attempts int, op func() error) error {
	wait := 20 * time.Millisecond
	for i := 1; ; i++ {
		err := op()
		if err == nil || !errors.Is(err, ErrUnavailable) || i >= attempts {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}
