package outbox_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// namespaces is every namespace Admin.Namespaces lists, walking pages of
// limit.
func namespaces(t *testing.T, e *env, limit int) []outbox.NamespaceSummary {
	t.Helper()
	var all []outbox.NamespaceSummary
	var c []byte
	for {
		page, err := e.admin().Namespaces(e.Ctx, c, limit)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Namespaces...)
		if page.Next == nil {
			return all
		}
		c = page.Next
	}
}

func summaryOf(t *testing.T, e *env, p store.Partition) (outbox.NamespaceSummary, bool) {
	t.Helper()
	var found []outbox.NamespaceSummary
	for _, s := range namespaces(t, e, 100) {
		if s.Partition == p {
			found = append(found, s)
		}
	}
	if len(found) > 1 {
		t.Fatalf("%s is listed %d times", p, len(found))
	}
	if len(found) == 0 {
		return outbox.NamespaceSummary{}, false
	}
	return found[0], true
}

// A namespace is listed from its first endpoint to the deletion of its
// last, with its endpoints counted and its backlogs summed.
func TestNamespacesListsANamespaceWhileItHasAnEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		if _, ok := summaryOf(t, e, e.P); ok {
			t.Fatal("a namespace with no endpoint is listed")
		}
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		e.Append(committed("a"), aborted("b"), committed("c"))
		var want schema.Backlog
		for _, id := range []string{"billing", "audit"} {
			bl, _ := e.backlog(id)
			want.Rows, want.Bytes = want.Rows+bl.Rows, want.Bytes+bl.Bytes
		}
		if want.Rows != 4 {
			t.Fatalf("set-up: backlog of %d rows, want 4", want.Rows)
		}
		s, ok := summaryOf(t, e, e.P)
		if !ok || s.Endpoints != 2 || s.Backlog != want {
			t.Fatalf("summary %+v (listed %v), want 2 endpoints and backlog %+v", s, ok, want)
		}

		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "audit", true); err != nil {
			t.Fatal(err)
		}
		if s, ok := summaryOf(t, e, e.P); !ok || s.Endpoints != 1 {
			t.Fatalf("after deleting one of two: %+v, listed %v", s, ok)
		}
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		if s, ok := summaryOf(t, e, e.P); ok {
			t.Fatalf("after deleting the last endpoint: %+v is still listed", s)
		}
		// Its other rows (the sequence, the seen rows) do not list it.
		if len(e.all()) == 0 {
			t.Fatal("set-up: the namespace should keep its sequence and seen rows")
		}
	})
}

// A forced delete drops a stream's rows over several batches and the
// endpoint last: after every one of them the registry says what the
// endpoint rows say, and a delete cut short leaves the namespace listed.
func TestNamespacesFollowEveryBatchOfAForcedDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		// Enough rows for several batches of leftovers.
		for i := range 60 * store.MaxBatchOps / 100 {
			e.Append(committed(fmt.Sprintf("r-%d", i)))
		}
		key, _ := schema.EndpointKey("billing")
		batches := 0
		check := func() {
			t.Helper()
			_, has := e.Get(key)
			_, listed := summaryOf(t, e, e.P)
			if has != listed {
				t.Fatalf("after batch %d: endpoint row present %v, listed %v", batches, has, listed)
			}
		}
		cut := errors.New("cut short")
		adm := e.admin()
		adm.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
			if n == 3 {
				return store.Result{}, cut
			}
			res, err := apply()
			batches++
			check()
			return res, err
		}}
		if _, err := adm.DeleteEndpoint(e.Ctx, e.P, "billing", true); !errors.Is(err, cut) {
			t.Fatalf("cut delete: %v", err)
		}
		if _, ok := summaryOf(t, e, e.P); !ok {
			t.Fatal("a delete cut short must leave the namespace listed")
		}
		adm.Store.(*scripted).n = 3
		if _, err := adm.DeleteEndpoint(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		if batches < 4 {
			t.Fatalf("the delete took %d batches; the test wants several", batches)
		}
		if _, ok := summaryOf(t, e, e.P); ok {
			t.Fatal("a finished delete must unlist the namespace")
		}
	})
}

// Pages of every size list each namespace once, in the registry's order,
// and a store without a registry is refused.
func TestNamespacesPagesInRegistryOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		reg := e.St.(store.Registry)
		var want []store.Partition
		for i := range 150 {
			p := store.Partition{Namespace: fmt.Sprintf("ns-%03d", i)}
			if _, err := e.admin().PutEndpoint(e.Ctx, p, "ep", outbox.EndpointSpec{URL: "https://hooks.example.com/ep", Enabled: i%2 == 0}); err != nil {
				t.Fatal(err)
			}
			want = append(want, p)
		}
		slices.SortFunc(want, func(a, b store.Partition) int {
			if d := reg.BucketOf(a) - reg.BucketOf(b); d != 0 {
				return d
			}
			return compare(a.Namespace, b.Namespace)
		})
		for _, limit := range []int{1, 13, 1000} {
			var got []store.Partition
			for _, s := range namespaces(t, e, limit) {
				if s.Endpoints != 1 || s.Backlog != (schema.Backlog{}) {
					t.Fatalf("summary %+v, want one endpoint and no backlog", s)
				}
				got = append(got, s.Partition)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("pages of %d listed %d namespaces, want %d in order", limit, len(got), len(want))
			}
		}
		bare := &outbox.Admin{Store: struct{ store.NamespaceStore }{e.St}, Clock: e.Clk}
		if _, err := bare.Namespaces(e.Ctx, nil, 10); !errors.Is(err, outbox.ErrNoRegistry) {
			t.Fatalf("a store without a registry: %v, want ErrNoRegistry", err)
		}
		for _, bad := range [][]byte{{}, {0xff}, store.RegistryCursor{Bucket: reg.Buckets()}.Bytes(), []byte("\x00NS")} {
			if _, err := e.admin().Namespaces(e.Ctx, bad, 10); !errors.Is(err, outbox.ErrInvalid) {
				t.Fatalf("cursor %q: %v, want ErrInvalid", bad, err)
			}
		}
	})
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A namespace counts as failing the endpoints that need an operator: one
// disabled, one whose stream backs off after failed fires, one whose timer
// state does not decode; a healthy stream and other timers count nothing.
func TestNamespacesCountTheFailingEndpoints(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for _, id := range []string{"audit", "billing", "ledger", "ops"} {
			e.put(id, outbox.EndpointSpec{Enabled: true})
		}
		e.Append(committed("a"))
		summary := func() outbox.NamespaceSummary {
			t.Helper()
			s, ok := summaryOf(t, e, e.P)
			if !ok {
				t.Fatal("not listed")
			}
			return s
		}
		failing := func() int { t.Helper(); return summary().Failing }
		if n := failing(); n != 0 {
			t.Fatalf("%d failing among healthy streams", n)
		}
		// Disabled by an operator: on purpose, not failing, even with a
		// stream that failed before.
		e.put("ledger", outbox.EndpointSpec{Enabled: false})
		if s := summary(); s.Failing != 0 || s.Disabled != 1 {
			t.Fatalf("failing %d, disabled %d with one disabled by an operator, want 0 and 1", s.Failing, s.Disabled)
		}
		// Disabled by relay, after a 410: failing.
		outboxtest.PutEndpoint(t, e.St, e.P, "ops", schema.Endpoint{Enabled: false, DisabledReason: "gone"})
		if s := summary(); s.Failing != 1 || s.Disabled != 1 {
			t.Fatalf("failing %d, disabled %d with one gone, want 1 and 1", s.Failing, s.Disabled)
		}
		outboxtest.PutEndpoint(t, e.St, e.P, "ops", schema.Endpoint{Enabled: true})
		if n := failing(); n != 0 {
			t.Fatalf("%d failing once ops is enabled again, want 0", n)
		}
		e.put("ledger", outbox.EndpointSpec{Enabled: true})
		if n := failing(); n != 0 {
			t.Fatalf("%d failing once ledger is enabled again, want 0", n)
		}
		e.put("ledger", outbox.EndpointSpec{Enabled: false})
		replace := func(id string, state []byte) {
			t.Helper()
			row, ok := e.deliveryTimer(id)
			if !ok {
				t.Fatalf("no timer of %s", id)
			}
			var b store.Batch
			row.Replace(&b, row.DueAtMs+60_000, state)
			if res := e.Apply(b); !res.Committed {
				t.Fatalf("replace the timer of %s: %+v", id, res)
			}
		}
		replace("billing", deliveryState(t, 3))
		replace("ledger", deliveryState(t, 3))
		if n := failing(); n != 1 {
			t.Fatalf("%d failing with one backing off, want 1", n)
		}
		replace("audit", []byte{0xff})
		if n := failing(); n != 2 {
			t.Fatalf("%d failing with a corrupt timer, want 2", n)
		}
		replace("billing", deliveryState(t, 0))
		if s := summary(); s.Failing != 1 || s.Disabled != 1 {
			t.Fatalf("failing %d, disabled %d once billing delivered again, want 1 and 1", s.Failing, s.Disabled)
		}
	})
}
