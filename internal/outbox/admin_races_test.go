package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Two registrations of new ids that race, each reading 7 of 8 endpoints,
// must not both commit: a namespace over the limit refuses every ingest and
// every admin read, delete included.
func TestConcurrentCreatesStayWithinMaxEndpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for i := range outbox.DefaultMaxEndpoints - 1 {
			e.put(fmt.Sprintf("ep%d", i), outbox.EndpointSpec{Enabled: true})
		}
		other := e.admin()
		racing := &outbox.Admin{Clock: e.Clk, Store: &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				if _, err := other.PutEndpoint(e.Ctx, e.P, "late", outbox.EndpointSpec{URL: "https://h.example.com/x", Enabled: true}); err != nil {
					t.Fatalf("other put: %v", err)
				}
			}
			return apply()
		}}}
		_, _ = racing.PutEndpoint(e.Ctx, e.P, "first", outbox.EndpointSpec{URL: "https://h.example.com/y", Enabled: true})
		if _, err := e.admin().Endpoints(e.Ctx, e.P); err != nil {
			t.Fatalf("namespace bricked: %v", err)
		}
	})
}

// An ingest that read no delivery timer must not commit after a Replay that
// created one: the stream would have two.
func TestReplayAndIngestDoNotCreateTwoTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 1)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.RequireEquals(tm.Key, tm.Raw)
		b.Delete(tm.Key) // the missing timer Replay documents it creates
		e.Apply(b)
		e.App.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				e.Clk.Set(t0 + 1)
				if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-000"); err != nil {
					t.Fatalf("replay: %v", err)
				}
			}
			return apply()
		}}
		e.Append(committed("r-new"))
		if n := len(e.timers(timers.KindOutcomeDelivery, "billing")); n != 1 {
			t.Fatalf("%d delivery timers for one stream", n)
		}
	})
}

// Two Replays of a stream without a timer, racing, create two timers.
func TestConcurrentReplaysDoNotCreateTwoTimers(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.RequireEquals(tm.Key, tm.Raw)
		b.Delete(tm.Key)
		e.Apply(b)
		racing := &outbox.Admin{Clock: e.Clk, Store: &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 1 {
				e.Clk.Set(t0 + 1)
				if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-001"); err != nil {
					t.Fatalf("replay: %v", err)
				}
			}
			return apply()
		}}}
		if _, err := racing.Replay(e.Ctx, e.P, "billing", "r-000"); err != nil {
			t.Fatalf("replay: %v", err)
		}
		if n := len(e.timers(timers.KindOutcomeDelivery, "billing")); n != 1 {
			t.Fatalf("%d delivery timers for one stream", n)
		}
	})
}

// A fire holding the lease whose call failed releases its timer with the
// failed row's attempt note after the drain dropped that row: the note must
// not outlive the deleted endpoint.
func TestForcedDeleteLeavesNoAttemptRowOfAFireReleasedMeanwhile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 1)
		tm, _ := e.deliveryTimer("billing")
		// A worker claims the timer.
		leasedKey := timers.Key(e.NowMs()+30_000, timers.KindOutcomeDelivery, "billing")
		leased := leasedValue(tm.DueAtMs, nil)
		var claim store.Batch
		claim.RequireEquals(tm.Key, tm.Raw)
		claim.Delete(tm.Key)
		claim.Put(leasedKey, leased)
		e.Apply(claim)
		attemptKey, _ := outbox.AttemptKey("billing", "r-000")
		note, err := outbox.EncodeAttempts(outbox.Attempts{Total: 1, Last: []outbox.Attempt{{AtMs: e.NowMs(), Status: 500, ErrorClass: "status"}}})
		if err != nil {
			t.Fatal(err)
		}
		adm := &outbox.Admin{Clock: e.Clk, Store: &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 3 { // after the drain dropped r-000: the fire's completion failed its backlog guard, its release (timers.release) lands
				var rel store.Batch
				rel.RequireEquals(leasedKey, leased)
				rel.Delete(leasedKey)
				rel.Put(timers.Key(tm.DueAtMs, timers.KindOutcomeDelivery, "billing"), timers.EncodeIdle(nil))
				rel.Put(attemptKey, note)
				if !e.Apply(rel).Committed {
					t.Fatal("release did not commit")
				}
			}
			return apply()
		}}}
		if dropped, err := adm.DeleteEndpoint(e.Ctx, e.P, "billing", true); err != nil || dropped != 1 {
			t.Fatalf("forced delete: %d %v", dropped, err)
		}
		for _, row := range e.all() {
			if pk, ok := outbox.Parse(row.Key); ok && (pk.Endpoint == "billing" || pk.Reference == "billing") {
				t.Fatalf("row %q of the deleted stream is left", row.Key)
			}
		}
	})
}

// A forced delete of a stream whose backlog counts a row that is not there
// never finishes.
func TestForcedDeleteFinishesWhenTheBacklogOvercounts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 1)
		bk, _ := outbox.BacklogKey("billing")
		var b store.Batch
		b.Put(bk, outbox.EncodeBacklog(outbox.Backlog{Rows: 2, Bytes: 1}))
		e.Apply(b)
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil {
			t.Fatalf("forced delete: dropped %d, %v", dropped, err)
		}
	})
}

// A pending row without its record (which delivery keeps and skips) makes
// the forced delete, the operator's way out, fail forever.
func TestForcedDeleteDropsARowWithoutItsRecord(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		rk, _ := outbox.RecordKey("billing", "r-000")
		var b store.Batch
		b.Delete(rk)
		e.Apply(b)
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil && !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("forced delete: dropped %d, %v", dropped, err)
		}
		for _, row := range e.all() {
			if pk, ok := outbox.Parse(row.Key); ok && (pk.Endpoint == "billing" || pk.Reference == "billing") {
				t.Fatalf("row %q of the deleted stream is left", row.Key)
			}
		}
	})
}
