package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// unorderedKey is a key of the unordered class.
func unorderedKey(name string) store.Key {
	return store.Key(append([]byte{store.UnorderedTag}, name...))
}

// walkUnordered pages through the partition's unordered rows from no
// cursor, with limit as the hint, resuming each page from its cursor's
// bytes as a caller that keeps it would, and calls between, when given,
// after each page. It returns every row it was given, by key, the last
// value seen winning.
func walkUnordered(t *testing.T, s Store, p store.Partition, limit int, between func(page int)) map[store.Key]string {
	t.Helper()
	seen := map[store.Key]string{}
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("unordered scan does not end")
		}
		page, err := s.ScanUnordered(t.Context(), p, after, limit)
		if err != nil {
			t.Fatalf("unordered scan of %s: %v", p, err)
		}
		for _, e := range page.Entries {
			seen[e.Key] = string(e.Value)
		}
		if page.Next == nil {
			return seen
		}
		if between != nil {
			between(pages)
		}
		after = store.NewCursor(page.Next.Bytes())
	}
}

// An unordered row is read, guarded and deleted by its key like any other,
// and only ScanUnordered lists it: Scan over a range that holds its key
// does not, and ScanUnordered lists nothing else.
func testUnorderedRowsAreReadByKeyAndNotScanned(t *testing.T, s Store) {
	ctx := t.Context()
	one, two := unorderedKey("1"), unorderedKey("2")
	put(t, s, acme, string(one), "v1", string(two), "", "r", "ordered", "u", "after the class")
	wantRow(t, s, acme, one, "v1")
	rows, err := s.GetMany(ctx, acme, []store.Key{two, one})
	if err != nil || !rows[0].Found || len(rows[0].Value) != 0 || string(rows[1].Value) != "v1" {
		t.Fatalf("GetMany of unordered rows: %+v %v", rows, err)
	}
	wantKeys(t, scanAll(t, s, acme, "", "\xff", 100), "r", "u")

	var stale store.Batch
	stale.RequireEquals(one, store.Value("v0"))
	stale.Put(one, store.Value("v2"))
	mustFailAt(t, s, acme, stale, 0)
	var b store.Batch
	b.RequireEquals(one, store.Value("v1"))
	b.RequireEquals(two, store.Value{})
	b.Put(one, store.Value("v2"))
	b.Delete(two)
	mustCommit(t, s, acme, b)
	want := map[store.Key]string{one: "v2"}
	if got := walkUnordered(t, s, acme, 10, nil); !maps.Equal(got, want) {
		t.Fatalf("unordered rows %q, want %q", got, want)
	}
	if got := walkUnordered(t, s, globex, 10, nil); len(got) != 0 {
		t.Fatalf("another partition's unordered rows %q", got)
	}
}

// A walk returns every unordered row that is there throughout, whatever
// is put and deleted meanwhile, and a cursor restored from its bytes goes
// on where its page left off. Small pages make the walk take many.
func testAnUnorderedWalkReturnsEveryRowPresentThroughout(t *testing.T, s Store) {
	const n = 600
	var b store.Batch
	// present is every unordered row as the store holds it; throughout,
	// those never touched during the walk.
	present, throughout := map[store.Key]string{}, map[store.Key]string{}
	for i := range n {
		k, v := unorderedKey(fmt.Sprintf("row-%04d", i)), fmt.Sprintf("value %d", i)
		b.Put(k, store.Value(v))
		// Ordered rows interleave with the class among the values, and
		// must not come.
		b.Put(store.Key(fmt.Sprintf("r%04d", i)), store.Value("ordered"))
		if len(b.Writes) == store.MaxBatchOps {
			mustCommit(t, s, acme, b)
			b = store.Batch{}
		}
		present[k] = v
		if i%5 != 0 {
			throughout[k] = v
		}
	}
	mustCommit(t, s, acme, b)
	got := walkUnordered(t, s, acme, 8, func(page int) {
		// Each page deletes rows the walk may or may not have given yet,
		// and puts one that was never there.
		var b store.Batch
		for i := page * 10; i < min(n, page*10+10); i += 5 {
			k := unorderedKey(fmt.Sprintf("row-%04d", i))
			b.Delete(k)
			delete(present, k)
		}
		k := unorderedKey(fmt.Sprintf("new-%04d", page))
		b.Put(k, store.Value("new"))
		present[k] = "new"
		mustCommit(t, s, acme, b)
	})
	for k, v := range throughout {
		if got[k] != v {
			t.Fatalf("row %q came as %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if k[0] != store.UnorderedTag {
			t.Fatalf("the unordered walk returned the ordered row %q", k)
		}
	}
	// Once the writes are done, a walk returns exactly what is there.
	if final := walkUnordered(t, s, acme, 8, nil); !maps.Equal(final, present) {
		t.Fatalf("a quiet walk returned %d rows, want the %d present", len(final), len(present))
	}
}

// ScanUnordered refuses a cursor none of its pages gave, and a limit
// below 1, rather than guessing where to go on.
func testAnUnorderedScanRefusesForeignCursors(t *testing.T, s Store) {
	ctx := t.Context()
	put(t, s, acme, string(unorderedKey("a")), "v")
	for _, c := range []*store.Cursor{store.CursorAfter(unorderedKey("a")), store.NewCursor(nil), store.NewCursor([]byte("-1"))} {
		if page, err := s.ScanUnordered(ctx, acme, c, 10); err == nil {
			t.Fatalf("cursor %q: page %+v, want an error", c.Bytes(), page)
		}
	}
	if _, err := s.ScanUnordered(ctx, acme, nil, 0); err == nil {
		t.Fatal("limit 0 accepted")
	}
	if got := keysOfMap(walkUnordered(t, s, acme, 1, nil)); !slices.Equal(got, []store.Key{unorderedKey("a")}) {
		t.Fatalf("unordered rows %q", got)
	}
}

func keysOfMap(m map[store.Key]string) []store.Key {
	return slices.Sorted(maps.Keys(m))
}
