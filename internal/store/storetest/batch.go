package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

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
	tooManyReads := valid()
	for i := 0; i <= store.MaxBatchReads; i++ {
		tooManyReads.Reads = append(tooManyReads.Reads, store.Key(fmt.Sprintf("read-%03d", i)))
	}
	emptyRead := valid()
	emptyRead.Reads = []store.Key{"first", ""}

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
		{"65 reads", tooManyReads, store.ErrBatchTooLarge},
		{"empty read key", emptyRead, store.ErrInvalidBatch},
	}
	for _, c := range append(addShapeCases(), putRangeShapeCases()...) {
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

// A committed batch's reads are its rows as the batch left them: put,
// deleted, added to, spliced, untouched and absent alike. A batch that
// fails a precondition reads nothing, and its reads are not operations.
func testReadsSeeTheRowsAsTheBatchLeftThem(t *testing.T, s Store) {
	put(t, s, acme, "put", "old", "gone", "x", "spliced", "0123", "kept", "k")
	var b store.Batch
	b.RequireEquals("kept", store.Value("k"))
	// Full to MaxBatchOps with the four writes below: reads come on top.
	for i := 5; i < store.MaxBatchOps; i++ {
		b.Put(store.Key(fmt.Sprintf("bulk-%03d", i)), store.Value("v"))
	}
	b.Put("put", store.Value("new"))
	b.Delete("gone")
	b.Add("added", store.Value("h"), 5)
	b.PutRange("spliced", 1, store.Value("ab"))
	b.Reads = []store.Key{"put", "gone", "added", "spliced", "kept", "never", "put"}
	for len(b.Reads) < store.MaxBatchReads {
		b.Reads = append(b.Reads, "kept")
	}
	r := apply(t, s, acme, b)
	if !r.Committed || len(r.Rows) != store.MaxBatchReads {
		t.Fatalf("apply = %+v, want committed with %d rows", r, store.MaxBatchReads)
	}
	added := "h" + string([]byte{0, 0, 0, 0, 0, 0, 0, 5})
	want := []store.Row{
		{Value: store.Value("new"), Found: true}, {}, {Value: store.Value(added), Found: true},
		{Value: store.Value("0ab3"), Found: true}, {Value: store.Value("k"), Found: true}, {},
		{Value: store.Value("new"), Found: true},
	}
	for i, w := range want {
		if g := r.Rows[i]; g.Found != w.Found || !bytes.Equal(g.Value, w.Value) {
			t.Fatalf("read %d (%q) = %q %v, want %q %v", i, b.Reads[i], g.Value, g.Found, w.Value, w.Found)
		}
	}

	var refused store.Batch
	refused.RequireAbsent("kept")
	refused.Put("put", store.Value("newer"))
	refused.Reads = []store.Key{"put"}
	if r := apply(t, s, acme, refused); r.Committed || r.Rows != nil {
		t.Fatalf("a refused batch = %+v, want no rows", r)
	}
	var none store.Batch
	none.Put("put", store.Value("last"))
	if r := apply(t, s, acme, none); !r.Committed || r.Rows != nil {
		t.Fatalf("a batch without reads = %+v, want committed with no rows", r)
	}
}
