package outbox_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/store"
)

func (e *env) registered() int {
	e.T.Helper()
	n, err := e.St.(store.Registry).CountRegistered(e.Ctx)
	if err != nil {
		e.T.Fatal(err)
	}
	return n
}

func wantNamespaceLimit(t *testing.T, err error, limit int) {
	t.Helper()
	var over *outbox.NamespaceLimitError
	if !errors.Is(err, outbox.ErrTooManyNamespaces) || !errors.As(err, &over) || over.Max != limit {
		t.Fatalf("%v, want the limit of %d namespaces", err, limit)
	}
}

// Once the store holds its limit of namespaces the first endpoint of
// another is refused, writing nothing, while the namespaces it holds take
// and change endpoints; a namespace emptied makes room.
func TestTheFirstEndpointOfANamespacePastTheLimitIsRefused(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		adm := &outbox.Admin{Store: e.St, Clock: e.Clk, MaxNamespaces: 3}
		put := func(ns, id string) error {
			_, err := adm.PutEndpoint(e.Ctx, store.Partition{Namespace: ns}, id, outbox.EndpointSpec{URL: "https://h.example.com/" + id, Enabled: true})
			return err
		}
		for i := range 3 {
			if err := put(fmt.Sprintf("ns-%d", i), "billing"); err != nil {
				t.Fatalf("namespace %d: %v", i, err)
			}
		}
		before := e.registered()
		wantNamespaceLimit(t, put("ns-3", "billing"), 3)
		if e.registered() != before {
			t.Fatal("a refused namespace was registered")
		}
		if page, err := e.St.Scan(e.Ctx, store.Partition{Namespace: "ns-3"}, "\x00", "\xff", nil, 10); err != nil || len(page.Entries) != 0 {
			t.Fatalf("a refused namespace holds %d rows, %v", len(page.Entries), err)
		}
		if err := put("ns-0", "audit"); err != nil {
			t.Fatalf("a second endpoint: %v", err)
		}
		if err := put("ns-1", "billing"); err != nil {
			t.Fatalf("a change: %v", err)
		}
		if _, err := adm.DeleteEndpoint(e.Ctx, store.Partition{Namespace: "ns-2"}, "billing", false); err != nil {
			t.Fatal(err)
		}
		if err := put("ns-3", "billing"); err != nil {
			t.Fatalf("a namespace once another emptied: %v", err)
		}
		wantNamespaceLimit(t, put("ns-4", "billing"), 3)
		// The default limit is far above.
		dflt := &outbox.Admin{Store: e.St, Clock: e.Clk}
		if _, err := dflt.PutEndpoint(e.Ctx, store.Partition{Namespace: "ns-4"}, "billing", outbox.EndpointSpec{URL: "https://h.example.com/x"}); err != nil {
			t.Fatalf("default limit: %v", err)
		}
	})
}

// New namespaces created at once pass the limit by at most their number,
// each refusal naming the limit; afterwards a new one is refused, and the
// namespaces held keep taking endpoints at once.
func TestConcurrentNewNamespacesStopAtTheLimitLessThoseInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const limit, racers = 5, 32
		adm := &outbox.Admin{Store: e.St, Clock: e.Clk, MaxNamespaces: limit}
		spec := outbox.EndpointSpec{URL: "https://h.example.com/x", Enabled: true}
		race := func(f func(i int) error) []error {
			errs := make([]error, racers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = f(i)
				}()
			}
			close(start)
			wg.Wait()
			return errs
		}
		errs := race(func(i int) error {
			_, err := adm.PutEndpoint(e.Ctx, store.Partition{Namespace: fmt.Sprintf("ns-%02d", i)}, "billing", spec)
			return err
		})
		var held []string
		for i, err := range errs {
			if err == nil {
				held = append(held, fmt.Sprintf("ns-%02d", i))
				continue
			}
			wantNamespaceLimit(t, err, limit)
		}
		if len(held) < limit || len(held) > limit+racers-1 || e.registered() != len(held) {
			t.Fatalf("%d namespaces created, %d registered; the limit is %d", len(held), e.registered(), limit)
		}
		_, err := adm.PutEndpoint(e.Ctx, store.Partition{Namespace: "late"}, "billing", spec)
		wantNamespaceLimit(t, err, limit)
		before := e.registered()
		errs = race(func(i int) error {
			_, err := adm.PutEndpoint(e.Ctx, store.Partition{Namespace: held[i%len(held)]}, fmt.Sprintf("ep%02d", i/len(held)), spec)
			return err
		})
		for i, err := range errs {
			if err != nil && !errors.Is(err, outbox.ErrTooManyEndpoints) && !errors.Is(err, outbox.ErrContended) {
				t.Errorf("endpoint %d of a namespace held: %v", i, err)
			}
		}
		if after := e.registered(); after != before {
			t.Fatalf("%d namespaces registered, %d before", after, before)
		}
	})
}
