package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// ackPage acknowledges up to n rows of a stream's queue the way a delivery
// fire will (outboxtest.AckPage). It reports the rows it acknowledged; none
// when its guard lost to a concurrent writer.
func ackPage(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, n int) (acked []string, err error) {
	return outboxtest.AckPage(ctx, st, p, endpoint, n, false, outbox.Done{})
}

// Appenders and acknowledgers race on one namespace with two endpoints whose
// filters differ; at the end every accepted outcome was acknowledged exactly
// once per endpoint whose filter takes it, nothing else was, and every
// stream's backlog, pending rows and records agree. The seed is printed.
func TestRacingIngestAndAcknowledgementKeepTheOutboxConsistent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		e.putEndpoint("all", schema.Endpoint{Enabled: true})
		e.putEndpoint("commits", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{"committed"}})
		ctx := context.Background()

		var (
			mu       sync.Mutex
			accepted = map[string]schema.Kind{}
			acked    = map[string]map[string]int{"all": {}, "commits": {}}
			wg       sync.WaitGroup
			done     = make(chan struct{})
		)
		for w := range 3 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				for range 12 {
					var list []schema.Outcome
					for range 1 + rng.IntN(6) {
						// Ids repeat across writers, so duplicates and
						// conflicts race too.
						rid := fmt.Sprintf("r-%d", rng.IntN(60))
						if rng.IntN(2) == 0 {
							list = append(list, committed(rid))
						} else {
							list = append(list, aborted(rid))
						}
					}
					statuses, err := e.App.Append(ctx, e.P, list)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for i, s := range statuses {
						if s.Code == outbox.Accepted {
							if _, dup := accepted[list[i].ReservationID]; dup {
								t.Errorf("%s accepted twice", list[i].ReservationID)
							}
							accepted[list[i].ReservationID] = list[i].Kind()
						}
					}
					mu.Unlock()
				}
			})
		}
		var ackers sync.WaitGroup
		for _, ep := range []string{"all", "commits"} {
			ackers.Go(func() {
				for {
					rids, err := ackPage(ctx, e.St, e.P, ep, 1+rand.IntN(outbox.MaxAcksPerBatch))
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, rid := range rids {
						acked[ep][rid]++
					}
					mu.Unlock()
					select {
					case <-done:
						if len(rids) == 0 && len(e.pending(ep)) == 0 {
							return
						}
					default:
					}
				}
			})
		}
		wg.Wait()
		close(done)
		ackers.Wait()

		if e.sequence() != uint64(len(accepted)) {
			t.Errorf("sequence %d, %d outcomes accepted", e.sequence(), len(accepted))
		}
		for rid, kind := range accepted {
			if acked["all"][rid] != 1 {
				t.Errorf("%s acknowledged %d times on all, want 1", rid, acked["all"][rid])
			}
			want := 0
			if kind == "committed" {
				want = 1
			}
			if acked["commits"][rid] != want {
				t.Errorf("%s (%s) acknowledged %d times on commits, want %d", rid, kind, acked["commits"][rid], want)
			}
		}
		for ep, m := range acked {
			for rid := range m {
				if _, ok := accepted[rid]; !ok {
					t.Errorf("%s acknowledged on %s but never accepted", rid, ep)
				}
			}
			if b, found := e.backlog(ep); found {
				t.Errorf("%s backlog %+v left after every row was acknowledged", ep, b)
			}
		}
	})
}
