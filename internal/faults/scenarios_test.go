package faults

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// spread registers one endpoint per namespace, each on its own receiver,
// and returns the targets.
func spread(t testing.TB, r *relayProc, prefix string, namespaces, maxInFlight int, notify chan<- struct{}, sc relaytest.Script) []target {
	t.Helper()
	var out []target
	for i := range namespaces {
		ns := fmt.Sprintf("%s-%02d", prefix, i)
		rc := newReceiver(t, ns, notify, sc)
		r.endpoint(ns, "hook", rc, maxInFlight)
		out = append(out, target{ns: ns, rc: rc})
	}
	return out
}

// postAll posts n outcomes to each target's namespace, all namespaces at
// once, and returns when every request was accepted or given up.
func postAll(p *producer, targets []target, n, workersPerNS int) {
	var wg sync.WaitGroup
	for _, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.post(tg.ns, rids(tg.ns, n), workersPerNS)
		}()
	}
	wg.Wait()
}

// postInBackground runs postAll in a goroutine; the channel closes when it
// returns.
func postInBackground(p *producer, targets []target, n, workersPerNS int) <-chan struct{} {
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		postAll(p, targets, n, workersPerNS)
	}()
	return posted
}

// deliveredSoFar is every delivery the targets' receivers answered 2xx.
func deliveredSoFar(targets []target) int {
	n := 0
	for _, tg := range targets {
		n += tg.rc.Deliveries()
	}
	return n
}

// awaitDeliveries waits until the targets' receivers answered n deliveries.
func awaitDeliveries(t testing.TB, notify <-chan struct{}, targets []target, n int) {
	t.Helper()
	relaytest.Eventually(t, settleWithin, notify, func() error {
		if got := deliveredSoFar(targets); got < n {
			return fmt.Errorf("only %d of %d deliveries arrived", got, n)
		}
		return nil
	})
}

// awaitAccepted waits until the producer has n outcomes accepted.
func awaitAccepted(t testing.TB, p *producer, n int) {
	t.Helper()
	relaytest.Eventually(t, settleWithin, nil, func() error {
		if got := p.total(); got < n {
			return fmt.Errorf("only %d of %d outcomes accepted", got, n)
		}
		return nil
	})
}

// slowish answers after 2 ms, so that delivery trails ingest and fires are
// in flight when a fault strikes.
func slowish(string, int) relaytest.Answer {
	return relaytest.Answer{Status: http.StatusNoContent, Delay: 2 * time.Millisecond}
}

// boundDuplicates fails a case that is not a kill when 1 % or more of its
// deliveries were duplicates.
func boundDuplicates(t testing.TB, dups, deliveries int) {
	t.Helper()
	if dups*100 >= deliveries {
		t.Errorf("%d duplicate deliveries of %d: 1 %% or more", dups, deliveries)
	}
}

// checkAnswers fails on any API answer but 202 and, where allowed, 503
// with Retry-After.
func checkAnswers(t testing.TB, p *producer, allow503 bool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for code, n := range p.codes {
		if code == http.StatusAccepted || (allow503 && code == http.StatusServiceUnavailable) {
			continue
		}
		t.Errorf("the API answered %d %d times", code, n)
	}
	if p.refusedNoRetryAfter > 0 {
		t.Errorf("%d answers of 503 had no Retry-After", p.refusedNoRetryAfter)
	}
}

// emptyOutbox waits until no endpoint of the targets has a row left: once
// everything was delivered, nothing half-written remains. (A list refused
// midway may have stored outcomes the producer did not count; they drain
// too.)
func emptyOutbox(t testing.TB, r *relayProc, targets []target) {
	t.Helper()
	// One bound for all: the targets found empty are not asked again.
	next := 0
	relaytest.Eventually(t, settleWithin, nil, func() error {
		for ; next < len(targets); next++ {
			tg := targets[next]
			v := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+tg.ns+"/outbox?endpoint=hook", nil)
			ep := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+tg.ns+"/endpoints/hook", nil)
			rows, _ := v["rows"].([]any)
			bl, _ := ep["backlog"].(map[string]any)
			if len(rows) != 0 || bl["rows"] != float64(0) || bl["bytes"] != float64(0) {
				return fmt.Errorf("%s: %d rows left in the outbox, backlog %v", tg.ns, len(rows), bl)
			}
		}
		return nil
	})
}

// TestScenarios runs the fault cases of one shape, each as a subtest
// named in the scenarios table: relays on a Redis of the case's own, one
// endpoint in each of several namespaces, producers posting to every relay
// while the fault strikes, and then every outcome answered 202 delivered
// to its endpoint, verified, and nothing else.
func TestScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, sc.run)
	}
}

// scenario is one case of TestScenarios.
type scenario struct {
	name string // the subtest's
	line string // the report line's
	// suite starts the case's Redis; nil is newSuite's redis-server.
	suite func(t *testing.T) *suite
	// env is every relay's environment beside the suite's.
	env []string
	// relays are the processes, "a", "b", …: all take the posts, the
	// first registers the endpoints; none is one.
	relays int
	// prefix names the namespaces, one endpoint each.
	prefix                     string
	namespaces, perNS, workers int
	// perRequest is the outcomes a request posts as a list; none is one.
	perRequest int
	// answer makes the receivers' script; nil is slowish.
	answer func(c *faultRun) relaytest.Script
	// prepare runs once the endpoints are registered, before the posts.
	prepare func(t *testing.T, c *faultRun)
	// fault strikes while the posts go on, and returns once it is over.
	fault func(t *testing.T, c *faultRun)
	// settled checks what is the case's own once every outcome arrived.
	settled func(t *testing.T, c *faultRun)
	// allow503: the API may refuse for now (503 with Retry-After).
	allow503 bool
	// fewDuplicates: under 1 % of the deliveries are duplicates, as in
	// every case that kills no relay.
	fewDuplicates bool
	// drains: the outbox empties, seen through the last relay, which no
	// fault kills.
	drains bool
	// then goes on after the common checks.
	then func(t *testing.T, c *faultRun)
}

// faultRun is one run of a scenario.
type faultRun struct {
	s       *suite
	relays  []*relayProc
	notify  chan struct{}
	targets []target
	p       *producer
	// posts is every outcome the case posts; posted closes once each was
	// accepted or given up.
	posts  int
	posted <-chan struct{}
	// stopPosting ends the posts: what is not yet accepted is given up.
	stopPosting func()
	// start is when the posts began, struck when the fault struck, where
	// the fault says so (a kill), and done when every outcome had arrived.
	start, struck, done time.Time
	// since is when the report's time to settle counts from: start, unless
	// the fault moves it.
	since time.Time
	// dups are the duplicate deliveries.
	dups int
	// released is set when a fault lets receivers that held back answer
	// at full speed.
	released atomic.Bool
}

func (sc scenario) run(t *testing.T) {
	var s *suite
	if sc.suite != nil {
		s = sc.suite(t)
	} else {
		s = newSuite(t)
	}
	s.extraEnv = sc.env
	c := &faultRun{s: s, notify: make(chan struct{}, 1)}
	for i := range max(sc.relays, 1) {
		c.relays = append(c.relays, s.startRelay(string(rune('a'+i))))
	}
	answer := relaytest.Script(slowish)
	if sc.answer != nil {
		answer = sc.answer(c)
	}
	c.targets = spread(t, c.relays[0], sc.prefix, sc.namespaces, 1, c.notify, answer)
	c.p = newProducer(s, max(sc.perRequest, 1), c.relays...)
	stop := make(chan struct{})
	c.p.stop = stop
	c.stopPosting = sync.OnceFunc(func() { close(stop) })
	c.posts = sc.namespaces * sc.perNS
	if sc.prepare != nil {
		sc.prepare(t, c)
	}

	c.start = time.Now()
	c.since = c.start
	c.posted = postInBackground(c.p, c.targets, sc.perNS, sc.workers)
	if sc.fault != nil {
		sc.fault(t, c)
	}
	<-c.posted
	settle(t, c.p, c.notify, c.targets...)
	c.done = time.Now()
	_, c.dups = report(t, sc.line, c.p, c.done.Sub(c.since), c.targets...)
	if sc.settled != nil {
		sc.settled(t, c)
	}
	if sc.fewDuplicates {
		boundDuplicates(t, c.dups, c.p.total()*len(c.targets))
	}
	checkAnswers(t, c.p, sc.allow503)
	if sc.drains {
		emptyOutbox(t, c.relays[len(c.relays)-1], c.targets)
	}
	if sc.then != nil {
		sc.then(t, c)
	}
}

// refusedAtLeast is a condition of relaytest.Eventually: the API has
// answered n requests 503.
func (c *faultRun) refusedAtLeast(n int) func() error {
	return func() error {
		if got := c.p.count(http.StatusServiceUnavailable); got < n {
			return fmt.Errorf("the API refused %d requests, want %d (%s)", got, n, c.p.answers())
		}
		return nil
	}
}

var scenarios = []scenario{{
	// The control: steady ingest and delivery with nothing broken. Every
	// other case is read against its line.
	name: "NoFault", line: "no fault (control)",
	prefix: "calm", namespaces: 4, perNS: 300, workers: 2,
	fewDuplicates: true, drains: true,
	then: func(t *testing.T, c *faultRun) { c.relays[0].Stop() },
}, {
	// The relay killed with SIGKILL five times while outcomes are ingested
	// and delivered, restarted each time.
	name: "KillNineDuringDelivery", line: "kill -9 ×5",
	// Few workers, so a kill strands a few streams behind their leases
	// and the rest go on with the restarted process.
	env:    []string{"RELAY_DELIVERY_CONCURRENCY=4"},
	prefix: "kill", namespaces: 16, perNS: 150, workers: 1,
	fault: func(t *testing.T, c *faultRun) {
		// Kills follow ingest, not delivery: a kill strands the streams
		// its fires held until their leases expire, and kills spaced by
		// deliveries would wait out a lease each.
		for i := range 5 {
			awaitAccepted(t, c.p, (i+1)*c.posts/7)
			c.relays[0].Kill()
			c.relays[0].Restart()
		}
	},
	settled: func(t *testing.T, c *faultRun) {
		t.Logf("duplicates: %d (redelivery of rows a killed fire had sent)", c.dups)
	},
}, {
	// Two relays on one Redis, one killed mid-run: the other resumes its
	// leased streams once the leases expire. The report counts from the
	// kill.
	name: "SurvivorTakesOverAKilledProcess", line: "two relays, one killed",
	relays: 2, prefix: "pair", namespaces: 8, perNS: 200, workers: 2,
	fault: func(t *testing.T, c *faultRun) {
		awaitDeliveries(t, c.notify, c.targets, c.posts/4)
		c.relays[0].Kill()
		c.struck = time.Now()
		c.since = c.struck
	},
	settled: func(t *testing.T, c *faultRun) {
		t.Logf("the survivor finished every stream %.2fs after the kill (lease 30s)", c.done.Sub(c.struck).Seconds())
	},
}, {
	// Redis stopped (AOF kept) while outcomes flow and started again; the
	// relay is not restarted.
	name: "RedisRestartDuringIngestAndDelivery", line: "Redis restarted",
	prefix: "restart", namespaces: 8, perNS: 400, workers: 2,
	fault: func(t *testing.T, c *faultRun) {
		awaitDeliveries(t, c.notify, c.targets, c.posts/5)
		c.s.redis.Shutdown()
		// Redis stays away until producers have been refused a few times.
		relaytest.Eventually(t, settleWithin, nil, c.refusedAtLeast(20))
		if err := c.s.redis.Restart(); err != nil {
			t.Fatal(err)
		}
	},
	settled: func(t *testing.T, c *faultRun) {
		if c.relays[0].Exited() {
			t.Fatal("the relay exited while Redis was away")
		}
	},
	allow503: true, fewDuplicates: true, drains: true,
}, {
	// Redis's script cache flushed again and again while outcomes flow:
	// nothing is refused and nothing is lost.
	name: "ScriptFlushUnderLoad", line: "SCRIPT FLUSH ×10",
	prefix: "flush", namespaces: 4, perNS: 300, workers: 2,
	fault: func(t *testing.T, c *faultRun) {
		for i := range 10 {
			awaitDeliveries(t, c.notify, c.targets, (i+1)*c.posts/12)
			if err := c.s.redis.Client.ScriptFlush(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
		}
	},
	fewDuplicates: true, drains: true,
}, {
	// Redis filled to its maxmemory (noeviction) while outcomes flow:
	// ingest is refused with a retryable 503 and writes nothing, delivery
	// goes on and frees memory, and ingest recovers. History is not kept,
	// so that a delivered outcome's bytes are freed, and receivers answer
	// slowly until Redis is full, so that delivery does not free room as
	// fast as the producers fill it.
	name: "FullRedis", line: "Redis full",
	suite:  func(t *testing.T) *suite { return newSuite(t, "--maxmemory-policy", "noeviction") },
	env:    []string{"RELAY_RETENTION=0"},
	prefix: "full", namespaces: 2, perNS: 4000, workers: 2, perRequest: 50,
	answer: func(c *faultRun) relaytest.Script {
		return func(rid string, attempt int) relaytest.Answer {
			if !c.released.Load() {
				return relaytest.Answer{Status: http.StatusNoContent, Delay: 250 * time.Millisecond}
			}
			return slowish(rid, attempt)
		}
	},
	prepare: func(t *testing.T, c *faultRun) {
		// A little room above what Redis holds now, so the fill is quick.
		client := c.s.redis.Client
		info, err := client.InfoMap(t.Context(), "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		used, err := strconv.Atoi(info["Memory"]["used_memory"])
		if err != nil {
			t.Fatal(err)
		}
		if err := client.ConfigSet(t.Context(), "maxmemory", strconv.Itoa(used+2<<20)).Err(); err != nil {
			t.Fatal(err)
		}
	},
	fault: func(t *testing.T, c *faultRun) {
		// Producers stop once Redis has refused a few requests for want
		// of memory; the rest of what they held is given up, not accepted.
		refused := c.refusedAtLeast(10)
		relaytest.Eventually(t, settleWithin, nil, func() error {
			err := refused()
			select {
			case <-c.posted:
				if err != nil {
					t.Fatalf("every outcome was accepted: Redis never filled up (%s)", c.p.answers())
				}
			default:
			}
			return err
		})
		c.stopPosting()
		c.released.Store(true)
	},
	allow503: true, fewDuplicates: true, drains: true,
	then: func(t *testing.T, c *faultRun) {
		// Delivery freed the memory: ingest takes outcomes again.
		before := c.p.total()
		c.p.stop = nil
		c.p.post(c.targets[0].ns, rids("after-full", 5), 1)
		if c.p.total() != before+5 {
			t.Fatalf("ingest did not recover once delivery freed memory: %s", c.p.answers())
		}
		settle(t, c.p, c.notify, c.targets...)
	},
}, {
	// Two relays on a three-master cluster of the case's own. While
	// outcomes flow one relay is killed, and then a range of slots moves
	// from one master to another: every outcome is delivered, to its own
	// namespace only, and the survivor resumes the dead one's streams
	// within twice the lease.
	name: "ClusterScaleOut", line: "cluster: reshard, kill",
	suite: func(t *testing.T) *suite {
		need(t)
		cl := startCluster(t)
		if counts := cl.bucketsPerMaster(64); counts[0] == 0 || counts[1] == 0 || counts[2] == 0 {
			t.Fatalf("buckets per master %v: the default bucket count should reach every master", counts)
		}
		s := newSuiteOn(t, nil, cl.seeds())
		s.cluster = cl
		return s
	},
	env:    []string{"RELAY_DELIVERY_CONCURRENCY=8"},
	relays: 2, prefix: "scale", namespaces: 16, perNS: 300, workers: 2,
	answer: func(*faultRun) relaytest.Script {
		return func(string, int) relaytest.Answer {
			return relaytest.Answer{Status: http.StatusNoContent, Delay: 5 * time.Millisecond}
		}
	},
	fault: func(t *testing.T, c *faultRun) {
		// Both relays are delivering when one is killed; the slots move
		// while the survivor ingests and delivers alone and the dead
		// relay's streams wait out their leases.
		awaitDeliveries(t, c.notify, c.targets, c.posts/10)
		c.relays[0].Kill()
		c.struck = time.Now()
		if err := c.s.cluster.reshard(0, 1, 2000); err != nil {
			t.Fatal(err)
		}
		t.Logf("moved 2000 slots from master 0 to master 1 in %.2fs while outcomes flowed", time.Since(c.struck).Seconds())
	},
	settled: func(t *testing.T, c *faultRun) {
		resumed := c.done.Sub(c.struck)
		t.Logf("after the kill every stream was delivered within %.2fs (lease 30s); %d duplicates", resumed.Seconds(), c.dups)
		if resumed > 60*time.Second {
			t.Errorf("the survivor took %v to resume the killed relay's streams, over twice the lease", resumed)
		}
	},
	allow503: true, drains: true,
}}
