package outbox_test

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
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

// Registrations of 64 new ids at once leave at most the limit of
// endpoints, and the namespace is listed as before: each creation counts
// the endpoints in the batch that adds its own. Four namespaces a run, as
// one race lets a namespace pass the limit only most of the time.
func TestManyConcurrentRegistrationsStayWithinMaxEndpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const racers = 64
		for round := range 4 {
			p := store.Partition{Namespace: fmt.Sprintf("race-%d", round)}
			start := make(chan struct{})
			errs := make([]error, racers)
			var wg sync.WaitGroup
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = e.admin().PutEndpoint(e.Ctx, p, fmt.Sprintf("e%02d", i), outbox.EndpointSpec{URL: "https://h.example.com/x", Enabled: true})
				}()
			}
			close(start)
			wg.Wait()
			created := 0
			for i, err := range errs {
				switch {
				case err == nil:
					created++
				case !errors.Is(err, outbox.ErrTooManyEndpoints) && !errors.Is(err, outbox.ErrContended):
					t.Errorf("%s: registration %d: %v", p, i, err)
				}
			}
			list, err := e.admin().Endpoints(e.Ctx, p)
			if err != nil {
				t.Fatalf("%s: list: %v", p, err)
			}
			if len(list) > outbox.DefaultMaxEndpoints || len(list) != created {
				t.Fatalf("%s: %d registrations answered created, %d endpoints stored; the limit is %d", p, created, len(list), outbox.DefaultMaxEndpoints)
			}
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
		attemptKey, _ := schema.AttemptKey("billing", "r-000")
		note, err := schema.EncodeAttempts(schema.Attempts{Total: 1, Last: []schema.Attempt{{AtMs: e.NowMs(), Status: 500, ErrorClass: "status"}}})
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
			if pk, ok := schema.Parse(row.Key); ok && (pk.Endpoint == "billing" || pk.Reference == "billing") {
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
		bk, _ := schema.BacklogKey("billing")
		var b store.Batch
		b.Put(bk, schema.EncodeBacklog(schema.Backlog{Rows: 2, Bytes: 1}))
		e.Apply(b)
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil {
			t.Fatalf("forced delete: dropped %d, %v", dropped, err)
		}
	})
}

// A pending row without its record (which delivery keeps and skips) does
// not make the forced delete, the operator's way out, fail forever.
func TestForcedDeleteDropsARowWithoutItsRecord(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		var b store.Batch
		b.Delete(schema.LogKey(e.pending("billing")[0].Seq))
		e.Apply(b)
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil && !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("forced delete: dropped %d, %v", dropped, err)
		}
		for _, row := range e.all() {
			if pk, ok := schema.Parse(row.Key); ok && (pk.Endpoint == "billing" || pk.Reference == "billing") {
				t.Fatalf("row %q of the deleted stream is left", row.Key)
			}
		}
	})
}

// A namespace holding one endpoint more than its limit, as racing
// registrations of an earlier version left some, or as a lowered limit
// leaves one, is listed, read, ingested into and emptied like any other:
// only a new endpoint is refused.
func TestANamespaceOverItsEndpointLimitKeepsWorking(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		n := outbox.DefaultMaxEndpoints + 1
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("ep%d", i)
			e.putEndpoint(ids[i], schema.Endpoint{Enabled: true})
		}
		adm := e.admin()
		if list, err := adm.Endpoints(e.Ctx, e.P); err != nil || len(list) != n {
			t.Fatalf("list: %d endpoints, %v; want %d", len(list), err, n)
		}
		for _, id := range ids {
			if _, err := adm.Endpoint(e.Ctx, e.P, id); err != nil {
				t.Fatalf("read %s: %v", id, err)
			}
		}
		page, err := adm.Namespaces(e.Ctx, nil, 10)
		if err != nil || len(page.Namespaces) != 1 || page.Namespaces[0].Endpoints != n {
			t.Fatalf("namespaces: %+v, %v", page.Namespaces, err)
		}
		if st := e.Append(committed("r-1")); st[0].Code != outbox.Accepted {
			t.Fatalf("append: %+v", st)
		}
		for _, id := range ids {
			if rows := e.pending(id); len(rows) != 1 {
				t.Fatalf("%s has %d rows pending, want 1", id, len(rows))
			}
		}
		if view, err := adm.Outcome(e.Ctx, e.P, "r-1"); err != nil || len(view.Streams) != n {
			t.Fatalf("outcome: %d streams, %v", len(view.Streams), err)
		}
		if out, err := adm.Outcomes(e.Ctx, e.P, outbox.OutcomeFilter{}, nil, 10); err != nil || len(out.Outcomes) != 1 {
			t.Fatalf("outcomes: %+v, %v", out, err)
		}
		if bl, err := (&outbox.BacklogReader{Store: e.St}).Read(e.Ctx, e.P, e.NowMs()); err != nil || bl.Rows != uint64(n) {
			t.Fatalf("backlog: %+v, %v", bl, err)
		}
		// An endpoint it holds may still be changed; a new one is refused
		// at the configured limit, whatever it is.
		if _, err := adm.PutEndpoint(e.Ctx, e.P, ids[0], outbox.EndpointSpec{URL: "https://h.example.com/changed", Enabled: true}); err != nil {
			t.Fatalf("change %s: %v", ids[0], err)
		}
		before := e.all()
		for limit, want := range map[int]int{0: outbox.DefaultMaxEndpoints, 2: 2} {
			low := &outbox.Admin{Store: e.St, Clock: e.Clk, MaxEndpoints: limit}
			_, err := low.PutEndpoint(e.Ctx, e.P, "one-more", outbox.EndpointSpec{URL: "https://h.example.com/x", Enabled: true})
			var over *outbox.EndpointLimitError
			if !errors.Is(err, outbox.ErrTooManyEndpoints) || !errors.As(err, &over) || over.Max != want {
				t.Fatalf("limit %d: a new endpoint: %v, want the limit %d", limit, err, want)
			}
		}
		if !reflect.DeepEqual(e.all(), before) {
			t.Fatal("a refused endpoint changed the namespace")
		}
		for _, id := range ids {
			if dropped, err := adm.DeleteEndpoint(e.Ctx, e.P, id, true); err != nil || dropped != 1 {
				t.Fatalf("delete %s: dropped %d, %v", id, dropped, err)
			}
		}
		if list, err := adm.Endpoints(e.Ctx, e.P); err != nil || len(list) != 0 {
			t.Fatalf("after the deletes: %d endpoints, %v", len(list), err)
		}
	})
}
