package relaytest

import (
	"testing"
	"time"
)

// pollEvery is how often a wait tries its condition again when nothing
// wakes it sooner: the state it waits on (a relay's answers, a Redis's)
// tells no one when it changes.
const pollEvery = 10 * time.Millisecond

// Poll tries cond until it returns nil: at once, then every 10 ms and
// whenever wake signals (a receiver's Notify, say; a nil wake never
// does). Once within has passed it gives up and returns cond's last
// error, which says what did not happen.
func Poll(within time.Duration, wake <-chan struct{}, cond func() error) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	deadline := time.After(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-wake:
		case <-tick.C:
		case <-deadline:
			return err
		}
	}
}

// Eventually is Poll that fails the test with cond's last error. cond
// runs on the test's goroutine, so it may fail the test itself at once.
func Eventually(t testing.TB, within time.Duration, wake <-chan struct{}, cond func() error) {
	t.Helper()
	if err := Poll(within, wake, cond); err != nil {
		t.Fatal(err)
	}
}
