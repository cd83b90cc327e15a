// Package storetest is the contract suite of store.NamespaceStore and
// store.DueIndex. Every backend runs it unchanged:
//
//	storetest.Run(t, func(t *testing.T) storetest.Store { return newBackend(t) })
//
// Each subtest gets a fresh, isolated store from the factory and may run in
// parallel with the others.
package storetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// Store is what the suite exercises.
type Store interface {
	store.NamespaceStore
	store.DueIndex
}

// Run runs the whole contract suite against stores made by newStore.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s Store)
	}{
		{"GetOfAbsentRowIsNotFound", testGetOfAbsentRowIsNotFound},
		{"GetManyReadsEachRowInOrder", testGetManyReadsEachRowInOrder},
		{"PutThenGetReturnsValue", testPutThenGetReturnsValue},
		{"EmptyValueIsAPresentRow", testEmptyValueIsAPresentRow},
		{"DeleteRemovesRow", testDeleteRemovesRow},
		{"WritesApplyInOrder", testWritesApplyInOrder},
		{"EqualsOnAbsentRowFails", testEqualsOnAbsentRowFails},
		{"EqualsWithEmptyValueOnPresentEmptyRowPasses", testEqualsWithEmptyValueOnPresentEmptyRowPasses},
		{"EqualsWithOtherValueFails", testEqualsWithOtherValueFails},
		{"AbsentOnPresentRowFails", testAbsentOnPresentRowFails},
		{"ResultNamesFirstFailingPrecondition", testResultNamesFirstFailingPrecondition},
		{"FailedPreconditionWritesNothing", testFailedPreconditionWritesNothing},
		{"MalformedBatchIsRefusedAndWritesNothing", testMalformedBatchIsRefusedAndWritesNothing},
		{"BatchOfExactlyMaxOpsCommits", testBatchOfExactlyMaxOpsCommits},
		{"InvalidPartitionIsRefused", testInvalidPartitionIsRefused},
		{"BinaryKeysScanInByteOrder", testBinaryKeysScanInByteOrder},
		{"PagingVisitsEveryKeyOnceInOrder", testPagingVisitsEveryKeyOnceInOrder},
		{"ScanBoundsAreHalfOpen", testScanBoundsAreHalfOpen},
		{"CursorRestoredFromBytesResumes", testCursorRestoredFromBytesResumes},
		{"ConcurrentGuardedIncrementsAreExact", testConcurrentGuardedIncrementsAreExact},
		{"PartitionsAreIsolated", testPartitionsAreIsolated},
		{"DueIndexHoldsEarliestTimer", testDueIndexHoldsEarliestTimer},
		{"DeletingLastTimerLeavesDueIndex", testDeletingLastTimerLeavesDueIndex},
		{"FailedBatchLeavesDueIndexUnchanged", testFailedBatchLeavesDueIndexUnchanged},
		{"DueListsPartitionsOfBucketEarliestFirst", testDueListsPartitionsOfBucketEarliestFirst},
		{"DrainBatchIsAppliedLikeAnyOther", testDrainBatchIsAppliedLikeAnyOther},
		{"ReadManyAnswersAsEachReadAlone", testReadManyAnswersAsEachReadAlone},
		{"AddToAbsentRowStartsFromZero", testAddToAbsentRowStartsFromZero},
		{"AddAddsToThePresentCounters", testAddAddsToThePresentCounters},
		{"AddToARowOfAnotherLayoutIsRefusedWhole", testAddToARowOfAnotherLayoutIsRefusedWhole},
		{"AddOutOfRangeIsRefusedWhole", testAddOutOfRangeIsRefusedWhole},
		{"ASaturatingCounterStopsAtZeroBesideARefusingOne", testASaturatingCounterStopsAtZeroBesideARefusingOne},
		{"ASaturatingCounterStillRefusesAboveTheLargest", testASaturatingCounterStillRefusesAboveTheLargest},
		{"AFailingPreconditionStopsAnAdd", testAFailingPreconditionStopsAnAdd},
		{"AResentAddIsFalsifiedByItsOwnGuard", testAResentAddIsFalsifiedByItsOwnGuard},
		{"ConcurrentAddsAreExact", testConcurrentAddsAreExact},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

var (
	acme   = store.Partition{Namespace: "acme"}
	globex = store.Partition{Namespace: "globex"}
)

// TimerKey builds a timer row key as internal/timers lays it out: the tag,
// the due ms big-endian, a 2-byte kind and a reference.
func TimerKey(dueMs int64, ref string) store.Key {
	b := make([]byte, 11, 11+len(ref))
	b[0] = store.TimerTag
	binary.BigEndian.PutUint64(b[1:9], uint64(dueMs))
	binary.BigEndian.PutUint16(b[9:11], 8)
	return store.Key(append(b, ref...))
}

// apply applies b and fails the test on an error.
func apply(t *testing.T, s Store, p store.Partition, b store.Batch) store.Result {
	t.Helper()
	r, err := s.Apply(t.Context(), p, b)
	if err != nil {
		t.Fatalf("apply on %s: %v", p, err)
	}
	return r
}

func mustCommit(t *testing.T, s Store, p store.Partition, b store.Batch) {
	t.Helper()
	if r := apply(t, s, p, b); !r.Committed {
		t.Fatalf("apply on %s: precondition %d failed, want committed", p, r.Failed)
	}
}

func mustFailAt(t *testing.T, s Store, p store.Partition, b store.Batch, want int) {
	t.Helper()
	r := apply(t, s, p, b)
	if r.Committed {
		t.Fatalf("apply on %s committed, want precondition %d to fail", p, want)
	}
	if r.Failed != want {
		t.Fatalf("apply on %s: precondition %d failed, want %d", p, r.Failed, want)
	}
}

func testGetManyReadsEachRowInOrder(t *testing.T, s Store) {
	ctx := t.Context()
	put(t, s, acme, "a", "1", "empty", "", "\x00\xff", "bin")
	rows, err := s.GetMany(ctx, acme, []store.Key{"missing", "\x00\xff", "a", "empty", "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Row{{}, {Value: store.Value("bin"), Found: true}, {Value: store.Value("1"), Found: true},
		{Value: store.Value{}, Found: true}, {Value: store.Value("1"), Found: true}}
	if len(rows) != len(want) {
		t.Fatalf("%d rows for %d keys", len(rows), len(want))
	}
	for i := range want {
		if rows[i].Found != want[i].Found || !bytes.Equal(rows[i].Value, want[i].Value) {
			t.Fatalf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	if rows, err := s.GetMany(ctx, globex, []store.Key{"a"}); err != nil || rows[0].Found {
		t.Fatalf("another partition's row: %+v %v", rows, err)
	}
	if rows, err := s.GetMany(ctx, acme, nil); err != nil || len(rows) != 0 {
		t.Fatalf("no keys: %+v %v", rows, err)
	}
	many := make([]store.Key, store.MaxBatchOps+1)
	for i := range many {
		many[i] = "k"
	}
	if _, err := s.GetMany(ctx, acme, many); err == nil {
		t.Fatal("GetMany of more than MaxBatchOps keys succeeded")
	}
}

func put(t *testing.T, s Store, p store.Partition, kv ...string) {
	t.Helper()
	var b store.Batch
	for i := 0; i+1 < len(kv); i += 2 {
		b.Put(store.Key(kv[i]), store.Value(kv[i+1]))
	}
	mustCommit(t, s, p, b)
}

func get(t *testing.T, s Store, p store.Partition, key store.Key) (store.Value, bool) {
	t.Helper()
	v, ok, err := s.Get(t.Context(), p, key)
	if err != nil {
		t.Fatalf("get %q on %s: %v", key, p, err)
	}
	return v, ok
}

func wantRow(t *testing.T, s Store, p store.Partition, key store.Key, want string) {
	t.Helper()
	v, ok := get(t, s, p, key)
	if !ok {
		t.Fatalf("row %q on %s is absent, want %q", key, p, want)
	}
	if string(v) != want {
		t.Fatalf("row %q on %s = %q, want %q", key, p, v, want)
	}
}

func wantAbsent(t *testing.T, s Store, p store.Partition, keys ...store.Key) {
	t.Helper()
	for _, key := range keys {
		if v, ok := get(t, s, p, key); ok {
			t.Fatalf("row %q on %s = %q, want absent", key, p, v)
		}
	}
}

// scanAll pages through [start, end) with the given limit and checks the
// paging contract on the way: every page but the last is full and has a
// Next, the last has none.
func scanAll(t *testing.T, s Store, p store.Partition, start, end store.Key, limit int) []store.Entry {
	t.Helper()
	var all []store.Entry
	var after *store.Cursor
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatal("scan does not end")
		}
		page, err := s.Scan(t.Context(), p, start, end, after, limit)
		if err != nil {
			t.Fatalf("scan %s: %v", p, err)
		}
		if len(page.Entries) > limit {
			t.Fatalf("page of %d entries exceeds limit %d", len(page.Entries), limit)
		}
		all = append(all, page.Entries...)
		if page.Next == nil {
			return all
		}
		if len(page.Entries) != limit {
			t.Fatalf("page of %d entries with a Next, want a full page of %d", len(page.Entries), limit)
		}
		after = page.Next
	}
}

func keysOf(entries []store.Entry) []store.Key {
	keys := make([]store.Key, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	return keys
}

func wantKeys(t *testing.T, got []store.Entry, want ...store.Key) {
	t.Helper()
	if g := keysOf(got); !slices.Equal(g, want) {
		t.Fatalf("scanned keys %q, want %q", g, want)
	}
}

func testGetOfAbsentRowIsNotFound(t *testing.T, s Store) {
	v, ok := get(t, s, acme, "nothing")
	if ok || v != nil {
		t.Fatalf("get of absent row = %q, %v; want nil, false", v, ok)
	}
}

func testPutThenGetReturnsValue(t *testing.T, s Store) {
	value := string([]byte{0, 1, 2, 0xff, 'x', 0})
	put(t, s, acme, "k", value)
	wantRow(t, s, acme, "k", value)
	put(t, s, acme, "k", "second")
	wantRow(t, s, acme, "k", "second")

	big := bytes.Repeat([]byte{0xab}, 1<<20)
	put(t, s, acme, "big", string(big))
	wantRow(t, s, acme, "big", string(big))
}

func testEmptyValueIsAPresentRow(t *testing.T, s Store) {
	put(t, s, acme, "empty", "")
	v, ok := get(t, s, acme, "empty")
	if !ok || len(v) != 0 {
		t.Fatalf("get of empty row = %q, %v; want empty, true", v, ok)
	}
	wantKeys(t, scanAll(t, s, acme, "a", "z", 10), "empty")
}

func testDeleteRemovesRow(t *testing.T, s Store) {
	put(t, s, acme, "a", "1", "b", "2")
	var b store.Batch
	b.Delete("a")
	b.Delete("never-there")
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "a", "never-there")
	wantRow(t, s, acme, "b", "2")
	wantKeys(t, scanAll(t, s, acme, "a", "z", 10), "b")
}

func testWritesApplyInOrder(t *testing.T, s Store) {
	var b store.Batch
	b.Put("put-then-delete", store.Value("x"))
	b.Delete("put-then-delete")
	b.Delete("delete-then-put")
	b.Put("delete-then-put", store.Value("y"))
	b.Put("put-twice", store.Value("first"))
	b.Put("put-twice", store.Value("last"))
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "put-then-delete")
	wantRow(t, s, acme, "delete-then-put", "y")
	wantRow(t, s, acme, "put-twice", "last")
	wantKeys(t, scanAll(t, s, acme, "a", "z", 10), "delete-then-put", "put-twice")
}

func testEqualsOnAbsentRowFails(t *testing.T, s Store) {
	var b store.Batch
	b.RequireEquals("missing", store.Value(""))
	b.Put("written", store.Value("x"))
	mustFailAt(t, s, acme, b, 0)
	wantAbsent(t, s, acme, "written")
}

func testEqualsWithEmptyValueOnPresentEmptyRowPasses(t *testing.T, s Store) {
	put(t, s, acme, "empty", "")
	var b store.Batch
	b.RequireEquals("empty", nil)
	b.RequireEquals("empty", store.Value{})
	b.Put("written", store.Value("x"))
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "written", "x")
}

func testEqualsWithOtherValueFails(t *testing.T, s Store) {
	put(t, s, acme, "k", "value")
	for _, other := range []string{"", "valu", "value\x00", "Value"} {
		var b store.Batch
		b.RequireEquals("k", store.Value(other))
		b.Put("k", store.Value("changed"))
		mustFailAt(t, s, acme, b, 0)
	}
	var b store.Batch
	b.RequireEquals("k", store.Value("value"))
	b.Put("k", store.Value("changed"))
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "k", "changed")
}

func testAbsentOnPresentRowFails(t *testing.T, s Store) {
	put(t, s, acme, "present", "")
	var b store.Batch
	b.RequireAbsent("missing")
	b.RequireAbsent("present")
	b.Put("written", store.Value("x"))
	mustFailAt(t, s, acme, b, 1)
	wantAbsent(t, s, acme, "written")

	var ok store.Batch
	ok.RequireAbsent("missing")
	ok.Put("written", store.Value("x"))
	mustCommit(t, s, acme, ok)
	wantRow(t, s, acme, "written", "x")
}

func testResultNamesFirstFailingPrecondition(t *testing.T, s Store) {
	put(t, s, acme, "a", "1", "b", "2", "c", "3")
	var b store.Batch
	b.RequireEquals("a", store.Value("1")) // holds
	b.Guard("b", store.Value("2"), true)   // holds
	b.RequireAbsent("none")                // holds
	b.RequireEquals("c", store.Value("x")) // first to fail
	b.RequireAbsent("a")                   // fails too
	b.RequireEquals("none", nil)           // fails too
	b.Put("a", store.Value("changed"))
	mustFailAt(t, s, acme, b, 3)
	wantRow(t, s, acme, "a", "1")
}

func testFailedPreconditionWritesNothing(t *testing.T, s Store) {
	put(t, s, acme, "keep", "old", string(TimerKey(5000, "ep")), "\x00")
	var b store.Batch
	b.RequireAbsent("fresh")
	b.RequireEquals("keep", store.Value("stale"))
	for i := range 10 {
		b.Put(store.Key("new-"+strconv.Itoa(i)), store.Value("v"))
	}
	b.Put("keep", store.Value("overwritten"))
	b.Delete(TimerKey(5000, "ep"))
	b.Put(TimerKey(1000, "ep"), store.Value("\x00"))
	mustFailAt(t, s, acme, b, 1)

	for i := range 10 {
		wantAbsent(t, s, acme, store.Key("new-"+strconv.Itoa(i)))
	}
	wantRow(t, s, acme, "keep", "old")
	wantKeys(t, scanAll(t, s, acme, "", "\xff", 100), "keep", TimerKey(5000, "ep"))
}

func testMalformedBatchIsRefusedAndWritesNothing(t *testing.T, s Store) {
	valid := func() store.Batch {
		var b store.Batch
		b.RequireAbsent("guard")
		b.Put("first", store.Value("1"))
		return b
	}
	tooLarge := valid()
	for i := len(tooLarge.Preconditions) + len(tooLarge.Writes); i <= store.MaxBatchOps; i++ {
		tooLarge.Put(store.Key(fmt.Sprintf("bulk-%03d", i)), store.Value("v"))
	}
	emptyKey := valid()
	emptyKey.Put("", store.Value("v"))
	emptyPrecondition := valid()
	emptyPrecondition.RequireEquals("", nil)
	unknownWrite := valid()
	unknownWrite.Writes = append(unknownWrite.Writes, store.Write{Kind: 9, Key: "odd", Value: store.Value("v")})
	unknownPrecondition := valid()
	unknownPrecondition.Preconditions = append(unknownPrecondition.Preconditions, store.Precondition{Kind: 0, Key: "odd"})
	hugeKey := valid()
	hugeKey.Put(store.Key(bytes.Repeat([]byte("k"), store.MaxKeyBytes+1)), nil)
	deleteWithValue := valid()
	deleteWithValue.Writes = append(deleteWithValue.Writes, store.Write{Kind: store.Delete, Key: "first", Value: store.Value("v")})

	cases := []struct {
		name string
		b    store.Batch
		want error
	}{
		{"101 operations", tooLarge, store.ErrBatchTooLarge},
		{"empty write key", emptyKey, store.ErrInvalidBatch},
		{"empty precondition key", emptyPrecondition, store.ErrInvalidBatch},
		{"unknown write kind", unknownWrite, store.ErrInvalidBatch},
		{"unknown precondition kind", unknownPrecondition, store.ErrInvalidBatch},
		{"oversized key", hugeKey, store.ErrInvalidBatch},
		{"delete with a value", deleteWithValue, store.ErrInvalidBatch},
	}
	for _, c := range addShapeCases() {
		cases = append(cases, struct {
			name string
			b    store.Batch
			want error
		}{c.name, c.b, store.ErrInvalidBatch})
	}
	for _, tc := range cases {
		r, err := s.Apply(t.Context(), acme, tc.b)
		if !errors.Is(err, tc.want) {
			t.Fatalf("%s: apply = %+v, %v; want an error wrapping %v", tc.name, r, err, tc.want)
		}
		if r.Committed {
			t.Fatalf("%s: apply reports committed alongside error %v", tc.name, err)
		}
	}
	if got := scanAll(t, s, acme, "", "\xff", 200); len(got) != 0 {
		t.Fatalf("malformed batches wrote %q", keysOf(got))
	}
}

func testBatchOfExactlyMaxOpsCommits(t *testing.T, s Store) {
	var b store.Batch
	b.RequireAbsent("guard")
	for i := 1; i < store.MaxBatchOps; i++ {
		b.Put(store.Key(fmt.Sprintf("row-%03d", i)), store.Value("v"))
	}
	if b.Ops() != store.MaxBatchOps {
		t.Fatalf("built %d operations, want %d", b.Ops(), store.MaxBatchOps)
	}
	mustCommit(t, s, acme, b)
	if got := scanAll(t, s, acme, "row-", "row.", 1000); len(got) != store.MaxBatchOps-1 {
		t.Fatalf("scanned %d rows, want %d", len(got), store.MaxBatchOps-1)
	}
}

func testInvalidPartitionIsRefused(t *testing.T, s Store) {
	ctx := t.Context()
	for _, ns := range []string{"", "Acme", "-acme", "a b", "a{1}", string(bytes.Repeat([]byte("a"), 64))} {
		p := store.Partition{Namespace: ns}
		if _, _, err := s.Get(ctx, p, "k"); !errors.Is(err, store.ErrInvalidPartition) {
			t.Fatalf("get on %q: %v, want ErrInvalidPartition", ns, err)
		}
		if _, err := s.Scan(ctx, p, "a", "b", nil, 10); !errors.Is(err, store.ErrInvalidPartition) {
			t.Fatalf("scan on %q: %v, want ErrInvalidPartition", ns, err)
		}
		var b store.Batch
		b.Put("k", nil)
		if _, err := s.Apply(ctx, p, b); !errors.Is(err, store.ErrInvalidPartition) {
			t.Fatalf("apply on %q: %v, want ErrInvalidPartition", ns, err)
		}
	}
}

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
	put(t, s, acme, "shared", "acme's", "only-acme", "")
	put(t, s, globex, "shared", "globex's")
	wantRow(t, s, acme, "shared", "acme's")
	wantRow(t, s, globex, "shared", "globex's")
	wantAbsent(t, s, globex, "only-acme")
	wantKeys(t, scanAll(t, s, globex, "", "\xff", 10), "shared")

	var b store.Batch
	b.RequireEquals("shared", store.Value("acme's")) // true in acme, not in globex
	b.Delete("shared")
	mustFailAt(t, s, globex, b, 0)
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "shared")
	wantRow(t, s, globex, "shared", "globex's")
}

// due returns the partition's entry in its bucket's due index.
func due(t *testing.T, s Store, p store.Partition) (int64, bool) {
	t.Helper()
	bucket := s.BucketOf(p)
	if bucket < 0 || bucket >= s.Buckets() {
		t.Fatalf("bucket of %s = %d, outside 0..%d", p, bucket, s.Buckets()-1)
	}
	list, err := s.Due(t.Context(), bucket, 1<<62, 1000)
	if err != nil {
		t.Fatalf("due in bucket %d: %v", bucket, err)
	}
	for _, d := range list {
		if d.Partition == p {
			return d.DueAtMs, true
		}
	}
	return 0, false
}

func wantDue(t *testing.T, s Store, p store.Partition, want int64) {
	t.Helper()
	got, ok := due(t, s, p)
	if !ok {
		t.Fatalf("%s is not in the due index, want due at %d", p, want)
	}
	if got != want {
		t.Fatalf("%s is due at %d, want %d", p, got, want)
	}
}

func wantNotDue(t *testing.T, s Store, p store.Partition) {
	t.Helper()
	if got, ok := due(t, s, p); ok {
		t.Fatalf("%s is in the due index at %d, want absent", p, got)
	}
}

const idle = "\x00"

func testDueIndexHoldsEarliestTimer(t *testing.T, s Store) {
	wantNotDue(t, s, acme)
	put(t, s, acme, "not-a-timer", "")
	wantNotDue(t, s, acme)

	put(t, s, acme, string(TimerKey(1_764_460_805_000, "b")), idle)
	wantDue(t, s, acme, 1_764_460_805_000)
	put(t, s, acme, string(TimerKey(1_764_460_800_000, "a")), idle, "u-after-timers", "")
	wantDue(t, s, acme, 1_764_460_800_000)
	put(t, s, acme, string(TimerKey(1_764_460_900_000, "c")), idle)
	wantDue(t, s, acme, 1_764_460_800_000)

	// Moving the earliest timer later moves the index with it.
	var b store.Batch
	b.RequireEquals(TimerKey(1_764_460_800_000, "a"), store.Value(idle))
	b.Delete(TimerKey(1_764_460_800_000, "a"))
	b.Put(TimerKey(1_764_460_950_000, "a"), store.Value(idle))
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 1_764_460_805_000)

	// Due times straddling byte boundaries decode exactly.
	for _, ms := range []int64{0, 255, 256, 65_535, 1 << 32, 1<<53 - 1} {
		put(t, s, globex, string(TimerKey(ms, "x")), idle)
		wantDue(t, s, globex, ms)
		var del store.Batch
		del.Delete(TimerKey(ms, "x"))
		mustCommit(t, s, globex, del)
	}
	wantNotDue(t, s, globex)

	// Up-to is inclusive and excludes later partitions.
	list, err := s.Due(t.Context(), s.BucketOf(acme), 1_764_460_804_999, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("due up to one ms before the earliest timer: %v, want none", list)
	}
	list, err = s.Due(t.Context(), s.BucketOf(acme), 1_764_460_805_000, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Partition != acme {
		t.Fatalf("due up to the earliest timer: %v, want acme only", list)
	}
}

func testDeletingLastTimerLeavesDueIndex(t *testing.T, s Store) {
	first, second := TimerKey(2_000, "a"), TimerKey(3_000, "b")
	put(t, s, acme, string(first), idle, string(second), idle)
	wantDue(t, s, acme, 2_000)
	var b store.Batch
	b.Delete(first)
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 3_000)
	b = store.Batch{Drain: true}
	b.Delete(second)
	b.Delete(TimerKey(9_000, "never-there"))
	mustCommit(t, s, acme, b)
	wantNotDue(t, s, acme)
}

func testFailedBatchLeavesDueIndexUnchanged(t *testing.T, s Store) {
	put(t, s, acme, string(TimerKey(5_000, "a")), idle)
	var b store.Batch
	b.RequireAbsent(TimerKey(5_000, "a"))
	b.Put(TimerKey(1_000, "b"), store.Value(idle))
	mustFailAt(t, s, acme, b, 0)
	wantDue(t, s, acme, 5_000)

	b = store.Batch{}
	b.RequireEquals(TimerKey(5_000, "a"), store.Value("leased elsewhere"))
	b.Delete(TimerKey(5_000, "a"))
	mustFailAt(t, s, acme, b, 0)
	wantDue(t, s, acme, 5_000)

	// A partition with no timer stays out of the index after a failed batch.
	b = store.Batch{}
	b.RequireEquals("missing", nil)
	b.Put(TimerKey(1_000, "c"), store.Value(idle))
	mustFailAt(t, s, globex, b, 0)
	wantNotDue(t, s, globex)
}

func testDueListsPartitionsOfBucketEarliestFirst(t *testing.T, s Store) {
	// Find three namespaces that share acme's bucket.
	bucket := s.BucketOf(acme)
	peers := []store.Partition{acme}
	for i := 0; len(peers) < 3; i++ {
		if i > 1_000_000 {
			t.Fatalf("no namespaces share bucket %d of %d", bucket, s.Buckets())
		}
		p := store.Partition{Namespace: "ns-" + strconv.Itoa(i)}
		if s.BucketOf(p) == bucket {
			peers = append(peers, p)
		}
	}
	dues := []int64{7_000, 3_000, 5_000}
	for i, p := range peers {
		put(t, s, p, string(TimerKey(dues[i], "ep")), idle)
	}
	list, err := s.Due(t.Context(), bucket, 6_000, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.DuePartition{{Partition: peers[1], DueAtMs: 3_000}, {Partition: peers[2], DueAtMs: 5_000}}
	if !slices.Equal(list, want) {
		t.Fatalf("due up to 6000 = %v, want %v", list, want)
	}
	list, err = s.Due(t.Context(), bucket, 1<<62, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(list, want[:1]) {
		t.Fatalf("due with limit 1 = %v, want %v", list, want[:1])
	}
}

func testDrainBatchIsAppliedLikeAnyOther(t *testing.T, s Store) {
	put(t, s, acme, "pending/1", "", "backlog", "1")
	b := store.Batch{Drain: true}
	b.RequireEquals("backlog", store.Value("1"))
	b.Delete("pending/1")
	b.Put("backlog", store.Value("0"))
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "pending/1")
	wantRow(t, s, acme, "backlog", "0")
	mustFailAt(t, s, acme, b, 0)
}

// testReadManyAnswersAsEachReadAlone: store.ReadMany, in one round trip on a
// MultiReader or one call per read otherwise, answers each read as GetMany
// or Scan alone would.
func testReadManyAnswersAsEachReadAlone(t *testing.T, s Store) {
	ctx := t.Context()
	put(t, s, acme, "a1", "x", "a2", "", "a3", "z", "b1", "y", "\x00\xff", "bin")
	reads := []store.Read{
		{Keys: []store.Key{"a2", "missing", "b1"}},
		{Start: "a", End: "b", Limit: 2},
		{Start: "a", End: "b", After: store.CursorAfter("a1"), Limit: 10},
		{Keys: []store.Key{}},
		{Start: "b", End: "a", Limit: 5},
		{Start: "c", End: "d", Limit: 5},
		{Start: "\x00", End: "\xff", Limit: 100},
	}
	got, err := store.ReadMany(ctx, s, acme, reads)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reads) {
		t.Fatalf("%d results for %d reads", len(got), len(reads))
	}
	for i, r := range reads {
		if r.Keys != nil {
			want := []store.Row{}
			if len(r.Keys) > 0 {
				if want, err = s.GetMany(ctx, acme, r.Keys); err != nil {
					t.Fatal(err)
				}
			}
			if len(got[i].Rows) != len(want) {
				t.Fatalf("read %d: %d rows, want %d", i, len(got[i].Rows), len(want))
			}
			for j := range want {
				if got[i].Rows[j].Found != want[j].Found || !bytes.Equal(got[i].Rows[j].Value, want[j].Value) {
					t.Fatalf("read %d row %d = %+v, want %+v", i, j, got[i].Rows[j], want[j])
				}
			}
			continue
		}
		want, err := s.Scan(ctx, acme, r.Start, r.End, r.After, r.Limit)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got[i].Page.Entries) != fmt.Sprint(want.Entries) || (got[i].Page.Next == nil) != (want.Next == nil) {
			t.Fatalf("read %d: page %+v, want %+v", i, got[i].Page, want)
		}
		if want.Next != nil && !bytes.Equal(got[i].Page.Next.Bytes(), want.Next.Bytes()) {
			t.Fatalf("read %d: next %q, want %q", i, got[i].Page.Next.Bytes(), want.Next.Bytes())
		}
	}
	if mr, ok := s.(store.MultiReader); ok {
		if _, err := mr.ReadMany(ctx, store.Partition{Namespace: "Bad"}, reads); err == nil {
			t.Fatal("ReadMany of an invalid partition must fail")
		}
	}
}
