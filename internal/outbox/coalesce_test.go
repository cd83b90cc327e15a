package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// countingStore counts Applies and lets a test get in front of each.
type countingStore struct {
	store.NamespaceStore
	applies atomic.Int64
	// before runs ahead of Apply n (from 1) with its context; an error
	// fails that Apply.
	before func(ctx context.Context, n int64) error
}

func (s *countingStore) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	n := s.applies.Add(1)
	if s.before != nil {
		if err := s.before(ctx, n); err != nil {
			return store.Result{}, err
		}
	}
	return s.NamespaceStore.Apply(ctx, p, b)
}

type answer struct {
	statuses []outbox.Status
	err      error
}

// held is a Coalescer whose first combined Append is held in its first
// Apply until release, so that the requests a test sends meanwhile queue
// behind it.
type held struct {
	t  *testing.T
	e  *env
	co *outbox.Coalescer
	st *countingStore
	// first is the answer of the held request.
	first <-chan answer
	// applyCtxErr is the error of the held Apply's context once released.
	applyCtxErr chan error
	// fail, set before release, fails Applies after the first.
	fail    func(n int64) error
	release func()
}

func hold(t *testing.T, e *env, maxOutcomes int, ctx context.Context, first ...schema.Outcome) *held {
	t.Helper()
	entered, released := make(chan struct{}), make(chan struct{})
	h := &held{t: t, e: e, applyCtxErr: make(chan error, 1)}
	h.release = sync.OnceFunc(func() { close(released) })
	t.Cleanup(h.release)
	h.st = &countingStore{NamespaceStore: e.St, before: func(ctx context.Context, n int64) error {
		if n == 1 {
			close(entered)
			<-released
			h.applyCtxErr <- ctx.Err()
			return nil
		}
		if h.fail != nil {
			return h.fail(n)
		}
		return nil
	}}
	h.co = &outbox.Coalescer{Appender: &outbox.Appender{Store: h.st, Clock: e.Clk}, MaxOutcomes: maxOutcomes}
	h.first = h.start(ctx, first...)
	<-entered
	return h
}

// start sends a request.
func (h *held) start(ctx context.Context, outcomes ...schema.Outcome) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		st, err := h.co.Append(ctx, h.e.P, outcomes)
		ch <- answer{st, err}
	}()
	return ch
}

// send sends a request and returns once it is queued, so the requests of
// successive sends queue in that order.
func (h *held) send(ctx context.Context, outcomes ...schema.Outcome) <-chan answer {
	h.t.Helper()
	n := h.co.Stats().Queued
	ch := h.start(ctx, outcomes...)
	h.waitQueued(n + 1)
	return ch
}

// waitQueued spins until n requests are queued. Queueing has no signal, and
// tests do not sleep.
func (h *held) waitQueued(n int) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.co.Stats().Queued != n {
		if time.Now().After(deadline) {
			h.t.Fatalf("%d requests queued, want %d", h.co.Stats().Queued, n)
		}
		runtime.Gosched()
	}
}

// idle checks that no request waits and no flusher runs.
func idle(t *testing.T, co *outbox.Coalescer) {
	t.Helper()
	if s := co.Stats(); s != (outbox.CoalescerStats{}) {
		t.Errorf("after every request returned: %+v", s)
	}
}

// appendsOf groups the reservation ids accepted into e by the Append call
// that wrote their seen rows, each group sorted, the groups in order.
func appendsOf(e *env) [][]string {
	e.T.Helper()
	start, end := schema.SeenRange()
	by := map[[8]byte][]string{}
	for _, row := range e.scan(start, end) {
		pk, ok := schema.Parse(row.Key)
		if !ok {
			e.T.Fatalf("bad seen key %q", row.Key)
		}
		s, err := schema.DecodeSeen(row.Value)
		if err != nil {
			e.T.Fatal(err)
		}
		by[s.Writer] = append(by[s.Writer], pk.RID)
	}
	var out [][]string
	for _, rids := range by {
		slices.Sort(rids)
		out = append(out, rids)
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return out
}

func expectCodes(t *testing.T, name string, a answer, want ...outbox.Code) {
	t.Helper()
	if a.err != nil {
		t.Errorf("%s: %v", name, a.err)
		return
	}
	if got := codes(a.statuses); !reflect.DeepEqual(got, want) {
		t.Errorf("%s: %v, want %v", name, got, want)
	}
}

func TestCoalescedConcurrentRequestsAreEachAcceptedOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		st := &countingStore{NamespaceStore: e.St}
		co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
		const n = 64
		round := func(want outbox.Code) {
			var wg sync.WaitGroup
			answers := make([]answer, n)
			for i := range n {
				wg.Go(func() {
					statuses, err := co.Append(e.Ctx, e.P, []schema.Outcome{committed(fmt.Sprintf("r-%d", i))})
					answers[i] = answer{statuses, err}
				})
			}
			wg.Wait()
			for i, a := range answers {
				expectCodes(t, fmt.Sprintf("r-%d", i), a, want)
			}
		}
		round(outbox.Accepted)
		round(outbox.Duplicate)
		idle(t, co)
		if e.sequence() != n {
			t.Errorf("sequence %d, want %d", e.sequence(), n)
		}
		for _, ep := range []string{"billing", "audit"} {
			b, _ := e.backlog(ep)
			p := e.pending(ep)
			if b.Rows != n || len(p) != n {
				t.Errorf("%s: backlog %+v, %d pending, want %d", ep, b, len(p), n)
			}
			for i := range n {
				if _, ok := e.record(ep, fmt.Sprintf("r-%d", i)); !ok {
					t.Errorf("%s: no record of r-%d", ep, i)
				}
			}
		}
		t.Logf("%d requests, %d applies", 2*n, st.applies.Load())
	})
}

// While one combined Append is in flight, the requests that arrive go
// together in the next: 63 requests of one outcome in ceil(63/10) Appends,
// each one Apply here (one endpoint, 10 outcomes fit a batch).
func TestRequestsQueuedBehindAnAppendInFlightAreCombined(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		const n, maxOutcomes = 64, 10
		h := hold(t, e, maxOutcomes, e.Ctx, committed("r-00"))
		var queued []<-chan answer
		for i := 1; i < n; i++ {
			queued = append(queued, h.start(e.Ctx, committed(fmt.Sprintf("r-%02d", i))))
		}
		h.waitQueued(n - 1)
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		for i, ch := range queued {
			expectCodes(t, fmt.Sprintf("r-%02d", i+1), <-ch, outbox.Accepted)
		}
		idle(t, h.co)
		const most = 1 + (n-1+maxOutcomes-1)/maxOutcomes
		if got := h.st.applies.Load(); got > most {
			t.Errorf("%d requests took %d applies, want at most %d", n, got, most)
		}
		appends := appendsOf(e)
		if len(appends) > most {
			t.Errorf("%d requests took %d appends, want at most %d", n, len(appends), most)
		}
		for _, a := range appends {
			if len(a) > maxOutcomes {
				t.Errorf("one append stored %d outcomes, more than %d", len(a), maxOutcomes)
			}
		}
		if b, _ := e.backlog("billing"); b.Rows != n || len(e.pending("billing")) != n {
			t.Errorf("backlog %+v, want %d rows", b, n)
		}
	})
}

func TestACombinedAppendTakesWholeRequestsInOrderUpToMaxOutcomes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		request := func(name string, size int) []schema.Outcome {
			var out []schema.Outcome
			for i := range size {
				out = append(out, committed(fmt.Sprintf("%s-%d", name, i)))
			}
			return out
		}
		h := hold(t, e, 3, e.Ctx, request("a", 2)...)
		// b+c fill 3; d alone, as e would make 4; e+f; g; h, larger than
		// MaxOutcomes, alone.
		sizes := []int{2, 1, 2, 2, 1, 1, 4}
		var queued []<-chan answer
		for i, size := range sizes {
			queued = append(queued, h.send(e.Ctx, request(string(rune('b'+i)), size)...))
		}
		h.release()
		expectCodes(t, "a", <-h.first, outbox.Accepted, outbox.Accepted)
		for i, ch := range queued {
			want := slices.Repeat([]outbox.Code{outbox.Accepted}, sizes[i])
			expectCodes(t, string(rune('b'+i)), <-ch, want...)
		}
		idle(t, h.co)
		want := [][]string{
			{"a-0", "a-1"},
			{"b-0", "b-1", "c-0"},
			{"d-0", "d-1"},
			{"e-0", "e-1", "f-0"},
			{"g-0"},
			{"h-0", "h-1", "h-2", "h-3"},
		}
		if got := appendsOf(e); !reflect.DeepEqual(got, want) {
			t.Errorf("appends stored %v, want %v", got, want)
		}
	})
}

// Requests of one combined Append are answered as if sent one after another
// in arrival order.
func TestRequestsOfOneCombinedAppendAnswerAsIfSentInTurn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		h := hold(t, e, 0, e.Ctx, committed("r-0"))
		different := committed("r-1")
		different.Committed.BytesStored++
		bad := committed("r-bad")
		bad.Repository = ""
		first := h.send(e.Ctx, committed("r-1"))
		again := h.send(e.Ctx, committed("r-1"))
		conflict := h.send(e.Ctx, different)
		mixed := h.send(e.Ctx, bad, committed("r-2"))
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		expectCodes(t, "first", <-first, outbox.Accepted)
		expectCodes(t, "same outcome", <-again, outbox.Duplicate)
		expectCodes(t, "different outcome", <-conflict, outbox.Conflict)
		expectCodes(t, "mixed", <-mixed, outbox.Invalid, outbox.Accepted)
		idle(t, h.co)
		if got, want := appendsOf(e), [][]string{{"r-0"}, {"r-1", "r-2"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("appends stored %v, want %v", got, want)
		}
		if v, _ := e.record("billing", "r-1"); !reflect.DeepEqual(v.Record, mustRecord(t, committed("r-1"))) {
			t.Error("r-1 is not the outcome of the first request")
		}
	})
}

func TestARequestCanceledWhileQueuedLeavesAndStoresNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		h := hold(t, e, 0, e.Ctx, committed("r-0"))
		ctx, cancel := context.WithCancel(e.Ctx)
		gone := h.send(ctx, committed("r-gone"))
		kept := h.send(e.Ctx, committed("r-kept"))
		cancel()
		if a := <-gone; !errors.Is(a.err, context.Canceled) || a.statuses != nil {
			t.Errorf("canceled request: %v %v", a.statuses, a.err)
		}
		if q := h.co.Stats().Queued; q != 1 {
			t.Errorf("%d requests queued after one left, want 1", q)
		}
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		expectCodes(t, "kept", <-kept, outbox.Accepted)
		idle(t, h.co)
		if _, ok := e.record("billing", "r-gone"); ok {
			t.Error("the canceled request's outcome was stored")
		}
		if got, want := appendsOf(e), [][]string{{"r-0"}, {"r-kept"}}; !reflect.DeepEqual(got, want) {
			t.Errorf("appends stored %v, want %v", got, want)
		}
		if e.sequence() != 2 {
			t.Errorf("sequence %d, want 2", e.sequence())
		}
	})
}

// A request that goes away while its combined Append runs returns at once;
// the Append goes on, for it and for the others.
func TestARequestThatGivesUpDoesNotCancelItsCombinedAppend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		ctx, cancel := context.WithCancel(e.Ctx)
		h := hold(t, e, 0, ctx, committed("r-0"))
		next := h.send(e.Ctx, committed("r-1"))
		cancel()
		if a := <-h.first; !errors.Is(a.err, context.Canceled) {
			t.Errorf("the request that gave up: %v %v", a.statuses, a.err)
		}
		h.release()
		if err := <-h.applyCtxErr; err != nil {
			t.Errorf("the combined Append ran under a context that ended: %v", err)
		}
		expectCodes(t, "next", <-next, outbox.Accepted)
		idle(t, h.co)
		if _, ok := e.record("billing", "r-0"); !ok {
			t.Error("the outcome of the request that gave up was not stored")
		}
	})
}

func TestAnAppendErrorReachesEveryRequestItCombines(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		h := hold(t, e, 0, e.Ctx, committed("r-0"))
		boom := errors.New("boom")
		h.fail = func(int64) error { return boom }
		var queued []<-chan answer
		for i := 1; i <= 3; i++ {
			queued = append(queued, h.start(e.Ctx, committed(fmt.Sprintf("r-%d", i))))
		}
		h.waitQueued(3)
		h.release()
		expectCodes(t, "held", <-h.first, outbox.Accepted)
		for i, ch := range queued {
			if a := <-ch; !errors.Is(a.err, boom) || a.statuses != nil {
				t.Errorf("r-%d: %v %v, want the store's error", i+1, a.statuses, a.err)
			}
		}
		idle(t, h.co)
		if got := h.st.applies.Load(); got != 2 {
			t.Errorf("%d applies, want the held one and one failed", got)
		}
		if e.sequence() != 1 {
			t.Errorf("sequence %d, want 1", e.sequence())
		}
	})
}

func TestCoalescerRefusesBadInputWithoutQueueing(t *testing.T) {
	e := newEnv(t, redistest.Miniredis(t))
	st := &countingStore{NamespaceStore: e.St}
	co := &outbox.Coalescer{Appender: &outbox.Appender{Store: st, Clock: e.Clk}}
	many := make([]schema.Outcome, outbox.MaxAppendOutcomes+1)
	for i := range many {
		many[i] = committed(fmt.Sprintf("r-%d", i))
	}
	if _, err := co.Append(e.Ctx, e.P, many); !errors.Is(err, outbox.ErrInvalid) {
		t.Errorf("%d outcomes: %v, want ErrInvalid", len(many), err)
	}
	if _, err := co.Append(e.Ctx, store.Partition{Namespace: "Bad!"}, many[:1]); !errors.Is(err, store.ErrInvalidPartition) {
		t.Errorf("bad partition: %v", err)
	}
	canceled, cancel := context.WithCancel(e.Ctx)
	cancel()
	if _, err := co.Append(canceled, e.P, many[:1]); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: %v", err)
	}
	for _, bad := range []*outbox.Coalescer{
		{},
		{Appender: co.Appender, MaxOutcomes: outbox.MaxAppendOutcomes + 1},
		{Appender: co.Appender, MaxOutcomes: -1},
		{Appender: co.Appender, Timeout: -time.Second},
	} {
		if _, err := bad.Append(e.Ctx, e.P, many[:1]); err == nil {
			t.Errorf("%+v appended", bad)
		}
		idle(t, bad)
	}
	idle(t, co)
	if n := st.applies.Load(); n != 0 {
		t.Errorf("%d applies for refused requests", n)
	}
}

// BenchmarkCoalescedAppend is BenchmarkAppendContended through a Coalescer:
// single-outcome requests from 64 goroutines (on 2 CPUs) into one namespace
// with two endpoints, on the real Redis. It reports requests per second and
// per store batch (about ten outcomes for two endpoints fill one).
func BenchmarkCoalescedAppend(b *testing.B) {
	st := redistest.Real(b)
	ctx := context.Background()
	p := store.Partition{Namespace: "coalesced"}
	for _, id := range []string{"billing", "audit"} {
		outboxtest.PutEndpoint(b, st, p, id, schema.Endpoint{Enabled: true})
	}
	counting := &countingStore{NamespaceStore: st}
	co := &outbox.Coalescer{Appender: &outbox.Appender{Store: counting, Clock: clock.System{}}}
	var next atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			o := schema.Outcome{ReservationID: fmt.Sprintf("r-%d", next.Add(1)), Repository: "acme/widgets",
				OccurredUnixMs: 1_764_460_800_000, Expired: &schema.Expired{}}
			st, err := co.Append(ctx, p, []schema.Outcome{o})
			if err != nil {
				b.Error(err)
				return
			}
			if st[0].Code != outbox.Accepted {
				b.Errorf("%s: %s", o.ReservationID, st[0].Code)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "requests/s")
	b.ReportMetric(float64(b.N)/float64(counting.applies.Load()), "requests/apply")
}
