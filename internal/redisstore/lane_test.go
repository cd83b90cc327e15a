package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// gate holds the first script call sent alone once armed, until released,
// and notes how many calls each pipeline carried. onPipeline, when set,
// runs before a pipeline is sent.
type gate struct {
	armed      atomic.Bool
	entered    chan struct{}
	release    chan struct{}
	onPipeline func(ctx context.Context)

	mu        sync.Mutex
	pipelines []int
}

func newGate(s *redisstore.Store) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	s.Client().AddHook(g)
	return g
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && g.armed.CompareAndSwap(true, false) {
			close(g.entered)
			<-g.release
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == "evalsha" {
			g.mu.Lock()
			g.pipelines = append(g.pipelines, len(cmds))
			g.mu.Unlock()
			if g.onPipeline != nil {
				g.onPipeline(ctx)
			}
		}
		return next(ctx, cmds)
	}
}

func claimBatch(id string) store.Batch {
	var b store.Batch
	b.RequireAbsent(store.Key("claim/" + id))
	b.Put(store.Key("claim/"+id), []byte(id))
	return b
}

// holdFirstRound starts an Apply whose call is held in flight by g, and
// returns once it is.
func holdFirstRound(t *testing.T, s *redisstore.Store, g *gate) <-chan error {
	t.Helper()
	g.armed.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := s.Apply(context.Background(), store.Partition{Namespace: "first"}, claimBatch("first"))
		first <- err
	}()
	<-g.entered
	return first
}

// queueApplies starts an Apply on each namespace and returns once all of
// them queue behind the round in flight.
func queueApplies(t *testing.T, s *redisstore.Store, ctx context.Context, nss []string) []chan error {
	t.Helper()
	queued := s.QueuedCalls()
	var done []chan error
	for _, ns := range nss {
		ch := make(chan error, 1)
		done = append(done, ch)
		go func() {
			r, err := s.Apply(ctx, store.Partition{Namespace: ns}, claimBatch(ns))
			if err == nil && !r.Committed {
				err = errors.New("not committed")
			}
			ch <- err
		}()
	}
	for s.QueuedCalls() < queued+len(nss) {
		runtime.Gosched()
	}
	return done
}

// master is the address of the master serving ns, "" off a Cluster.
func master(t *testing.T, s *redisstore.Store, ns string) string {
	t.Helper()
	cc, ok := s.Client().(*redis.ClusterClient)
	if !ok {
		return ""
	}
	node, err := cc.MasterForKey(t.Context(), s.PartitionKeys(store.Partition{Namespace: ns})[0])
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}

// namespaces is n namespaces named prefix and a number whose master is
// (or, with same false, is not) the master of "first".
func namespaces(t *testing.T, s *redisstore.Store, prefix string, n int, same bool) []string {
	t.Helper()
	want := master(t, s, "first")
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 10_000 {
			t.Fatalf("no namespace of %s on the master of first: %v", prefix, same)
		}
		ns := prefix + strconv.Itoa(i)
		if (master(t, s, ns) == want) == same {
			out = append(out, ns)
		}
	}
	return out
}

func wantClaimed(t *testing.T, s *redisstore.Store, ns string, want bool) {
	t.Helper()
	_, found, err := s.Get(t.Context(), store.Partition{Namespace: ns}, store.Key("claim/"+ns))
	if err != nil {
		t.Fatal(err)
	}
	if found != want {
		t.Errorf("%s: claimed %v, want %v", ns, found, want)
	}
}

// roundBehindTheFirst holds a first Apply in flight, queues an Apply on
// each of n namespaces behind it, releases it, and checks that every one
// committed.
func roundBehindTheFirst(t *testing.T, s *redisstore.Store, g *gate, prefix string, n int) {
	t.Helper()
	first := holdFirstRound(t, s, g)
	nss := namespaces(t, s, prefix, n, true)
	queued := queueApplies(t, s, t.Context(), nss)
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("the first apply: %v", err)
	}
	for i, ch := range queued {
		if err := <-ch; err != nil {
			t.Errorf("queued apply %d: %v", i, err)
		}
		wantClaimed(t, s, nss[i], true)
	}
}

// Applies that arrive while one is in flight go together in the next
// round, one pipeline, each still atomic and answered alone.
func TestAppliesQueuedBehindARoundGoAsOnePipeline(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		g := newGate(s)
		roundBehindTheFirst(t, s, g, "queued-", 5)
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.pipelines) != 1 || g.pipelines[0] != 5 {
			t.Errorf("pipelines of %v calls, want one of 5", g.pipelines)
		}
	})
}

// A queued Apply whose ctx ends leaves the queue unsent: its batch is not
// applied, and the others still go.
func TestAQueuedApplyWhoseContextEndsIsNeverSent(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		g := newGate(s)
		first := holdFirstRound(t, s, g)
		ctx, cancel := context.WithCancel(t.Context())
		goneNss, stayNss := namespaces(t, s, "gone-", 2, true), namespaces(t, s, "stay-", 1, true)
		gone := queueApplies(t, s, ctx, goneNss)
		stay := queueApplies(t, s, t.Context(), stayNss)
		cancel()
		for i, ch := range gone {
			select {
			case err := <-ch:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("apply %d whose ctx ended: %v, want context.Canceled", i, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("apply %d whose ctx ended still waits for the round in flight", i)
			}
		}
		if n := s.QueuedCalls(); n != 1 {
			t.Errorf("%d calls queued after two left, want 1", n)
		}
		close(g.release)
		if err := <-first; err != nil {
			t.Fatalf("the first apply: %v", err)
		}
		if err := <-stay[0]; err != nil {
			t.Errorf("the apply that stayed: %v", err)
		}
		wantClaimed(t, s, goneNss[0], false)
		wantClaimed(t, s, goneNss[1], false)
		wantClaimed(t, s, stayNss[0], true)
	})
}

// A round that finds the scripts gone from the server sends its calls
// again with their source.
func TestARoundSurvivesScriptFlush(t *testing.T) {
	redistest.EachFlushable(t, func(t *testing.T, b redistest.Backend) {
		t.Parallel()
		s := b.New(t)
		g := newGate(s)
		g.onPipeline = func(ctx context.Context) {
			if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
			}
		}
		roundBehindTheFirst(t, s, g, "flushed-", 4)
	})
}

// A batch of more operations than a round takes goes at once, alone, past
// a round in flight to its master; one within the bound queues.
func TestALargeBatchGoesPastARoundInFlight(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		g := newGate(s)
		// Every Apply started is seen through before the test's clean-up,
		// failed or not, so none writes after it.
		var pending []<-chan error
		defer func() {
			close(g.release)
			for _, ch := range pending {
				if err := <-ch; err != nil {
					t.Errorf("apply: %v", err)
				}
			}
		}()
		pending = append(pending, holdFirstRound(t, s, g))
		nss := namespaces(t, s, "large-", 2, true)
		apply := func(ns string, ops int) <-chan error {
			var b store.Batch
			for i := range ops {
				b.Put(store.Key("row/"+ns+"/"+strconv.Itoa(i)), []byte(ns))
			}
			done := make(chan error, 1)
			go func() {
				_, err := s.Apply(t.Context(), store.Partition{Namespace: ns}, b)
				done <- err
			}()
			return done
		}
		large := apply(nss[0], redisstore.MaxRoundOps+1)
		if !goesPast(t, s, large) {
			pending = append(pending, large)
			t.Fatal("the large batch queued behind the round in flight")
		}
		small := apply(nss[1], redisstore.MaxRoundOps)
		if goesPast(t, s, small) {
			t.Fatal("a batch within a round's bound went past the round in flight")
		}
		pending = append(pending, small)
	})
}

// goesPast reports whether the Apply answering on done returned, before
// it could queue behind the round g holds, or queued. Nothing else may
// queue meanwhile. When it queued, done is left to the caller.
func goesPast(t *testing.T, s *redisstore.Store, done <-chan error) bool {
	t.Helper()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("apply: %v", err)
			}
			return true
		default:
			if s.QueuedCalls() > 0 {
				return false
			}
			runtime.Gosched()
		}
	}
}

// On a Cluster a round held up on one master holds up no call to another.
func TestARoundInFlightOnOneMasterHoldsUpNoOther(t *testing.T) {
	s := redistest.Cluster(t)
	g := newGate(s)
	first := holdFirstRound(t, s, g)
	defer func() {
		close(g.release)
		if err := <-first; err != nil {
			t.Errorf("the first apply: %v", err)
		}
	}()
	for _, ns := range namespaces(t, s, "elsewhere-", 3, false) {
		done := make(chan error, 1)
		go func() {
			_, err := s.Apply(context.Background(), store.Partition{Namespace: ns}, claimBatch(ns))
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", ns, err)
			}
			wantClaimed(t, s, ns, true)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s waits for a round on another master", ns)
		}
	}
}

// Many callers at once, a third of them giving up at once: every call
// returns, each one answered committed left its row, and no call is left
// queued.
func TestRoundsHoldUpUnderManyCallersGivingUp(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		const callers, each = 16, 40
		var committed atomic.Int64
		var wg sync.WaitGroup
		for w := range callers {
			wg.Go(func() {
				for i := range each {
					ns := "many-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
					ctx, cancel := context.WithCancel(t.Context())
					givesUp := (w+i)%3 == 0
					if givesUp {
						go cancel()
					}
					r, err := s.Apply(ctx, store.Partition{Namespace: ns}, claimBatch(ns))
					cancel()
					switch {
					case err == nil && r.Committed:
						committed.Add(1)
						wantClaimed(t, s, ns, true)
					case err == nil:
						t.Errorf("%s: a first claim failed its guard", ns)
					case !givesUp || !errors.Is(err, context.Canceled):
						t.Errorf("%s: %v", ns, err)
					}
				}
			})
		}
		wg.Wait()
		if n := s.QueuedCalls(); n != 0 {
			t.Errorf("%d calls left queued", n)
		}
		if committed.Load() == 0 {
			t.Error("no call committed")
		}
	})
}
