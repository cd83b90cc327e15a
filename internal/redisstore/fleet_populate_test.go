package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// TestPopulateFleet fills the Redis of RELAY_FLEET_POPULATE_URL (a server
// of one's own: it writes under the default prefix) with
// RELAY_FLEET_POPULATE_N namespaces, each with an enabled endpoint and an
// idle delivery timer due in a day, for measuring an idle relay beside
// them (docs/benchmarks.md). With RELAY_FLEET_POPULATE_PENDING=1 each
// namespace also holds one pending outcome. Skipped unless asked.
func TestPopulateFleet(t *testing.T) {
	url := os.Getenv("RELAY_FLEET_POPULATE_URL")
	if url == "" {
		t.Skip("RELAY_FLEET_POPULATE_URL unset")
	}
	n, err := strconv.Atoi(os.Getenv("RELAY_FLEET_POPULATE_N"))
	if err != nil || n < 1 {
		t.Fatal("RELAY_FLEET_POPULATE_N must be a count")
	}
	pending := os.Getenv("RELAY_FLEET_POPULATE_PENDING") == "1"
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client := redis.NewClient(opts)
	defer client.Close()
	st, err := redisstore.New(ctx, client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ep := schema.Endpoint{URL: "https://hooks.example.com/h", Enabled: true}.WithDefaults()
	ep.CreatedMs, ep.UpdatedMs = time.Now().UnixMilli(), time.Now().UnixMilli()
	v, err := schema.EncodeEndpoint(&ep)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(24 * time.Hour).UnixMilli()
	app := &outbox.Appender{Store: st}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				p := store.Partition{Namespace: fmt.Sprintf("fleet-%06d", i)}
				var b store.Batch
				b.Put(schema.ClassEndpoint.Key("h"), v)
				b.Put(schema.ClassCounters.Key("h"), schema.EncodeCounters(schema.Counters{}))
				b.Put(timers.Key(due, timers.KindOutcomeDelivery, "h"), timers.EncodeIdle(nil))
				if _, err := st.Apply(ctx, p, b); err != nil {
					t.Error(err)
					return
				}
				if pending {
					o := schema.Outcome{ReservationID: "r1", Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(),
						Aborted: &schema.Aborted{Reason: "ref_conflict", Detail: "main moved"}}
					if _, err := app.Append(ctx, p, []schema.Outcome{o}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d namespaces written", n)
}
