package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func (e *env) counters(endpoint string) schema.Counters {
	e.T.Helper()
	s, err := e.admin().Endpoint(e.Ctx, e.P, endpoint)
	if err != nil {
		e.T.Fatalf("endpoint %s: %v", endpoint, err)
	}
	return s.Counters
}

// planAcks plans the acknowledgement of the first n pending rows of endpoint.
func planAcks(t *testing.T, e *env, endpoint string, n int) store.Batch {
	t.Helper()
	acks := freshAcks(t, e, endpoint)
	for _, pk := range e.pending(endpoint)[:n] {
		rec, _ := e.record(endpoint, pk.RID)
		if err := acks.Add(pk.RID, pk.Seq, rec, outbox.Done{}); err != nil {
			t.Fatal(err)
		}
	}
	var b store.Batch
	acks.Plan(&b)
	return b
}

// A completion sent again after a lost reply fails the guards of the pending
// rows its first run deleted, so its outcomes count as delivered once; and
// the counts are the stream's own.
func TestDeliveredCountsOnceWhenTheAcknowledgementIsSentAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 3)
		b := planAcks(t, e, "billing", 2)
		if res := e.Apply(b); !res.Committed {
			t.Fatalf("first run: %+v", res)
		}
		if res := e.Apply(b); res.Committed {
			t.Fatal("the batch applied twice")
		}
		if c := e.counters("billing"); c != (schema.Counters{Delivered: 2}) {
			t.Fatalf("billing counters %+v, want 2 delivered", c)
		}
		if c := e.counters("audit"); c != (schema.Counters{}) {
			t.Fatalf("audit counters %+v, want none", c)
		}
		// The last row: the plan that ends the stream counts too.
		if res := e.Apply(planAcks(t, e, "billing", 1)); !res.Committed {
			t.Fatalf("last row: %+v", res)
		}
		if c := e.counters("billing"); c.Delivered != 3 {
			t.Fatalf("billing counters %+v, want 3 delivered", c)
		}
	})
}

// An endpoint stored before streams kept counters has no counters row: it
// reads as zero, and the first acknowledgement creates the row.
func TestAnEndpointWithoutACountersRowReadsZeroAndCounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		key, _ := schema.CountersKey("billing")
		if _, found := e.Get(key); found {
			t.Fatal("the fixture wrote a counters row")
		}
		e.appendN("r", 2)
		if c := e.counters("billing"); c != (schema.Counters{}) {
			t.Fatalf("counters %+v, want zero", c)
		}
		note, err := outbox.FailedAttemptsNote("billing", 2)
		if err != nil {
			t.Fatal(err)
		}
		e.Apply(store.Batch{Writes: []store.Write{note}})
		if res := e.Apply(planAcks(t, e, "billing", 1)); !res.Committed {
			t.Fatalf("acknowledge: %+v", res)
		}
		if c := e.counters("billing"); c != (schema.Counters{Delivered: 1, FailedAttempts: 2}) {
			t.Fatalf("counters %+v", c)
		}
		list, err := e.admin().Endpoints(e.Ctx, e.P)
		if err != nil || len(list) != 1 || list[0].Counters != (schema.Counters{Delivered: 1, FailedAttempts: 2}) {
			t.Fatalf("list: %+v %v", list, err)
		}
		if list[0].OldestAcceptedMs != t0 {
			t.Fatalf("oldest pending accepted at %d, want %d", list[0].OldestAcceptedMs, t0)
		}
	})
}

// cutStore applies at most allow batches, then refuses every other as
// unavailable: a forced delete cut short part way.
type cutStore struct {
	store.NamespaceStore
	allow int
}

var errCut = errors.New("cut")

func (c *cutStore) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	if c.allow <= 0 {
		return store.Result{}, errCut
	}
	c.allow--
	return c.NamespaceStore.Apply(ctx, p, b)
}

// A forced delete counts each dropped row once, batch by batch, and the
// final batch deletes the counters with the endpoint.
func TestAForcedDeleteCountsItsDropsBatchByBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		const n = 2*outbox.MaxAcksPerBatch + 4
		e.appendN("r", n)
		// The mark, then two drop batches.
		cut := &outbox.Admin{Store: &cutStore{NamespaceStore: e.St, allow: 3}, Clock: e.Clk}
		if _, err := cut.DeleteEndpoint(e.Ctx, e.P, "billing", true); !errors.Is(err, errCut) {
			t.Fatalf("cut delete: %v", err)
		}
		if c := e.counters("billing"); c != (schema.Counters{Dropped: 2 * outbox.MaxAcksPerBatch}) {
			t.Fatalf("counters %+v after two drop batches", c)
		}
		if c, bl := e.counters("billing"), len(e.pending("billing")); c.Dropped+uint64(bl) != n {
			t.Fatalf("%d dropped and %d pending of %d", c.Dropped, bl, n)
		}
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil || dropped != 4 {
			t.Fatalf("rest of the delete: %d, %v", dropped, err)
		}
		key, _ := schema.CountersKey("billing")
		if _, found := e.Get(key); found {
			t.Fatal("the counters outlived their endpoint")
		}
		if c := e.counters("audit"); c != (schema.Counters{}) {
			t.Fatalf("audit counters %+v", c)
		}
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		if c := e.counters("billing"); c != (schema.Counters{}) {
			t.Fatalf("re-created endpoint counts %+v", c)
		}
	})
}

// The ledger: at every step, every outcome accepted for an endpoint is
// delivered, pending or dropped, whatever mix of ingest, acknowledgements,
// failed calls and forced deletes (cut short or not) came before. The seed
// is printed.
func TestEveryAcceptedOutcomeIsDeliveredPendingOrDropped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 0))
		ids := []string{"all", "commits", "old"}
		accepted := map[string]uint64{}
		failed := map[string]uint64{}
		create := func(id string) {
			if id == "old" {
				// Stored before counters: no counters row.
				e.putEndpoint(id, schema.Endpoint{Enabled: true})
				return
			}
			spec := outbox.EndpointSpec{Enabled: true}
			if id == "commits" {
				spec.Kinds = []schema.Kind{"committed"}
			}
			e.put(id, spec)
		}
		for _, id := range ids {
			create(id)
		}
		next := 0
		for step := range 300 {
			id := ids[rng.IntN(len(ids))]
			switch op := rng.IntN(10); {
			case op < 4:
				var list []schema.Outcome
				for range 1 + rng.IntN(5) {
					rid := fmt.Sprintf("r-%d", next)
					next++
					if rng.IntN(2) == 0 {
						list = append(list, committed(rid))
					} else {
						list = append(list, aborted(rid))
					}
				}
				statuses, err := e.App.Append(e.Ctx, e.P, list)
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range statuses {
					if s.Code != outbox.Accepted {
						continue
					}
					for _, ep := range ids {
						if ep == "commits" && list[i].Kind() != "committed" {
							continue
						}
						if s, err := e.admin().Endpoint(e.Ctx, e.P, ep); err == nil && s.Endpoint.DisabledReason != outbox.ReasonDeleting {
							accepted[ep]++
						}
					}
				}
			case op < 7:
				if _, err := ackPage(e.Ctx, e.St, e.P, id, 1+rng.IntN(outbox.MaxAcksPerBatch)); err != nil {
					t.Fatal(err)
				}
				if f := rng.IntN(3); f > 0 {
					note, _ := outbox.FailedAttemptsNote(id, f)
					e.Apply(store.Batch{Writes: []store.Write{note}})
					failed[id] += uint64(f)
				}
			case op < 9:
				// A forced delete cut short after a few batches.
				cut := &outbox.Admin{Store: &cutStore{NamespaceStore: e.St, allow: 1 + rng.IntN(3)}, Clock: e.Clk}
				if _, err := cut.DeleteEndpoint(e.Ctx, e.P, id, true); err != nil && !errors.Is(err, errCut) && !errors.Is(err, outbox.ErrNotFound) {
					t.Fatal(err)
				}
			default:
				if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, id, true); err != nil && !errors.Is(err, outbox.ErrNotFound) {
					t.Fatal(err)
				}
				accepted[id], failed[id] = 0, 0
				create(id)
			}
			for _, ep := range ids {
				s, err := e.admin().Endpoint(e.Ctx, e.P, ep)
				if errors.Is(err, outbox.ErrNotFound) {
					// A cut delete got through its final batch.
					accepted[ep], failed[ep] = 0, 0
					create(ep)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				c, pending := s.Counters, uint64(len(e.pending(ep)))
				if c.Delivered+pending+c.Dropped != accepted[ep] || c.FailedAttempts != failed[ep] {
					t.Fatalf("step %d, %s: %d accepted, %d delivered + %d pending + %d dropped; %d failed, want %d",
						step, ep, accepted[ep], c.Delivered, pending, c.Dropped, c.FailedAttempts, failed[ep])
				}
			}
		}
	})
}
