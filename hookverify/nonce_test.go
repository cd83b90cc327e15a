package hookverify_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/hookverify"
)

// t0 is the instant the tests start at.
var t0 = time.UnixMilli(1_764_460_800_000)

// manual is a clock tests move by hand; safe for concurrent reads.
type manual struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manual) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestNonceIsRefusedUntilItsExpiry(t *testing.T) {
	t.Parallel()
	clk := &manual{now: t0}
	c := hookverify.NewNonceCache(10, clk.Now)
	exp := t0.Add(time.Minute)
	if err := c.Record("n1", exp); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute - time.Millisecond)
	if err := c.Record("n1", exp); !errors.Is(err, hookverify.ErrReplay) {
		t.Errorf("before expiry: got %v, want ErrReplay", err)
	}
	clk.Add(time.Millisecond)
	if err := c.Record("n1", exp.Add(time.Minute)); err != nil {
		t.Errorf("at expiry the nonce is forgotten: %v", err)
	}
	if err := c.Record("n2", clk.Now()); err != nil || c.Len() != 1 {
		t.Errorf("an already expired nonce is not stored: %v, len %d", err, c.Len())
	}
}

func TestFullNonceCacheRefusesRatherThanForgets(t *testing.T) {
	t.Parallel()
	clk := &manual{now: t0}
	c := hookverify.NewNonceCache(3, clk.Now)
	for i, d := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} {
		if err := c.Record(fmt.Sprint("n", i), t0.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Record("n3", t0.Add(time.Minute)); !errors.Is(err, hookverify.ErrNonceCacheFull) {
		t.Fatalf("full: got %v, want ErrNonceCacheFull", err)
	}
	for i := range 3 {
		if err := c.Record(fmt.Sprint("n", i), t0.Add(time.Hour)); !errors.Is(err, hookverify.ErrReplay) {
			t.Errorf("n%d was forgotten while full: %v", i, err)
		}
	}
	// The earliest expiry (n1, 1 s) makes room; the others stay.
	clk.Add(time.Second)
	if err := c.Record("n3", t0.Add(time.Minute)); err != nil {
		t.Errorf("after the earliest expired: %v", err)
	}
	for _, n := range []string{"n0", "n2", "n3"} {
		if err := c.Record(n, t0.Add(time.Hour)); !errors.Is(err, hookverify.ErrReplay) {
			t.Errorf("%s: got %v, want ErrReplay", n, err)
		}
	}
	if err := c.Record("n1", t0.Add(time.Minute)); !errors.Is(err, hookverify.ErrNonceCacheFull) {
		t.Errorf("n1 after its expiry while full again: got %v, want ErrNonceCacheFull", err)
	}
}

func TestConcurrentRecordsAcceptANonceOnce(t *testing.T) {
	t.Parallel()
	clk := &manual{now: t0}
	c := hookverify.NewNonceCache(0, clk.Now)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				err := c.Record(fmt.Sprint("nonce-", i), t0.Add(time.Minute))
				switch {
				case err == nil:
					accepted.Add(1)
				case !errors.Is(err, hookverify.ErrReplay):
					t.Errorf("goroutine %d: %v", g, err)
				}
			}
		}()
	}
	wg.Wait()
	if got := accepted.Load(); got != 100 {
		t.Errorf("accepted %d records of 100 nonces", got)
	}
}
