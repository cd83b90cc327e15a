package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

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
	b = store.Batch{Settles: true}
	b.Delete(second)
	b.Delete(TimerKey(9_000, "never-there"))
	mustCommit(t, s, acme, b)
	wantNotDue(t, s, acme)
}

// Only a key's last write counts: a timer a batch puts and then deletes
// is not there, and places no entry in the due index.
func testATimerPutThenDeletedInOneBatchLeavesNoEntry(t *testing.T, s Store) {
	var b store.Batch
	b.Put(TimerKey(5_000, "gone"), store.Value(idle))
	b.Delete(TimerKey(5_000, "gone"))
	mustCommit(t, s, acme, b)
	wantNotDue(t, s, acme)

	put(t, s, acme, string(TimerKey(9_000, "kept")), idle)
	b = store.Batch{}
	b.Put(TimerKey(5_000, "gone"), store.Value(idle))
	b.Delete(TimerKey(5_000, "gone"))
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 9_000)

	// And one deleted then put again is there.
	b = store.Batch{}
	b.Delete(TimerKey(7_000, "back"))
	b.Put(TimerKey(7_000, "back"), store.Value(idle))
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 7_000)
}

// A timer rewritten in place (its key, so its due time, unchanged) keeps
// the partition's entry as the rows say, alone or beside a delete of the
// earliest timer.
func testATimerRewrittenInPlaceKeepsTheEntryTheRowsSay(t *testing.T, s Store) {
	early, late := TimerKey(5_000, "early"), TimerKey(9_000, "late")
	put(t, s, acme, string(early), idle, string(late), idle)
	rewrite := func(b *store.Batch, key store.Key, from, to string) {
		b.RequireEquals(key, store.Value(from))
		b.Delete(key)
		b.Put(key, store.Value(to))
	}
	var b store.Batch
	rewrite(&b, late, idle, "\x00late")
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 5_000)
	b = store.Batch{}
	rewrite(&b, early, idle, "\x00early")
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 5_000)

	b = store.Batch{}
	b.RequireEquals(early, store.Value("\x00early"))
	b.Delete(early)
	rewrite(&b, late, "\x00late", idle)
	mustCommit(t, s, acme, b)
	wantDue(t, s, acme, 9_000)
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

func testSettlingBatchIsAppliedLikeAnyOther(t *testing.T, s Store) {
	put(t, s, acme, "pending/1", "", "backlog", "1")
	b := store.Batch{Settles: true}
	b.RequireEquals("backlog", store.Value("1"))
	b.Delete("pending/1")
	b.Put("backlog", store.Value("0"))
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "pending/1")
	wantRow(t, s, acme, "backlog", "0")
	mustFailAt(t, s, acme, b, 0)
}

// testAnsweredBatchIsAppliedLikeAnyOther: Answered asks only for the
// store's durability policy, which the contract suite's stores leave off.
func testAnsweredBatchIsAppliedLikeAnyOther(t *testing.T, s Store) {
	put(t, s, acme, "pending/1", "", "backlog", "1")
	b := store.Batch{Settles: true, Answered: true}
	b.RequireEquals("backlog", store.Value("1"))
	b.Delete("pending/1")
	b.Put("backlog", store.Value("0"))
	mustCommit(t, s, acme, b)
	wantAbsent(t, s, acme, "pending/1")
	wantRow(t, s, acme, "backlog", "0")
	mustFailAt(t, s, acme, b, 0)
	grow := store.Batch{Answered: true}
	grow.RequireAbsent("pending/2")
	grow.Put("pending/2", store.Value("x"))
	mustCommit(t, s, acme, grow)
	wantRow(t, s, acme, "pending/2", "x")
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
