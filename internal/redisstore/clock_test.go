package redisstore_test

import (
	"context"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
)

// The offset is the master's clock minus the caller's, against the caller's
// reading around TIME: a caller 10 s ahead of a stopped clock reads -10 s.
func TestClockSkewsIsTheMastersClockMinusTheCallers(t *testing.T) {
	t.Parallel()
	st, m := redistest.MiniredisServer(t, redisstore.Options{})
	at := time.Date(2025, 11, 30, 0, 0, 0, 0, time.UTC)
	m.SetTime(at)
	got, err := st.ClockSkews(context.Background(), func() time.Time { return at.Add(10 * time.Second) })
	if err != nil {
		t.Fatal(err)
	}
	if want := []redisstore.Skew{{Addr: m.Addr(), Offset: -10 * time.Second}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("skews %+v, want %+v", got, want)
	}
}

// Every master is compared, once each: on a Cluster, as many skews as
// masters, each with its own address and near the offset the caller's
// clock was given (the servers share this host's clock).
func TestClockSkewsComparesEveryMaster(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		st := b.New(t)
		masters := 1
		if b.Name == "cluster" {
			var n atomic.Int32
			err := redistest.ClusterClient(t).ForEachMaster(context.Background(), func(context.Context, *redis.Client) error {
				n.Add(1)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			masters = int(n.Load())
		}
		got, err := st.ClockSkews(context.Background(), func() time.Time { return time.Now().Add(-time.Minute) })
		if err != nil {
			t.Fatal(err)
		}
		addrs := map[string]bool{}
		for _, s := range got {
			addrs[s.Addr] = true
			if s.Offset < 59*time.Second || s.Offset > 61*time.Second {
				t.Errorf("%s: offset %v, want about a minute ahead", s.Addr, s.Offset)
			}
		}
		if len(got) != masters || len(addrs) != masters {
			t.Fatalf("skews %+v, want one for each of %d masters", got, masters)
		}
	})
}
