package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

func growing(key string) store.Batch {
	var b store.Batch
	b.RequireAbsent(store.Key(key))
	b.Put(store.Key(key), store.Value("v"))
	return b
}

func TestDurabilityOptionsAreChecked(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	for _, d := range []redisstore.Durability{
		{Replicas: -1},
		{Replicas: 1, Timeout: -time.Second},
		{Replicas: 1, Timeout: 3 * time.Second},
	} {
		if _, err := redisstore.New(context.Background(), client, redisstore.Options{Durability: d}); err == nil {
			t.Errorf("durability %+v accepted", d)
		}
	}
	st := redistest.NewStore(t, client, redisstore.Options{Durability: redisstore.Durability{Replicas: 2}})
	if got := st.Durability(); got.Timeout != redisstore.DefaultDurabilityTimeout {
		t.Errorf("default timeout %v, want %v", got.Timeout, redisstore.DefaultDurabilityTimeout)
	}
}

// A Redis without replicas acknowledges nobody (miniredis answers WAIT
// with 0): a growing batch is refused as unavailable, though it ran on
// the master; a settling batch is not waited for.
func TestDurabilityRefusesAGrowingBatchNoReplicaAcknowledged(t *testing.T) {
	t.Parallel()
	st, _ := redistest.MiniredisServer(t, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	ctx := context.Background()
	_, err := st.Apply(ctx, acme, growing("k1"))
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("growing batch with no replica: %v, want ErrUnavailable and ErrNotReplicated", err)
	}
	if _, ok, err := st.Get(ctx, acme, "k1"); err != nil || !ok {
		t.Fatalf("the refused batch is not on the master (found %v, %v): the retry would not see it", ok, err)
	}
	settling := store.Batch{Settles: true}
	settling.Delete("k1")
	if res, err := st.Apply(ctx, acme, settling); err != nil || !res.Committed {
		t.Fatalf("settling batch: %+v, %v; want committed without waiting", res, err)
	}
}

// answered is a settling batch an operator is answered about: it deletes key.
func answered(key string) store.Batch {
	b := store.Batch{Settles: true, Answered: true}
	b.Delete(store.Key(key))
	return b
}

// An answered batch waits as a growing one does, though it only deletes:
// with no replica to acknowledge it, it is refused as unavailable.
func TestDurabilityRefusesAnAnsweredSettlingBatchNoReplicaAcknowledged(t *testing.T) {
	t.Parallel()
	st, m := redistest.MiniredisServer(t, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	ctx := context.Background()
	key := st.PartitionKeys(acme)[0]
	m.HSet(key, "k1", "v")
	_, err := st.Apply(ctx, acme, answered("k1"))
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("answered settling batch with no replica: %v, want ErrUnavailable and ErrNotReplicated", err)
	}
}

// Without a durability policy, an answered batch is applied and answered
// as any other.
func TestAnAnsweredBatchWaitsForNothingInMemoryDurability(t *testing.T) {
	t.Parallel()
	st := redistest.Miniredis(t)
	ctx := context.Background()
	if res, err := st.Apply(ctx, acme, growing("k1")); err != nil || !res.Committed {
		t.Fatalf("growing batch: %+v, %v", res, err)
	}
	if res, err := st.Apply(ctx, acme, answered("k1")); err != nil || !res.Committed {
		t.Fatalf("answered batch: %+v, %v", res, err)
	}
}

// A batch whose guard failed may be the resend of a run that committed
// (and that the caller will now read and accept): its answer also waits
// for the replicas.
func TestDurabilityWaitsEvenWhenTheGuardFailed(t *testing.T) {
	t.Parallel()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	plain := redistest.NewStore(t, client, redisstore.Options{})
	durable := redistest.NewStore(t, client, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: 20 * time.Millisecond}})
	ctx := context.Background()
	if res, err := plain.Apply(ctx, acme, growing("k1")); err != nil || !res.Committed {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	res, err := durable.Apply(ctx, acme, growing("k1"))
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("guard-failed batch with no replica: %+v, %v; want ErrNotReplicated", res, err)
	}
}

// startPair starts a master and one replica of it, linked.
func startPair(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.StartServer(t)
	return master, redistest.StartReplica(t, master)
}

// On a real master with one replica: replicas=1 answers once the replica
// holds the row; replicas=2 is refused, naming the count; and a replica
// that stopped answering refuses the batch within the timeout.
func TestDurabilityWaitsForTheReplica(t *testing.T) {
	t.Parallel()
	master, replica := startPair(t)
	ctx := context.Background()
	one := redistest.NewStore(t, master.Client, redisstore.Options{Durability: redisstore.Durability{Replicas: 1}})
	if res, err := one.Apply(ctx, acme, growing("k1")); err != nil || !res.Committed {
		t.Fatalf("replicas=1 with one replica: %+v, %v", res, err)
	}
	key := one.PartitionKeys(acme)[0]
	if v, err := replica.Client.HGet(ctx, key, "k1").Result(); err != nil || v != "v" {
		t.Fatalf("the replica lacks the acknowledged row: %q, %v", v, err)
	}
	two := redistest.NewStore(t, master.Client, redisstore.Options{Durability: redisstore.Durability{Replicas: 2, Timeout: 50 * time.Millisecond}})
	_, err := two.Apply(ctx, acme, growing("k2"))
	if !errors.Is(err, redisstore.ErrNotReplicated) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "1 of 2 replicas") {
		t.Fatalf("replicas=2 with one replica: %v", err)
	}

	replica.Pause()
	// Another client, so its connections made no write of their own.
	other := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = other.Close() })
	stalled := redistest.NewStore(t, other, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: 100 * time.Millisecond}})
	if _, err := stalled.Apply(ctx, acme, growing("k3")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("replicas=1 with the replica stopped: %v, want ErrNotReplicated", err)
	}
	if _, err := stalled.Apply(ctx, acme, answered("k1")); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("answered settling batch with the replica stopped: %v, want ErrNotReplicated", err)
	}
	// A settling batch nobody is answered about does not wait.
	settling := store.Batch{Settles: true}
	settling.Delete("k3")
	if res, err := stalled.Apply(ctx, acme, settling); err != nil || !res.Committed {
		t.Fatalf("settling batch with the replica stopped: %+v, %v", res, err)
	}
	replica.Resume()
	if res, err := one.Apply(ctx, acme, growing("k4")); err != nil || !res.Committed {
		t.Fatalf("growing batch with the replica back: %+v, %v", res, err)
	}
	if res, err := one.Apply(ctx, acme, answered("k4")); err != nil || !res.Committed {
		t.Fatalf("answered settling batch with the replica back: %+v, %v", res, err)
	}
	if n, err := replica.Client.HExists(ctx, key, "k4").Result(); err != nil || n {
		t.Fatalf("the replica still holds the row an acknowledged delete removed: %v, %v", n, err)
	}
}
