package delivery

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func (e *env) head() schema.Head {
	e.T.Helper()
	return outboxtest.Head(e.T, e.St, e.P, ep)
}

// pendingRowsOf is the rids of the stream's pending rows, which below its
// head queue what the log no longer does.
func (e *env) pendingRowsOf(id string) []string {
	e.T.Helper()
	start, end, _ := schema.PendingRange(id)
	page, err := e.St.Scan(e.Ctx, e.P, start, end, nil, 100)
	if err != nil {
		e.T.Fatal(err)
	}
	var rids []string
	for _, row := range page.Entries {
		pk, _ := schema.Parse(row.Key)
		rids = append(rids, pk.RID)
	}
	return rids
}

// A fire moves the stream's head past the rows of its page it finished,
// and past a row refused while others were delivered only by giving it a
// pending row: the refused row stays queued, and the next row the page
// did not reach holds the head.
func TestTheHeadMovesPastARefusedRowOnlyWithItsPendingRow(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 3})
		e.seed("a", "b", "c", "d")
		queue := outboxtest.Queue(t, e.St, e.P, ep)
		sink := &refusing{e: e, refuse: map[string]bool{"b": true}}
		e.fire(&Handler{Sink: sink, Clock: e.Clk, MaxRows: 3})
		if got := sink.rids(); !slices.Contains(got, "a") || !slices.Contains(got, "c") {
			t.Fatalf("delivered %v, want a and c", got)
		}
		if h := e.head(); h.Seq != queue[3].Seq {
			t.Fatalf("head at %d, want d's %d: past the page, b kept", h.Seq, queue[3].Seq)
		}
		if got := e.pendingRowsOf(ep); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("pending rows %v, want b's alone", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"b", "d"}) {
			t.Fatalf("queue %v, want b and d", got)
		}
		// Taken at last, b leaves no row behind.
		sink.refuse = nil
		for fires := 0; e.backlogRows() > 0; fires++ {
			if fires == 5 {
				t.Fatalf("backlog %d after %d fires", e.backlogRows(), fires)
			}
			e.fireAtDue(&Handler{Sink: sink, Clock: e.Clk, MaxRows: 3})
		}
		if e.backlogRows() != 0 || len(e.pending()) != 0 || len(e.pendingRowsOf(ep)) != 0 {
			t.Fatalf("backlog %d, queue %v, pending rows %v", e.backlogRows(), e.pending(), e.pendingRowsOf(ep))
		}
	})
}

// An endpoint that takes nothing moves no head and keeps nothing: its rows
// stay in the log rather than each get a pending row.
func TestAFailingEndpointKeepsItsRowsInTheLog(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, MaxInFlight: 4})
		e.seed("a", "b", "c")
		before := e.head()
		sink := &refusing{e: e, refuse: map[string]bool{"*": true}}
		e.fire(&Handler{Sink: sink, Clock: e.Clk})
		if len(sink.called) == 0 {
			t.Fatal("no call was made")
		}
		if h := e.head(); h != before {
			t.Fatalf("head %+v, want %+v: nothing was delivered", h, before)
		}
		if got := e.pendingRowsOf(ep); len(got) != 0 {
			t.Fatalf("pending rows %v of a stream that delivered nothing", got)
		}
		if got := e.pending(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("queue %v", got)
		}
	})
}

// A page that found only other streams' log rows is no failure: the
// stream is due again at once, past them, with no backoff.
func TestAPageOfOtherStreamsRowsIsDueAgainAtOnce(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint(schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		// Disabled, so only the stream under test fires: its rows are the
		// log's others.
		outboxtest.PutEndpoint(t, e.St, e.P, "all", schema.Endpoint{Enabled: false})
		e.append(outboxtest.Aborted("first"))
		var many []schema.Outcome
		for i := range 20 {
			many = append(many, committed(fmt.Sprintf("c-%02d", i)))
		}
		e.append(many...)
		e.append(outboxtest.Aborted("last"))
		sink := &capture{}
		h := &Handler{Sink: sink, Clock: e.Clk, MaxRows: 1}
		e.Clk.Set(e.timerDue())
		for fires := 0; e.backlogRows() > 0; fires++ {
			if fires == 30 {
				t.Fatalf("backlog %d after %d fires", e.backlogRows(), fires)
			}
			if _, ok := e.timer(); !ok {
				t.Fatal("the stream's timer ended with rows left")
			}
			if due := e.timerDue(); due > e.NowMs() {
				t.Fatalf("due %d ms later after a page of other streams' rows", due-e.NowMs())
			}
			e.fire(h)
		}
		if got := sink.rids(); !slices.Equal(got, []string{"first", "last"}) {
			t.Fatalf("delivered %v", got)
		}
		if h := e.head(); !h.Found {
			t.Fatal("no head")
		}
		// The head went past the rows the pages examined.
		if got := outboxtest.Queue(t, e.St, e.P, ep); len(got) != 0 {
			t.Fatalf("queue %+v", got)
		}
	})
}

// logScans records the limits of a store's scans of the log; it hides the
// store's MultiReader.
type logScans struct {
	store.NamespaceStore
	mu     sync.Mutex
	limits []int
}

func (s *logScans) Scan(ctx context.Context, p store.Partition, start, end store.Key, after *store.Cursor, limit int) (store.Page, error) {
	if pk, ok := schema.Parse(start); ok && pk.Class == schema.ClassLog {
		s.mu.Lock()
		s.limits = append(s.limits, limit)
		s.mu.Unlock()
	}
	return s.NamespaceStore.Scan(ctx, p, start, end, after, limit)
}

// A fire reads a dense page of the log for an endpoint that takes every
// kind, nearly all of whose log rows are its own, and twice its rows for
// one whose filter takes some kinds only.
func TestAFireReadsADensePageForAnEndpointTakingEveryKind(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		kinds []schema.Kind
		want  int
	}{
		{"every kind", nil, 20 + outbox.QueueLogSlack},
		{"some kinds", []schema.Kind{schema.KindCommitted}, outbox.QueueLogRows * 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachBackend(t, func(t *testing.T, e *env) {
				e.putEndpoint(schema.Endpoint{Enabled: true, Kinds: tc.kinds})
				var rids []string
				for i := range 25 {
					rids = append(rids, fmt.Sprintf("r-%02d", i))
				}
				e.seed(rids...)
				sink := &refusing{e: e}
				scans := &logScans{NamespaceStore: e.St}
				e.St = scans
				e.fire(&Handler{Sink: sink, Clock: e.Clk, MaxRows: 20})
				e.St = scans.NamespaceStore
				if got := sink.rids(); !slices.Equal(got, rids[:20]) {
					t.Fatalf("delivered %v, want the first 20", got)
				}
				if !slices.Equal(scans.limits, []int{tc.want}) {
					t.Fatalf("log scans of %v rows, want one of %d", scans.limits, tc.want)
				}
			})
		})
	}
}
