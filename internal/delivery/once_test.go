package delivery

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

var onceOutcomes = flag.Int("once.outcomes", 1000,
	"outcomes TestSingleOutcomesAcceptedWhileDeliveringArriveOnce accepts on each backend")

// once counts the arrivals of each outcome and says when every one of n
// has arrived at least once.
type once struct {
	n       int
	mu      sync.Mutex
	seen    map[string]int
	total   int
	arrived chan struct{}
}

func (o *once) Deliver(_ context.Context, d Parcel) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	key := d.Namespace + "/" + d.Outcome.ReservationID
	o.seen[key]++
	o.total++
	if o.seen[key] == 1 && len(o.seen) == o.n {
		close(o.arrived)
	}
	return nil
}

// Outcomes accepted one per call by 64 producers over 8 namespaces, whose
// endpoints take 16 calls at once, while a driver delivers them: the ingest
// of a busy relay. Every outcome arrives exactly once: with no fault, a
// fire's acknowledgements never lose to the ingest beside them. The count is
// set with -once.outcomes.
func TestSingleOutcomesAcceptedWhileDeliveringArriveOnce(t *testing.T) {
	t.Parallel()
	const producers, namespaces, width = 64, 8, 16
	eachFleet(t, func(t *testing.T, f *fleet) {
		n := *onceOutcomes
		parts := make([]store.Partition, namespaces)
		for i := range parts {
			parts[i] = store.Partition{Namespace: fmt.Sprintf("once-%d", i)}
			f.endpoint(parts[i].Namespace, "hooks", schema.Endpoint{Enabled: true, MaxInFlight: width})
		}
		sink := &once{n: n, seen: map[string]int{}, arrived: make(chan struct{})}
		fired := make(chan struct{}, 1)
		d := f.driver(sink, Config{finished: func(bool) {
			select {
			case fired <- struct{}{}:
			default:
			}
		}})
		var next, contended atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for range producers {
			wg.Go(func() {
				for {
					i := int(next.Add(1) - 1)
					if i >= n {
						return
					}
					p := parts[i%namespaces]
					if err := accept(f, p, aborted(fmt.Sprintf("r-%06d", i)), &contended); err != nil {
						errs <- fmt.Errorf("outcome %d: %w", i, err)
						return
					}
					d.WakePartition(p)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		deadline := time.After(10 * patience)
		select {
		case <-sink.arrived:
		case <-deadline:
			sink.mu.Lock()
			defer sink.mu.Unlock()
			t.Fatalf("%d of %d outcomes arrived", len(sink.seen), n)
		}
		// A row sent again is acknowledged only after it is sent: once
		// every backlog is empty, no second sending is still to come.
		for drained := false; !drained; {
			drained = true
			for _, p := range parts {
				if f.backlog(p.Namespace, "hooks") != 0 {
					drained = false
				}
			}
			if !drained {
				select {
				case <-fired:
				case <-deadline:
					t.Fatal("the backlogs did not drain")
				}
			}
		}
		if err := d.Stop(f.ctx); err != nil {
			t.Fatal(err)
		}
		sink.mu.Lock()
		defer sink.mu.Unlock()
		t.Logf("%d outcomes (%d requests answered contended and sent again), %d deliveries, %d duplicates",
			n, contended.Load(), sink.total, sink.total-n)
		if sink.total != n {
			shown := 0
			for key, c := range sink.seen {
				if c != 1 && shown < 10 {
					t.Errorf("%s arrived %d times", key, c)
					shown++
				}
			}
			t.Fatalf("%d outcomes arrived %d times", n, sink.total)
		}
	})
}

// accept accepts o as a producer does: a request answered contended (503)
// is sent again, and then the outcome may answer as a duplicate of itself.
func accept(f *fleet, p store.Partition, o schema.Outcome, contended *atomic.Int64) error {
	for try := 0; ; try++ {
		st, err := f.app.Append(f.ctx, p, []schema.Outcome{o})
		switch {
		case errors.Is(err, outbox.ErrContended) && try < 8:
			contended.Add(1)
			continue
		case err != nil:
			return err
		case st[0].Code == outbox.Accepted, try > 0 && st[0].Code == outbox.Duplicate:
			return nil
		}
		return fmt.Errorf("%s %s", st[0].Code, st[0].Detail)
	}
}
