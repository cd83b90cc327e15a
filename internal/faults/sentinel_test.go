package faults

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/internal/testlog"
)

// sentinelMaster is the name the Sentinels monitor the master under.
const sentinelMaster = "relaymaster"

// startSentinel runs redis-server --sentinel on a free loopback port,
// monitoring the master with quorum 2 and short timings so that a
// failover takes a few seconds, and kills it when the test ends.
func startSentinel(t *testing.T, masterPort int) string {
	t.Helper()
	dir := t.TempDir()
	var lastErr error
	for range 5 {
		port := redistest.FreePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 3000\nsentinel parallel-syncs %s 1\n",
			port, dir, sentinelMaster, masterPort, sentinelMaster, sentinelMaster, sentinelMaster)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("redis-server", conf, "--sentinel")
		out := &testlog.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		lastErr = poll(exited, 10*time.Second, func() bool { return c.Ping(context.Background()).Err() == nil })
		_ = c.Close()
		if lastErr == nil {
			return addr
		}
		lastErr = fmt.Errorf("%w: %s", lastErr, out.String())
	}
	t.Fatalf("start redis-server --sentinel: %v", lastErr)
	return ""
}

// poll calls ok every 20 ms until it holds, gone closes or within passes.
// Unlike relaytest.Poll it gives up at once when the process it waits for
// exits, so that startSentinel tries another port.
func poll(gone <-chan struct{}, within time.Duration, ok func() bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for !ok() {
		select {
		case <-tick.C:
		case <-gone:
			return fmt.Errorf("the process exited")
		case <-deadline:
			return fmt.Errorf("not within %v", within)
		}
	}
	return nil
}

// sentinelTopology is a master, one replica of it and three Sentinels
// that watch them and know each other.
type sentinelTopology struct {
	master, replica *redistest.Server
	sentinels       []*redis.SentinelClient
	url             string
}

func startSentinelTopology(t *testing.T) *sentinelTopology {
	t.Helper()
	// The master keeps an AOF: restarted after the failover it comes back
	// with its data and the Sentinels make it a replica. Restarted empty,
	// it could be promoted back and wipe the replica by a full sync.
	// No diskless-sync delay (5 s by default), so the replica links at once.
	tp := &sentinelTopology{master: startRedis(t, "--repl-diskless-sync-delay", "0")}
	// Until its first sync the replica holds nothing: a failover then
	// would lose everything at any durability.
	tp.replica = redistest.StartReplica(t, tp.master)
	var addrs []string
	for range 3 {
		addr := startSentinel(t, tp.master.Port)
		addrs = append(addrs, addr)
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = sc.Close() })
		tp.sentinels = append(tp.sentinels, sc)
	}
	// A failover needs the quorum to agree: each Sentinel must have found
	// the replica and the two others.
	for i, sc := range tp.sentinels {
		relaytest.Eventually(t, 30*time.Second, nil, func() error {
			m, err := sc.Master(context.Background(), sentinelMaster).Result()
			if err != nil || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %d did not see the replica and the other sentinels: not within 30s (%v)", i, m)
			}
			return nil
		})
	}
	tp.url = "redis+sentinel://" + strings.Join(addrs, ",") + "/" + sentinelMaster
	return tp
}

// awaitPromotion waits until every Sentinel names the replica master.
func (tp *sentinelTopology) awaitPromotion(t *testing.T) {
	t.Helper()
	want := strconv.Itoa(tp.replica.Port)
	for i, sc := range tp.sentinels {
		relaytest.Eventually(t, 30*time.Second, nil, func() error {
			a, err := sc.GetMasterAddrByName(context.Background(), sentinelMaster).Result()
			if err != nil || len(a) != 2 || a[1] != want {
				return fmt.Errorf("sentinel %d did not promote the replica: not within 30s (%v, %v)", i, a, err)
			}
			return nil
		})
	}
}

// sentinelFailover runs a relay on the Sentinel URL at the durability,
// kills the master with SIGKILL mid-ingest, waits for the Sentinels to
// promote the replica, brings the old master back (the Sentinels make it
// the new master's replica, which replicas=1 needs), and returns how many
// outcomes answered 202 were never delivered.
func sentinelFailover(t *testing.T, durability string) (accepted, lost int) {
	tp := startSentinelTopology(t)
	s := newSuiteOn(t, tp.master, tp.url)
	s.extraEnv = []string{"RELAY_DURABILITY=" + durability}
	notify := make(chan struct{}, 1)
	r := s.startRelay("a")
	targets := spread(t, r, "sentinel", 4, 1, notify, slowish)
	p := newProducer(s, 1, r)
	// Bounded, so a failover that never heals ends the case.
	p.giveUp = 20 * time.Second
	const perNS = 300

	start := time.Now()
	posted := postInBackground(p, targets, perNS, 2)
	awaitAccepted(t, p, len(targets)*perNS/3)
	tp.master.Stop() // SIGKILL
	killed := time.Now()
	tp.awaitPromotion(t)
	promoted := time.Since(killed)
	if err := tp.master.Restart(); err != nil {
		t.Fatal(err)
	}
	<-posted
	if r.Exited() {
		t.Fatal("the relay exited during the failover")
	}
	checkAnswers(t, p, true)
	// Once the outbox is empty, whatever was not delivered is gone.
	emptyOutbox(t, r, targets)
	for _, tg := range targets {
		lost += tg.rc.Missing(p.acceptedOf(tg.ns))
	}
	_, dups := report(t, "sentinel "+durability, p, time.Since(start), targets...)
	line := fmt.Sprintf("faults: %-22s accepted %5d  lost %5d (answered 202, never delivered)  duplicates %4d  promoted %5.2fs after SIGKILL",
		"sentinel "+durability, p.total(), lost, dups, promoted.Seconds())
	t.Log(line)
	fmt.Println(line)
	return p.total(), lost
}

// TestSentinelFailoverAtReplicasOneLosesNoAcceptedOutcome: with
// RELAY_DURABILITY=replicas=1 every 202 was on the replica before it was
// answered, so the promoted replica delivers every one.
func TestSentinelFailoverAtReplicasOneLosesNoAcceptedOutcome(t *testing.T) {
	need(t)
	if _, lost := sentinelFailover(t, "replicas=1"); lost > 0 {
		t.Errorf("%d outcomes answered 202 were lost in the failover", lost)
	}
}

// TestSentinelFailoverAtMemory measures what the default durability loses
// in the same failover: 202s the master answered before replicating.
// It reports the count; a small one is expected and not a failure.
func TestSentinelFailoverAtMemory(t *testing.T) {
	need(t)
	accepted, lost := sentinelFailover(t, "memory")
	t.Logf("at memory, %d of %d outcomes answered 202 were lost", lost, accepted)
}
