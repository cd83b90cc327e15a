package storetest

import (
	"bytes"
	"encoding/binary"
	"slices"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// Store is what the suite exercises.
type Store interface {
	store.NamespaceStore
	store.DueIndex
	store.Registry
	store.Totals
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
		{"ReadsSeeTheRowsAsTheBatchLeftThem", testReadsSeeTheRowsAsTheBatchLeftThem},
		{"InvalidPartitionIsRefused", testInvalidPartitionIsRefused},
		{"BinaryKeysScanInByteOrder", testBinaryKeysScanInByteOrder},
		{"PagingVisitsEveryKeyOnceInOrder", testPagingVisitsEveryKeyOnceInOrder},
		{"ScanBoundsAreHalfOpen", testScanBoundsAreHalfOpen},
		{"CursorRestoredFromBytesResumes", testCursorRestoredFromBytesResumes},
		{"ConcurrentGuardedIncrementsAreExact", testConcurrentGuardedIncrementsAreExact},
		{"PartitionsAreIsolated", testPartitionsAreIsolated},
		{"DueIndexHoldsEarliestTimer", testDueIndexHoldsEarliestTimer},
		{"DeletingLastTimerLeavesDueIndex", testDeletingLastTimerLeavesDueIndex},
		{"ATimerPutThenDeletedInOneBatchLeavesNoEntry", testATimerPutThenDeletedInOneBatchLeavesNoEntry},
		{"ATimerRewrittenInPlaceKeepsTheEntryTheRowsSay", testATimerRewrittenInPlaceKeepsTheEntryTheRowsSay},
		{"FailedBatchLeavesDueIndexUnchanged", testFailedBatchLeavesDueIndexUnchanged},
		{"DueListsPartitionsOfBucketEarliestFirst", testDueListsPartitionsOfBucketEarliestFirst},
		{"SettlingBatchIsAppliedLikeAnyOther", testSettlingBatchIsAppliedLikeAnyOther},
		{"AnsweredBatchIsAppliedLikeAnyOther", testAnsweredBatchIsAppliedLikeAnyOther},
		{"ReadManyAnswersAsEachReadAlone", testReadManyAnswersAsEachReadAlone},
		{"AddToAbsentRowStartsFromZero", testAddToAbsentRowStartsFromZero},
		{"AddAddsToThePresentCounters", testAddAddsToThePresentCounters},
		{"AppliedFollowsApply", testAppliedFollowsApply},
		{"AddToARowOfAnotherLayoutIsRefusedWhole", testAddToARowOfAnotherLayoutIsRefusedWhole},
		{"AddOutOfRangeIsRefusedWhole", testAddOutOfRangeIsRefusedWhole},
		{"ASaturatingCounterStopsAtZeroBesideARefusingOne", testASaturatingCounterStopsAtZeroBesideARefusingOne},
		{"ASaturatingCounterStillRefusesAboveTheLargest", testASaturatingCounterStillRefusesAboveTheLargest},
		{"AFailingPreconditionStopsAnAdd", testAFailingPreconditionStopsAnAdd},
		{"AResentAddIsFalsifiedByItsOwnGuard", testAResentAddIsFalsifiedByItsOwnGuard},
		{"ConcurrentAddsAreExact", testConcurrentAddsAreExact},
		{"PutRangeOverwritesInPlace", testPutRangeOverwritesInPlace},
		{"PutRangesOfOneRowApplyInOrder", testPutRangesOfOneRowApplyInOrder},
		{"PutRangeBeyondItsRowIsRefusedWhole", testPutRangeBeyondItsRowIsRefusedWhole},
		{"PutRangesOfDisjointBytesDoNotLoseToEachOther", testPutRangesOfDisjointBytesDoNotLoseToEachOther},
		{"AFailingPreconditionStopsAPutRange", testAFailingPreconditionStopsAPutRange},
		{"AResentPutRangeActsOnce", testAResentPutRangeActsOnce},
		{"PutRangesOfAGuardedRowSpliceInOrder", testPutRangesOfAGuardedRowSpliceInOrder},
		{"ARangeGuardComparesItsBytesOnly", testARangeGuardComparesItsBytesOnly},
		{"UnorderedRowsAreReadByKeyAndNotScanned", testUnorderedRowsAreReadByKeyAndNotScanned},
		{"AnUnorderedWalkReturnsEveryRowPresentThroughout", testAnUnorderedWalkReturnsEveryRowPresentThroughout},
		{"AnUnorderedScanRefusesForeignCursors", testAnUnorderedScanRefusesForeignCursors},
		{"BlockedRowsScanInByteOrder", testBlockedRowsScanInByteOrder},
		{"DeletingBlockedRowsKeepsTheRestInOrder", testDeletingBlockedRowsKeepsTheRestInOrder},
		{"ABlockTaggedKeyOfAnotherLengthIsRefused", testABlockTaggedKeyOfAnotherLengthIsRefused},
		{"FirstRegisteringRowRegistersAndLastUnregisters", testFirstRegisteringRowRegistersAndLastUnregisters},
		{"OnlyTheRegistryTagRegisters", testOnlyTheRegistryTagRegisters},
		{"FailedBatchLeavesRegistryUnchanged", testFailedBatchLeavesRegistryUnchanged},
		{"RetriedBatchRegistersOnce", testRetriedBatchRegistersOnce},
		{"RegistryFollowsRowsAcrossBatches", testRegistryFollowsRowsAcrossBatches},
		{"ListingVisitsEveryRegisteredPartitionOnceInOrder", testListingVisitsEveryRegisteredPartitionOnceInOrder},
		{"ListingAcrossChangesLosesAndRepeatsNothing", testListingAcrossChangesLosesAndRepeatsNothing},
		{"ForgedRegistryCursorsAreRefused", testForgedRegistryCursorsAreRefused},
		{"CountRegisteredCountsEachRegisteredPartitionOnce", testCountRegisteredCountsEachRegisteredPartitionOnce},
		{"SummedRowsMoveTheTotalsWhateverTheWrite", testSummedRowsMoveTheTotalsWhateverTheWrite},
		{"AFailedBatchMovesNoTotal", testAFailedBatchMovesNoTotal},
		{"FlagSetsFollowTheRows", testFlagSetsFollowTheRows},
		{"ConcurrentWritersLeaveExactTotals", testConcurrentWritersLeaveExactTotals},
		{"ListSetKeepsItsPrefix", testListSetKeepsItsPrefix},
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
