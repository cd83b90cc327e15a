package outbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// durableAdmin is an Admin on the Redis of client under replicas=1,
// answering within timeout.
func durableAdmin(t *testing.T, e *env, client redis.UniversalClient, timeout time.Duration) *outbox.Admin {
	t.Helper()
	st := redistest.NewStore(t, client, redisstore.Options{Durability: redisstore.Durability{Replicas: 1, Timeout: timeout}})
	return &outbox.Admin{Store: st, Clock: e.Clk, Retention: 24 * time.Hour}
}

func wantNotReplicated(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("%s with no replica acknowledging: %v, want unavailable (not replicated)", what, err)
	}
}

// Under replicas=1 with no replica to acknowledge (miniredis answers WAIT
// with 0), every operator's change is answered unavailable, those that only
// delete (an erasure, an endpoint's delete and its drop batches) too: their
// answer tells an operator something is gone, which a failover must not
// bring back.
func TestOperatorChangesAreUnavailableUnreplicated(t *testing.T) {
	_, m := redistest.MiniredisServer(t, redisstore.Options{})
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e := newEnv(t, redistest.NewStore(t, client, redisstore.Options{}))
	e.put("billing", outbox.EndpointSpec{Enabled: true})
	e.Append(committed("r-1"), committed("r-2"))
	e.put("audit", outbox.EndpointSpec{Enabled: true})
	e.Append(committed("r-3"))
	e.put("idle", outbox.EndpointSpec{Enabled: true})
	// A forced delete cut short after its mark: its next run only drops.
	cut := &outbox.Admin{Store: &cutStore{NamespaceStore: e.St, allow: 1}, Clock: e.Clk}
	if _, err := cut.DeleteEndpoint(e.Ctx, e.P, "audit", true); !errors.Is(err, errCut) {
		t.Fatalf("cut delete: %v", err)
	}
	adm := durableAdmin(t, e, client, 20*time.Millisecond)

	_, err := adm.Erase(e.Ctx, e.P, "r-1")
	wantNotReplicated(t, "erase", err)
	_, err = adm.DeleteEndpoint(e.Ctx, e.P, "idle", false)
	wantNotReplicated(t, "delete of an endpoint with nothing pending", err)
	_, err = adm.DeleteEndpoint(e.Ctx, e.P, "audit", true)
	wantNotReplicated(t, "forced delete's drop", err)
	_, err = adm.Replay(e.Ctx, e.P, "billing", "r-2")
	wantNotReplicated(t, "replay", err)
	_, err = adm.PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://hooks.example.com/billing"})
	wantNotReplicated(t, "endpoint put", err)
}

// On a real master with one replica under replicas=1: an erasure and an
// endpoint's delete are answered once the replica holds them, so that the
// replica promoted after the master's loss still has them gone; while the
// replica is cut off they are answered unavailable.
func TestOperatorChangesWaitForTheReplica(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	e := newEnv(t, redistest.NewStore(t, master.Client, redisstore.Options{}))
	e.put("billing", outbox.EndpointSpec{Enabled: true})
	e.put("audit", outbox.EndpointSpec{Enabled: true})
	e.Append(committed("r-1"), committed("r-2"), committed("r-3"))
	e.put("idle", outbox.EndpointSpec{Enabled: true})
	// Its own client, so that no connection of the setup's is in its pool.
	client := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = client.Close() })
	adm := durableAdmin(t, e, client, time.Second)
	if _, err := adm.Erase(e.Ctx, e.P, "r-1"); err != nil {
		t.Fatalf("erase with the replica up: %v", err)
	}
	if _, err := adm.DeleteEndpoint(e.Ctx, e.P, "audit", true); err != nil {
		t.Fatalf("forced delete with the replica up: %v", err)
	}

	replica.Pause()
	cutOff := durableAdmin(t, e, client, 100*time.Millisecond)
	_, err := cutOff.Erase(e.Ctx, e.P, "r-2")
	wantNotReplicated(t, "erase", err)
	_, err = cutOff.DeleteEndpoint(e.Ctx, e.P, "idle", false)
	wantNotReplicated(t, "delete", err)

	// The master is lost and its replica promoted: what was answered done
	// stays done.
	master.Stop()
	replica.Resume()
	if err := replica.Client.ReplicaOf(e.Ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	promoted := &outbox.Admin{Store: redistest.NewStore(t, replica.Client, redisstore.Options{}), Clock: e.Clk, Retention: 24 * time.Hour}
	if _, err := promoted.Outcome(e.Ctx, e.P, "r-1"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
		t.Errorf("the promoted replica holds the erased outcome: %v", err)
	}
	if _, err := promoted.Endpoint(e.Ctx, e.P, "audit"); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("the promoted replica holds the deleted endpoint: %v", err)
	}
}
