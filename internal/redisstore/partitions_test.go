package redisstore_test

import (
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/store"
)

// Every partition with a timer is listed, parked or not, across pages;
// one whose last timer went is not.
func TestPartitionsListsEveryPartitionWithATimer(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *redisstore.Store) {
		bucket := s.BucketOf(acme)
		var want []string
		dues := map[string]int64{}
		for i := 0; len(want) < 300; i++ {
			p := store.Partition{Namespace: "ns-" + strconv.Itoa(i)}
			if s.BucketOf(p) != bucket {
				continue
			}
			due := int64(1000 + i)
			if i%3 == 0 {
				due = math.MaxInt64 // parked
			}
			var b store.Batch
			b.Put(timerKey(due, "ep"), store.Value{0})
			mustCommit(t, s, p, b)
			want = append(want, p.Namespace)
			dues[p.Namespace] = due
		}
		// A partition whose timer is gone leaves the index.
		gone := want[1]
		var b store.Batch
		b.Delete(timerKey(dues[gone], "ep"))
		mustCommit(t, s, store.Partition{Namespace: gone}, b)
		want = slices.Delete(want, 1, 2)
		var got []string
		var cursor uint64
		for {
			parts, next, err := s.Partitions(t.Context(), bucket, cursor, 50)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range parts {
				if !slices.Contains(got, p.Namespace) {
					got = append(got, p.Namespace)
				}
			}
			if next == 0 {
				break
			}
			cursor = next
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("listed %d partitions, want %d", len(got), len(want))
		}
		if _, _, err := s.Partitions(t.Context(), s.Buckets(), 0, 10); err == nil {
			t.Fatal("a bucket out of range was listed")
		}
	})
}
