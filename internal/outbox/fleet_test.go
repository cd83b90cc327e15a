package outbox_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

func (e *env) fleet() outbox.Fleet {
	e.T.Helper()
	f, err := e.admin().Fleet(e.Ctx)
	if err != nil {
		e.T.Fatalf("fleet: %v", err)
	}
	return f
}

func (e *env) wantFleet(want outbox.Fleet) {
	e.T.Helper()
	if got := e.fleet(); got != want {
		e.T.Fatalf("fleet = %+v, want %+v", got, want)
	}
	e.wantMarksHold(e.P)
}

// wantMarksHold fails when p's marks are not what its rows say.
func (e *env) wantMarksHold(p store.Partition) {
	e.T.Helper()
	changed, err := e.admin().Remark(e.Ctx, p)
	if err != nil {
		e.T.Fatalf("remark %s: %v", p, err)
	}
	if changed {
		e.T.Fatalf("the marks of %s were not what its rows say", p)
	}
}

// The fleet's figures follow each change of an endpoint: an operator's
// disable counts apart from failing, relay's disable and a delete under
// way count failing, and the backlog counts what ingest adds and a delete
// drops.
func TestFleetFollowsEachTransition(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("a", outbox.EndpointSpec{URL: "https://h.example.com/a", Enabled: true})
		e.put("b", outbox.EndpointSpec{URL: "https://h.example.com/b", Enabled: true})
		e.wantFleet(outbox.Fleet{})
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "a", false); err != nil {
			t.Fatal(err)
		}
		e.wantFleet(outbox.Fleet{DisabledNamespaces: 1})
		// Disabled by relay (a 410): failing, and the operator's disable
		// of another endpoint still counts apart.
		e.putEndpoint("b", schema.Endpoint{URL: "https://h.example.com/b", DisabledReason: "gone", DisabledMs: t0})
		e.wantFleet(outbox.Fleet{FailingNamespaces: 1, DisabledNamespaces: 1})
		if _, err := e.admin().Retry(e.Ctx, e.P, "b", true); err != nil {
			t.Fatal(err)
		}
		e.wantFleet(outbox.Fleet{DisabledNamespaces: 1})
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "a", true); err != nil {
			t.Fatal(err)
		}
		e.wantFleet(outbox.Fleet{})
		e.Append(committed("r1"), committed("r2"))
		bl, _ := e.backlog("a")
		bl2, _ := e.backlog("b")
		e.wantFleet(outbox.Fleet{Backlog: schema.Backlog{Rows: bl.Rows + bl2.Rows, Bytes: bl.Bytes + bl2.Bytes}})
		if bl.Rows != 2 {
			t.Fatalf("backlog of a = %+v, want 2 rows", bl)
		}
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "a", true); err != nil {
			t.Fatal(err)
		}
		e.wantFleet(outbox.Fleet{Backlog: bl2})
		// A PUT that disables is an operator's disable; one that enables
		// again clears it.
		e.put("b", outbox.EndpointSpec{URL: "https://h.example.com/b", Enabled: false})
		e.wantFleet(outbox.Fleet{DisabledNamespaces: 1, Backlog: bl2})
		e.put("b", outbox.EndpointSpec{URL: "https://h.example.com/b", Enabled: true})
		e.wantFleet(outbox.Fleet{Backlog: bl2})
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "b", true); err != nil {
			t.Fatal(err)
		}
		e.wantFleet(outbox.Fleet{})
	})
}

// Operators' changes racing each other and ingest over several namespaces
// leave the fleet's figures equal to what the namespaces' summaries count,
// and every namespace's marks as its rows say.
func TestConcurrentChangesKeepTheFleetExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		parts := []store.Partition{{Namespace: "f1"}, {Namespace: "f2"}, {Namespace: "f3"}}
		ids := []string{"x", "y", "z"}
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(w), 7))
				a := e.admin()
				for range 40 {
					p, id := parts[r.IntN(len(parts))], ids[r.IntN(len(ids))]
					var err error
					switch r.IntN(6) {
					case 0, 1:
						_, err = a.PutEndpoint(e.Ctx, p, id, outbox.EndpointSpec{URL: "https://h.example.com/" + id, Enabled: r.IntN(2) == 0})
					case 2:
						_, err = a.SetEnabled(e.Ctx, p, id, r.IntN(2) == 0)
					case 3:
						_, err = a.Retry(e.Ctx, p, id, true)
					case 4:
						_, err = a.DeleteEndpoint(e.Ctx, p, id, true)
					default:
						ap := &outbox.Appender{Store: e.St, Clock: e.Clk}
						_, err = ap.Append(e.Ctx, p, []schema.Outcome{committed(fmt.Sprintf("r-%d-%d", w, r.IntN(1000)))})
					}
					// ErrBacklogUnderflow: a forced delete racing an ingest
					// and a re-creation of its id can find pending rows its
					// backlog does not count (so on main before the fleet's
					// totals too); what the rows hold is still what is
					// checked below.
					if err != nil && !errors.Is(err, outbox.ErrNotFound) && !errors.Is(err, outbox.ErrContended) &&
						!errors.Is(err, outbox.ErrDeleting) && !errors.Is(err, outbox.ErrBacklogUnderflow) {
						t.Errorf("%s/%s: %v", p, id, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		var want outbox.Fleet
		for _, p := range parts {
			e.wantMarksHold(p)
			page, err := e.admin().Namespaces(e.Ctx, nil, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range page.Namespaces {
				if s.Partition != p {
					continue
				}
				if s.Failing > 0 {
					want.FailingNamespaces++
				}
				if s.Disabled > 0 {
					want.DisabledNamespaces++
				}
				want.Backlog.Rows += s.Backlog.Rows
				want.Backlog.Bytes += s.Backlog.Bytes
			}
		}
		if got := e.fleet(); got != want {
			t.Fatalf("fleet = %+v, want what the summaries count, %+v", got, want)
		}
	})
}

// A keyspace written before relay kept the fleet's totals (no marks, no
// bucket totals, no marker) gets them from RebuildFleet, once.
func TestRebuildGivesAnOlderKeyspaceItsFleet(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		client := b.Client(t)
		prefix := redistest.Prefix(t, client)
		st := redistest.NewStore(t, client, redisstore.Options{Prefix: prefix, Buckets: 4})
		e := newEnv(t, st)
		for i := range 6 {
			p := store.Partition{Namespace: fmt.Sprintf("old%d", i)}
			outboxtest.PutEndpoint(t, st, p, "a", schema.Endpoint{Enabled: true})
			// b: enabled, disabled by an operator, or by relay (a 410).
			bEp := schema.Endpoint{Enabled: i%3 == 0}
			if i%3 == 2 {
				bEp.DisabledReason = "gone"
			}
			outboxtest.PutEndpoint(t, st, p, "b", bEp)
			ap := &outbox.Appender{Store: st, Clock: e.Clk}
			if _, err := ap.Append(e.Ctx, p, []schema.Outcome{committed("r1")}); err != nil {
				t.Fatal(err)
			}
		}
		want := e.fleet()
		if want.FailingNamespaces == 0 || want.DisabledNamespaces == 0 || want.Backlog.Rows == 0 {
			t.Fatalf("fleet %+v: the case wants failing, disabled and pending namespaces", want)
		}
		// The older keyspace: no mark, no totals, no marker.
		for i := range 6 {
			p := store.Partition{Namespace: fmt.Sprintf("old%d", i)}
			var b store.Batch
			for _, id := range []string{"a", "b"} {
				b.Delete(schema.ClassFailingMark.Key(id))
				b.Delete(schema.ClassDisabledMark.Key(id))
			}
			if _, err := st.Apply(e.Ctx, p, b); err != nil {
				t.Fatal(err)
			}
		}
		keys := []string{prefix + "totals"}
		for bk := range 4 {
			tag := fmt.Sprintf("%s{%d}", prefix, bk)
			keys = append(keys, tag+":totals", tag+":summed", tag+":flag:1", tag+":flag:2")
		}
		for _, k := range keys {
			if err := client.Del(e.Ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if got := e.fleet(); got != (outbox.Fleet{}) {
			t.Fatalf("fleet of the older keyspace = %+v, want nothing counted", got)
		}
		rebuilt, err := e.admin().RebuildFleet(e.Ctx)
		if err != nil || !rebuilt {
			t.Fatalf("rebuild = %v, %v; want rebuilt", rebuilt, err)
		}
		if got := e.fleet(); got != want {
			t.Fatalf("fleet after the rebuild = %+v, want %+v", got, want)
		}
		if rebuilt, err := e.admin().RebuildFleet(e.Ctx); err != nil || rebuilt {
			t.Fatalf("second rebuild = %v, %v; want nothing done", rebuilt, err)
		}
	})
}
