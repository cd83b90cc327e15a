package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// sparse is a registry of many buckets, one partition in its last: the
// walk's worst case, which must still cost a bounded number of reads a page.
type sparse struct {
	buckets int
	reads   int
}

func (s *sparse) Buckets() int                   { return s.buckets }
func (s *sparse) BucketOf(p store.Partition) int { return s.buckets - 1 }
func (s *sparse) Registered(_ context.Context, bucket int, after string, limit int) ([]store.Partition, bool, error) {
	s.reads++
	if bucket == s.buckets-1 && after < "last" {
		return []store.Partition{{Namespace: "last"}}, false, nil
	}
	return nil, false, nil
}

func (s *sparse) CountRegistered(context.Context) (int, error) { return 1, nil }

func TestListRegisteredReadsABoundedNumberOfBucketsAPage(t *testing.T) {
	r := &sparse{buckets: 16384}
	var got []store.Partition
	c := store.RegistryCursor{}
	pages := 0
	for {
		r.reads = 0
		page, err := store.ListRegistered(t.Context(), r, c, 1000)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if r.reads > store.RegistryBucketsPerPage {
			t.Fatalf("a page read %d buckets, more than %d", r.reads, store.RegistryBucketsPerPage)
		}
		got = append(got, page.Partitions...)
		if page.Next == nil {
			break
		}
		c = *page.Next
	}
	if !slices.Equal(got, []store.Partition{{Namespace: "last"}}) {
		t.Fatalf("walk found %v", got)
	}
	if want := r.buckets / store.RegistryBucketsPerPage; pages != want {
		t.Fatalf("walk took %d pages, want %d", pages, want)
	}
}
