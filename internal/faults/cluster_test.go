package faults

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// cluster is a Redis Cluster of three masters of one test's own, free to
// reshard.
type cluster struct {
	t     testing.TB
	nodes []*redistest.Server
}

// clusterPort is a free port whose cluster bus port (the port plus 10000)
// is free and valid too.
func clusterPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := redistest.FreePort(t)
		if p+10000 > 65535 {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+10000))); err == nil {
			ln.Close()
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func startCluster(t testing.TB) *cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if redistest.RequireReal() {
			t.Fatal("redis-cli is not on PATH")
		}
		t.Skip("redis-cli is not on PATH")
	}
	c := &cluster{t: t}
	args := []string{"--cluster", "create"}
	for range 3 {
		n := redistest.StartServerWith(t, redistest.ServerOptions{AOF: true, Port: clusterPort, Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"}})
		c.nodes = append(c.nodes, n)
		args = append(args, n.Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	relaytest.Eventually(t, 30*time.Second, nil, func() error {
		for _, n := range c.nodes {
			if !strings.Contains(n.Client.ClusterInfo(context.Background()).Val(), "cluster_state:ok") {
				return fmt.Errorf("cluster node %s never reached cluster_state:ok", n.Addr)
			}
		}
		return nil
	})
	return c
}

// seeds is the relay's RELAY_REDIS_URL for the cluster.
func (c *cluster) seeds() string {
	var addrs []string
	for _, n := range c.nodes {
		addrs = append(addrs, n.Addr)
	}
	return strings.Join(addrs, ",")
}

// reshard moves slots slots from master from to master to, as an operator
// would with redis-cli, keys and all.
func (c *cluster) reshard(from, to, slots int) error {
	ctx := context.Background()
	fromID, err := c.nodes[from].Client.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	toID, err := c.nodes[to].Client.ClusterMyID(ctx).Result()
	if err != nil {
		return err
	}
	out, err := exec.Command("redis-cli", "--cluster", "reshard", c.nodes[from].Addr,
		"--cluster-from", fromID, "--cluster-to", toID, "--cluster-slots", strconv.Itoa(slots), "--cluster-yes").CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster reshard: %v\n%s", err, relaytest.Tail(string(out), 20))
	}
	return nil
}

// commands is the sum over the masters of the commands they have run.
func (c *cluster) commands() int64 {
	var total int64
	for _, n := range c.nodes {
		info, err := n.Client.InfoMap(context.Background(), "commandstats").Result()
		if err != nil {
			c.t.Fatal(err)
		}
		for _, v := range info["Commandstats"] {
			if calls, ok := strings.CutPrefix(strings.Split(v, ",")[0], "calls="); ok {
				n, _ := strconv.ParseInt(calls, 10, 64)
				total += n
			}
		}
	}
	return total
}

// bucketsPerMaster counts, per master, the due-index buckets whose slot it
// serves.
func (c *cluster) bucketsPerMaster(buckets int) []int {
	ctx := context.Background()
	counts := make([]int, len(c.nodes))
	shards, err := c.nodes[0].Client.ClusterShards(ctx).Result()
	if err != nil {
		c.t.Fatal(err)
	}
	for b := range buckets {
		slot, err := c.nodes[0].Client.ClusterKeySlot(ctx, fmt.Sprintf("{%d}", b)).Result()
		if err != nil {
			c.t.Fatal(err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, node := range sh.Nodes {
					for i, n := range c.nodes {
						if node.Role == "master" && node.Port == int64(n.Port) {
							counts[i]++
						}
					}
				}
			}
		}
	}
	return counts
}

// benchRound makes each round's namespaces new: the benchmark function runs
// more than once on one cluster.
var benchRound atomic.Int64

// BenchmarkClusterDelivery measures ingest and delivery on a three-master
// cluster of its own with one relay process and with two, each delivering
// 8 streams at once to receivers that take 5 ms per webhook, so the work is
// bound by latency, not by this machine's CPU.
//
//	RELAY_TEST_REDIS_URL=redis://127.0.0.1:6379/0 go test -run '^$' -bench ClusterDelivery -benchtime 1x -count 3 ./internal/faults
func BenchmarkClusterDelivery(b *testing.B) {
	need(b)
	c := startCluster(b)
	for _, processes := range []int{1, 2} {
		b.Run(fmt.Sprintf("processes=%d", processes), func(b *testing.B) {
			s := newSuiteOn(b, nil, c.seeds())
			s.extraEnv = []string{"RELAY_DELIVERY_CONCURRENCY=8"}
			var relays []*relayProc
			for i := range processes {
				relays = append(relays, s.startRelay(strconv.Itoa(i)))
			}
			var ingestSecs, deliverSecs float64
			var outcomes, commands int64
			for range b.N {
				notify := make(chan struct{}, 1)
				slow := func(string, int) relaytest.Answer {
					return relaytest.Answer{Status: http.StatusNoContent, Delay: 5 * time.Millisecond}
				}
				// Registered disabled: ingest is measured alone, then
				// delivery from the moment the endpoints are enabled.
				var targets []target
				for n := range 32 {
					ns := fmt.Sprintf("bench%d-%d-%02d", processes, benchRound.Add(1), n)
					rc := newReceiver(b, ns, notify, slow)
					relays[0].must(http.StatusCreated, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/hook", map[string]any{
						"url": rc.URL, "scheme": "standard-webhooks", "secret": rc.Secret, "enabled": false,
					})
					targets = append(targets, target{ns: ns, rc: rc})
				}
				p := newProducer(s, 50, relays...)
				cmds := c.commands()
				began := time.Now()
				postAll(p, targets, 200, 2)
				ingestSecs += time.Since(began).Seconds()
				began = time.Now()
				for _, tg := range targets {
					relays[0].must(http.StatusOK, http.MethodPut, "/v1/namespaces/"+tg.ns+"/endpoints/hook", map[string]any{
						"url": tg.rc.URL, "scheme": "standard-webhooks", "secret": tg.rc.Secret, "enabled": true,
					})
				}
				settle(b, p, notify, targets...)
				deliverSecs += time.Since(began).Seconds()
				commands += c.commands() - cmds
				outcomes += int64(p.total())
			}
			b.ReportMetric(float64(outcomes)/ingestSecs, "ingested/s")
			b.ReportMetric(float64(outcomes)/deliverSecs, "delivered/s")
			b.ReportMetric(float64(commands)/float64(outcomes), "redis-cmds/outcome")
		})
	}
}
