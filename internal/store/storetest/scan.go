package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// binaryKeys are distinct keys whose byte order differs from any text
// collation: NUL and 0xff bytes, prefixes of each other, high bytes first.
var binaryKeys = []store.Key{
	"\xff", "\xff\xff", "\xff\x00", "\x00", "\x00\x00", "\x00\xff", "\x01",
	"a", "a\x00", "a\x00\x00", "a\xff", "a\x7f", "a\x80", "A", "b", "\x7f", "\x80",
}

func testBinaryKeysScanInByteOrder(t *testing.T, s Store) {
	var b store.Batch
	for i, k := range binaryKeys {
		v := string(k) + "=" + strconv.Itoa(i)
		if i%3 == 0 {
			v = "" // empty values scan as present rows too
		}
		b.Put(k, store.Value(v))
	}
	mustCommit(t, s, acme, b)

	want := slices.Clone(binaryKeys)
	slices.SortFunc(want, func(a, b store.Key) int { return bytes.Compare([]byte(a), []byte(b)) })
	got := scanAll(t, s, acme, "\x00", "\xff\xff\xff", 100)
	wantKeys(t, got, want...)
	for _, e := range got {
		i := slices.Index(binaryKeys, e.Key)
		wantValue := string(e.Key) + "=" + strconv.Itoa(i)
		if i%3 == 0 {
			wantValue = ""
		}
		if string(e.Value) != wantValue {
			t.Fatalf("row %q scanned with value %q, want %q", e.Key, e.Value, wantValue)
		}
	}
	// The same keys one page at a time.
	wantKeys(t, scanAll(t, s, acme, "\x00", "\xff\xff\xff", 1), want...)
	// A range whose bounds hold NUL and 0xff bytes.
	wantKeys(t, scanAll(t, s, acme, "a\x00", "a\xff", 2), "a\x00", "a\x00\x00", "a\x7f", "a\x80")
}

func testPagingVisitsEveryKeyOnceInOrder(t *testing.T, s Store) {
	const n = 50
	var b store.Batch
	want := make([]store.Key, n)
	for i := range n {
		// Written out of order, so only the store can sort them.
		j := (i * 7) % n
		want[j] = store.Key(fmt.Sprintf("row/%03d", j))
		b.Put(want[j], store.Value(strconv.Itoa(j)))
	}
	b.Put("before", nil)
	b.Put("row0", nil) // '0' sorts after '/': outside [row/, row0)
	mustCommit(t, s, acme, b)
	for _, limit := range []int{1, 2, 3, 7, 10, 25, 49, 50, 51, 1000} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			wantKeys(t, scanAll(t, s, acme, "row/", "row0", limit), want...)
		})
	}
	// A page that ends exactly at the last key has no Next.
	page, err := s.Scan(t.Context(), acme, "row/", "row0", nil, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != n || page.Next != nil {
		t.Fatalf("scan of exactly %d rows: %d entries, Next %v; want all, nil", n, len(page.Entries), page.Next)
	}
	page, err = s.Scan(t.Context(), acme, "row/", "row0", nil, n-1)
	if err != nil {
		t.Fatal(err)
	}
	if page.Next == nil {
		t.Fatalf("scan of %d of %d rows has no Next", n-1, n)
	}
}

func testScanBoundsAreHalfOpen(t *testing.T, s Store) {
	put(t, s, acme, "b", "", "c", "", "d", "", "e", "")
	ctx := t.Context()
	for _, tc := range []struct {
		name       string
		start, end store.Key
		after      *store.Cursor
		want       []store.Key
	}{
		{"start included, end excluded", "b", "d", nil, []store.Key{"b", "c"}},
		{"bounds between keys", "bb", "dd", nil, []store.Key{"c", "d"}},
		{"empty start", "", "c", nil, []store.Key{"b"}},
		{"cursor after the start", "b", "z", store.CursorAfter("c"), []store.Key{"d", "e"}},
		{"cursor between keys", "b", "z", store.CursorAfter("cc"), []store.Key{"d", "e"}},
		{"cursor before the start", "c", "z", store.CursorAfter("a"), []store.Key{"c", "d", "e"}},
		{"cursor at the end", "b", "d", store.CursorAfter("d"), nil},
		{"cursor past the end", "b", "d", store.CursorAfter("x"), nil},
		{"empty range", "c", "c", nil, nil},
		{"inverted range", "d", "b", nil, nil},
	} {
		page, err := s.Scan(ctx, acme, tc.start, tc.end, tc.after, 10)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if g := keysOf(page.Entries); !slices.Equal(g, tc.want) {
			t.Fatalf("%s: scanned %q, want %q", tc.name, g, tc.want)
		}
		if page.Next != nil {
			t.Fatalf("%s: Next %q at the end of the range", tc.name, page.Next.Bytes())
		}
	}
	if _, err := s.Scan(ctx, acme, "a", "z", nil, 0); err == nil {
		t.Fatal("scan with limit 0 succeeded, want an error")
	}
}

func testCursorRestoredFromBytesResumes(t *testing.T, s Store) {
	put(t, s, acme, "k\x00", "", "k\x01", "", "k\xff", "", "k\xff\x00", "")
	ctx := t.Context()
	page, err := s.Scan(ctx, acme, "k", "l", nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, page.Entries, "k\x00", "k\x01")
	if page.Next == nil {
		t.Fatal("first page has no Next")
	}
	saved := bytes.Clone(page.Next.Bytes())
	page, err = s.Scan(ctx, acme, "k", "l", store.NewCursor(saved), 2)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, page.Entries, "k\xff", "k\xff\x00")
	if page.Next != nil {
		t.Fatalf("last page has Next %q", page.Next.Bytes())
	}
}

func testConcurrentGuardedIncrementsAreExact(t *testing.T, s Store) {
	const workers, each = 32, 10
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := increment(ctx, s, "counter", w); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wantRow(t, s, acme, "counter", strconv.Itoa(workers*each))
}

// increment is a guarded read-modify-write that retries when another writer
// got there first. Each commit also records who made it, so a lost or
// doubled increment would show as a wrong total.
func increment(ctx context.Context, s Store, key store.Key, worker int) error {
	for {
		v, found, err := s.Get(ctx, acme, key)
		if err != nil {
			return err
		}
		n := 0
		if found {
			if n, err = strconv.Atoi(string(v)); err != nil {
				return fmt.Errorf("counter holds %q: %w", v, err)
			}
		}
		var b store.Batch
		b.Guard(key, v, found)
		b.Put(key, store.Value(strconv.Itoa(n+1)))
		b.Put(store.Key(fmt.Sprintf("by/%02d/%06d", worker, n)), nil)
		r, err := s.Apply(ctx, acme, b)
		if err != nil {
			return err
		}
		if r.Committed {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func testPartitionsAreIsolated(t *testing.T, s Store) {
	put(t, s, acme, "common", "acme's", "only-acme", "")
	put(t, s, globex, "common", "globex's")
	wantRow(t, s, acme, "common", "acme's")
	wantRow(t, s, globex, "common", "globex's")
	wantAbsent(t, s, globex, "only-acme")
	wantKeys(t, scanAll(t, s, globex, "", "\xff", 10), "common")

	var b store.Batch
	b.RequireEquals("common", store.Value("acme's")) // true in acme, not in globex
	b.Delete("common")
	mustFailAt(t, s, globex, b, 0)
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "common")
	wantRow(t, s, globex, "common", "globex's")
}
