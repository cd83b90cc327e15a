package redisstore_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// listed is every registered partition, in the walk's order.
func listed(t *testing.T, s *redisstore.Store) []store.Partition {
	t.Helper()
	var all []store.Partition
	c := store.RegistryCursor{}
	for {
		page, err := store.ListRegistered(t.Context(), s, c, 100)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Partitions...)
		if page.Next == nil {
			return all
		}
		c = *page.Next
	}
}

var endpointRow = store.Key([]byte{store.RegistryTag, 'a'})

// seedPreRegistry writes n partitions, every other one with a registering
// row, then drops the registry as a keyspace written before it would lack
// it. It returns the partitions that hold a registering row.
func seedPreRegistry(t *testing.T, s *redisstore.Store, n int) []store.Partition {
	t.Helper()
	var want []store.Partition
	for i := range n {
		p := store.Partition{Namespace: fmt.Sprintf("old-%03d", i)}
		var b store.Batch
		b.Put("q", store.Value{1})
		if i%2 == 0 {
			b.Put(endpointRow, store.Value("{}"))
			want = append(want, p)
		}
		mustCommit(t, s, p, b)
	}
	for _, k := range s.RegistryKeys() {
		if err := s.Client().Del(t.Context(), k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := listed(t, s); len(got) != 0 {
		t.Fatalf("after dropping the registry %d partitions are listed", len(got))
	}
	return want
}

func TestBackfillRegistersPartitionsWrittenBeforeTheRegistry(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		ctx := t.Context()
		want := seedPreRegistry(t, s, 1200)
		slices.SortFunc(want, func(a, b store.Partition) int {
			if d := s.BucketOf(a) - s.BucketOf(b); d != 0 {
				return d
			}
			return compareNames(a.Namespace, b.Namespace)
		})
		n, err := s.BackfillRegistry(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(want) {
			t.Fatalf("backfill registered %d partitions, want %d", n, len(want))
		}
		if got := listed(t, s); !slices.Equal(got, want) {
			t.Fatalf("after the backfill %d partitions are listed, want %d", len(got), len(want))
		}
		if v, err := s.Client().Get(ctx, s.RegisteredMarker()).Result(); err != nil || v != "1" {
			t.Fatalf("marker %q, %v", v, err)
		}

		// Once it has run it does not walk again.
		if err := s.Client().Del(ctx, s.RegistryKeys()[s.BucketOf(want[0])]).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := s.BackfillRegistry(ctx); err != nil || n != 0 {
			t.Fatalf("second backfill: %d, %v; want 0 once the marker is set", n, err)
		}
		// Without the marker it walks again, and repairs what it finds
		// without doubling anything.
		if err := s.Client().Del(ctx, s.RegisteredMarker()).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := s.BackfillRegistry(ctx); err != nil || n != len(want) {
			t.Fatalf("backfill without the marker: %d, %v; want %d", n, err, len(want))
		}
		if got := listed(t, s); !slices.Equal(got, want) {
			t.Fatalf("after a repeated backfill %d partitions are listed, want %d", len(got), len(want))
		}
	})
}

func compareNames(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The backfill walks its own keyspace only, even under a prefix that reads
// as a pattern, and skips keys that only look like a partition's.
func TestBackfillStaysInItsKeyspace(t *testing.T) {
	s, m := redistest.MiniredisServer(t, redisstore.Options{Prefix: "re*lay[1]:"})
	other := redistest.NewStore(t, s.Client(), redisstore.Options{Prefix: "relay1:"})
	ctx := t.Context()
	for _, st := range []*redisstore.Store{s, other} {
		var b store.Batch
		b.Put(endpointRow, store.Value("{}"))
		mustCommit(t, st, acme, b)
		for _, k := range st.RegistryKeys() {
			m.Del(k)
		}
	}
	// A key of the keyspace's shape whose bucket is not its namespace's,
	// and one whose name is not a namespace.
	wrong := (s.BucketOf(acme) + 1) % s.Buckets()
	for _, k := range []string{
		fmt.Sprintf("re*lay[1]:{%d}:ns:acme:keys", wrong),
		fmt.Sprintf("re*lay[1]:{%d}:ns:ACME:keys", s.BucketOf(acme)),
		fmt.Sprintf("re*lay[1]:{0%d}:ns:acme:keys", s.BucketOf(acme)),
	} {
		if _, err := m.ZAdd(k, 0, string(endpointRow)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.BackfillRegistry(ctx)
	if err != nil || n != 1 {
		t.Fatalf("backfill: %d, %v; want acme alone", n, err)
	}
	if got := listed(t, s); !slices.Equal(got, []store.Partition{acme}) {
		t.Fatalf("listed %v, want acme", got)
	}
	if got := listed(t, other); len(got) != 0 {
		t.Fatalf("the other keyspace lists %v, want nothing until its own backfill", got)
	}
}
