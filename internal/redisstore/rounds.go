package redisstore

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/store"
)

// rounds sends the script calls of concurrent callers together. While one
// round of calls is in flight, the calls that arrive queue, and the next
// round takes them all as one pipeline: one write and one read a node
// instead of one each, on both ends of each connection. A call that finds
// no round in flight goes at once, alone, so an idle process waits for
// nothing. A busy one spends less on system calls, on its side and on
// Redis's (docs/benchmarks.md, "Rounds"). A large batch goes past the
// rounds (maxRoundOps).
type rounds struct {
	client redis.UniversalClient

	mu sync.Mutex
	// queue holds the calls not yet sent, in arrival order. busy says a
	// round is in flight, or its leader is about to send it.
	queue []*roundCall
	busy  bool
}

// masters keeps the rounds of each Redis master. A round waits for its slowest node,
// so on a Cluster each master has its own: one that is slow or failing
// over holds up only the partitions it serves.
type masters struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // nil unless a Cluster

	one rounds // of a client with one master

	mu     sync.Mutex
	byNode map[string]*rounds // by master address
}

func newMasters(client redis.UniversalClient) *masters {
	ls := &masters{client: client, one: rounds{client: client}}
	ls.cluster, _ = client.(*redis.ClusterClient)
	return ls
}

// run is sc.run in the rounds of the master holding keys. A Cluster whose
// slots are unknown for now gets the call alone.
func (ls *masters) run(ctx context.Context, sc *script, keys []string, args []any) (any, error) {
	if ls.cluster == nil {
		return ls.one.run(ctx, sc, keys, args)
	}
	node, err := ls.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return sc.run(ctx, ls.client, keys, args...)
	}
	addr := node.Options().Addr
	ls.mu.Lock()
	l := ls.byNode[addr]
	if l == nil {
		if ls.byNode == nil {
			ls.byNode = map[string]*rounds{}
		}
		l = &rounds{client: ls.client}
		ls.byNode[addr] = l
	}
	ls.mu.Unlock()
	return l.run(ctx, sc, keys, args)
}

// maxRound bounds the calls of one round, so that a round's pipeline
// stays within some MB however many callers queue.
const maxRound = 64

// maxRoundOps is the most operations of a batch sent in a round. A larger
// one, of many outcomes, saves little by sharing a round's system calls
// and runs long enough in Redis to hold up the round's other callers, so
// it goes alone, at once.
const maxRoundOps = store.MaxBatchOps / 4

// scriptCall is one call of a script and, once run, its reply.
type scriptCall struct {
	sc   *script
	keys []string
	args []any
	res  any
	err  error
}

type roundCall struct {
	scriptCall
	// lead is signalled when a round ends with the call first in the
	// queue: its caller sends the next round.
	lead chan struct{}
	done chan struct{}
	sent bool // guarded by rounds.mu
}

// run is sc.run with the other calls of its round. A call whose ctx ends
// while it queues leaves the queue unsent and returns ctx's error. Once
// sent it is seen through, bounded by the client's timeouts, as a call
// in flight is.
func (l *rounds) run(ctx context.Context, sc *script, keys []string, args []any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &roundCall{scriptCall: scriptCall{sc: sc, keys: keys, args: args}, lead: make(chan struct{}, 1), done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, c)
	first := !l.busy
	l.busy = true
	l.mu.Unlock()
	if first {
		l.round(ctx)
	}
	for {
		select {
		case <-c.done:
			return c.res, c.err
		case <-c.lead:
			l.round(ctx)
		case <-ctx.Done():
			if l.leave(c) {
				return nil, ctx.Err()
			}
			ctx = context.WithoutCancel(ctx)
		}
	}
}

// leave takes c out of the queue unless it was sent. A call signalled to
// lead passes the lead to the call now first, if any.
func (l *rounds) leave(c *roundCall) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.sent {
		return false
	}
	l.queue = slices.DeleteFunc(l.queue, func(q *roundCall) bool { return q == c })
	select {
	case <-c.lead:
		l.handOn()
	default:
	}
	return true
}

// handOn signals the call first in the queue to lead the next round, or
// leaves the rounds idle. l.mu is held.
func (l *rounds) handOn() {
	if len(l.queue) == 0 {
		l.busy = false
		return
	}
	l.queue[0].lead <- struct{}{}
}

// round sends the queued calls and answers them, then hands the lead on.
func (l *rounds) round(ctx context.Context) {
	l.mu.Lock()
	n := min(len(l.queue), maxRound)
	sent := make([]*roundCall, n)
	calls := make([]*scriptCall, n)
	for i, c := range l.queue[:n] {
		c.sent = true
		sent[i], calls[i] = c, &c.scriptCall
	}
	l.queue = slices.Delete(l.queue, 0, n)
	l.mu.Unlock()

	_ = runPipelined(context.WithoutCancel(ctx), l.client, calls)
	for _, c := range sent {
		close(c.done)
	}

	l.mu.Lock()
	l.handOn()
	l.mu.Unlock()
}

// runPipelined runs calls, one alone or all in one pipeline (on a
// Cluster, one a node, sent in parallel), each reply or error in its call.
// NOSCRIPT means a call did not run (the node lost its script cache to
// SCRIPT FLUSH or a failover), so those go again, with the script's
// source, which loads it on that node as it runs. It returns ctx's error
// when ctx ended meanwhile; any call may have run then.
func runPipelined(ctx context.Context, client redis.UniversalClient, calls []*scriptCall) error {
	if len(calls) == 1 {
		c := calls[0]
		c.res, c.err = c.sc.run(ctx, client, c.keys, c.args...)
		return ctx.Err()
	}
	send := func(calls []*scriptCall, full bool) {
		cmds := make([]*redis.Cmd, len(calls))
		// Each call's error is read from its command.
		_, _ = client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i, c := range calls {
				if full {
					cmds[i] = pipe.Eval(ctx, c.sc.src, c.keys, c.args...)
				} else {
					cmds[i] = pipe.EvalSha(ctx, c.sc.sha, c.keys, c.args...)
				}
			}
			return nil
		})
		for i, c := range calls {
			c.res, c.err = cmds[i].Result()
		}
	}
	send(calls, false)
	var missing []*scriptCall
	for _, c := range calls {
		if isNoScript(c.err) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		send(missing, true)
	}
	return ctx.Err()
}
