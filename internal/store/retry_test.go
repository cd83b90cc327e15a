package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

func TestRetryUnavailableRetriesOnlyWhatMaySucceedLater(t *testing.T) {
	away := fmt.Errorf("apply: %w: connection refused", store.ErrUnavailable)
	other := errors.New("script error")
	cases := []struct {
		name     string
		errs     []error // op's answers in turn; nil once it succeeds
		attempts int
		calls    int
		want     error
	}{
		{"succeeds once the store is back", []error{away, away, nil}, 10, 3, nil},
		{"another error is not retried", []error{other, nil}, 10, 1, other},
		{"gives up after its attempts", []error{away, away, away, away}, 3, 3, away},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := store.RetryUnavailable(context.Background(), c.attempts, func() error {
				calls++
				return c.errs[calls-1]
			})
			if calls != c.calls || !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("%d calls, error %v; want %d calls, error %v", calls, err, c.calls, c.want)
			}
		})
	}
}

func TestRetryUnavailableStopsWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := store.RetryUnavailable(ctx, 100, func() error {
		calls++
		cancel()
		return store.ErrUnavailable
	})
	if calls != 1 || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%d calls, error %v; want one call and the store's error", calls, err)
	}
}
