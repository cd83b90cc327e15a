package storetest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// BlockedKey is the key of number n in the block-ordered class.
func BlockedKey(n uint64) store.Key {
	return store.Key(binary.BigEndian.AppendUint64([]byte{store.BlockTag}, n))
}

// blockedSeqs span several blocks of 64, with gaps, both ends of blocks
// and a lone row far on.
var blockedSeqs = []uint64{0, 1, 2, 40, 63, 64, 65, 100, 127, 128, 200, 255, 256, 257, 319, 1 << 40}

// Rows of the block-ordered class scan in byte order like any other, with
// rows of other classes either side, page by page at any limit, from a
// cursor inside a block, and within bounds that cut blocks.
func testBlockedRowsScanInByteOrder(t *testing.T, s Store) {
	var b store.Batch
	var want []store.Key
	for _, n := range slices.Backward(blockedSeqs) {
		b.Put(BlockedKey(n), store.Value(fmt.Sprint(n)))
	}
	b.Put("k-before", store.Value("k"))
	b.Put("m-after", store.Value("m"))
	mustCommit(t, s, acme, b)
	for _, n := range blockedSeqs {
		want = append(want, BlockedKey(n))
	}
	start, end := store.Key([]byte{store.BlockTag}), store.Key([]byte{store.BlockTag + 1})
	for _, limit := range []int{1, 3, 7, 100} {
		got := scanAll(t, s, acme, start, end, limit)
		wantKeys(t, got, want...)
		for _, e := range got {
			if n := binary.BigEndian.Uint64([]byte(e.Key[1:])); string(e.Value) != fmt.Sprint(n) {
				t.Fatalf("row %d holds %q", n, e.Value)
			}
		}
	}
	all := append(append([]store.Key{"k-before"}, want...), "m-after")
	wantKeys(t, scanAll(t, s, acme, "", "\xff", 4), all...)
	// Bounds inside blocks.
	wantKeys(t, scanAll(t, s, acme, BlockedKey(40), BlockedKey(128), 2), BlockedKey(40), BlockedKey(63), BlockedKey(64), BlockedKey(65), BlockedKey(100), BlockedKey(127))
	wantKeys(t, scanAll(t, s, acme, BlockedKey(41), BlockedKey(64), 100), BlockedKey(63))
	// A cursor after a row inside a block, as a caller keeps it.
	page, err := s.Scan(t.Context(), acme, start, end, store.NewCursor([]byte(BlockedKey(64))), 3)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, page.Entries, BlockedKey(65), BlockedKey(100), BlockedKey(127))
	if page.Next == nil {
		t.Fatal("a page with rows after it has no Next")
	}
	// Several reads at once see them alike.
	res, err := store.ReadMany(t.Context(), s, acme, []store.Read{
		{Start: BlockedKey(60), End: BlockedKey(130), Limit: 100},
		{Keys: []store.Key{BlockedKey(64), BlockedKey(66)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, res[0].Page.Entries, BlockedKey(63), BlockedKey(64), BlockedKey(65), BlockedKey(100), BlockedKey(127), BlockedKey(128))
	if !res[1].Rows[0].Found || res[1].Rows[1].Found {
		t.Fatalf("rows by key %+v", res[1].Rows)
	}
}

// Deleting some rows of a block leaves the rest listed; deleting all of
// it leaves none, and a row put again is listed again.
func testDeletingBlockedRowsKeepsTheRestInOrder(t *testing.T, s Store) {
	var b store.Batch
	for _, n := range blockedSeqs {
		b.Put(BlockedKey(n), store.Value("v"))
	}
	mustCommit(t, s, acme, b)
	b = store.Batch{}
	for _, n := range []uint64{64, 65, 100, 127, 0, 1} {
		b.Delete(BlockedKey(n))
	}
	mustCommit(t, s, acme, b)
	start, end := store.Key([]byte{store.BlockTag}), store.Key([]byte{store.BlockTag + 1})
	wantKeys(t, scanAll(t, s, acme, start, end, 2), BlockedKey(2), BlockedKey(40), BlockedKey(63), BlockedKey(128), BlockedKey(200),
		BlockedKey(255), BlockedKey(256), BlockedKey(257), BlockedKey(319), BlockedKey(1<<40))
	b = store.Batch{}
	b.Put(BlockedKey(99), store.Value("again"))
	for _, n := range []uint64{2, 40, 63} {
		b.Delete(BlockedKey(n))
	}
	mustCommit(t, s, acme, b)
	wantKeys(t, scanAll(t, s, acme, start, BlockedKey(200), 1), BlockedKey(99), BlockedKey(128))
	wantRow(t, s, acme, BlockedKey(99), "again")
}

// A write of a key with the block tag of another length is refused whole:
// the store could not place it among the blocks.
func testABlockTaggedKeyOfAnotherLengthIsRefused(t *testing.T, s Store) {
	for _, key := range []store.Key{store.Key([]byte{store.BlockTag}), BlockedKey(1) + "x", BlockedKey(1)[:8]} {
		var b store.Batch
		b.Put("other", store.Value("v"))
		b.Put(key, store.Value("v"))
		if _, err := s.Apply(t.Context(), acme, b); !errors.Is(err, store.ErrInvalidBatch) {
			t.Fatalf("put of %q: %v, want ErrInvalidBatch", key, err)
		}
	}
	wantAbsent(t, s, acme, "other")
}
