package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// A put-range overwrites its bytes at the start, the middle or the end of
// the row, and the row keeps its length and its other bytes.
func testPutRangeOverwritesInPlace(t *testing.T, s Store) {
	for _, tc := range []struct {
		name   string
		offset int
		bytes  string
		want   string
	}{
		{"start", 0, "ab", "ab23456789"},
		{"middle", 4, "XYZ", "0123XYZ789"},
		{"end", 8, "!!", "01234567!!"},
		{"whole row", 0, "abcdefghij", "abcdefghij"},
		{"one byte", 9, "\x00", "012345678\x00"},
	} {
		key := store.Key("row/" + tc.name)
		put(t, s, acme, string(key), "0123456789", "beside", "other")
		var b store.Batch
		b.PutRange(key, tc.offset, store.Value(tc.bytes))
		mustCommit(t, s, acme, b)
		wantRow(t, s, acme, key, tc.want)
		wantRow(t, s, acme, "beside", "other")
	}
	// A ranged row is a row like any other: scanned once, in order.
	wantKeys(t, scanAll(t, s, acme, "", "\xff", 10), "beside", "row/end", "row/middle", "row/one byte", "row/start", "row/whole row")
	// It never grows the store, so a settling batch carries it.
	b := store.Batch{Settles: true}
	b.PutRange("row/start", 2, store.Value("cd"))
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "row/start", "abcd456789")
}

// Put-ranges of one row in one batch apply in order: the later one's bytes
// win where they overlap, beside other writes of the batch.
func testPutRangesOfOneRowApplyInOrder(t *testing.T, s Store) {
	put(t, s, acme, "row", "0123456789", "pending/1", "")
	var b store.Batch
	b.RequireEquals("pending/1", nil)
	b.PutRange("row", 2, store.Value("abcd"))
	b.Delete("pending/1")
	b.PutRange("row", 4, store.Value("ZZ"))
	b.PutRange("row", 9, store.Value("!"))
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "row", "01abZZ678!")
	wantAbsent(t, s, acme, "pending/1")
}

// A put-range whose row is absent, or shorter than the range's end, refuses
// the whole batch before any write, wherever it stands in the batch.
func testPutRangeBeyondItsRowIsRefusedWhole(t *testing.T, s Store) {
	put(t, s, acme, "short", "0123", "blank", "", "ok", "abcdef")
	for _, tc := range []struct {
		name   string
		key    store.Key
		offset int
		bytes  string
	}{
		{"absent row", "missing", 0, "x"},
		{"past the end", "short", 4, "x"},
		{"across the end", "short", 3, "ab"},
		{"far past the end", "short", 1000, "x"},
		{"empty row", "blank", 0, "x"},
	} {
		var b store.Batch
		b.Put("first", store.Value("written?"))
		b.PutRange("ok", 0, store.Value("AB"))
		b.Add("fresh", counterHeader, 1, 1)
		b.PutRange(tc.key, tc.offset, store.Value(tc.bytes))
		b.Put(TimerKey(5000, "ep"), store.Value("timer"))
		b.Put(store.Key([]byte{store.RegistryTag})+"ep", store.Value("endpoint"))
		r, err := s.Apply(t.Context(), acme, b)
		if !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("%s: apply = %+v, %v; want an error wrapping %v", tc.name, r, err, store.ErrCorrupt)
		}
		if r.Committed {
			t.Fatalf("%s: apply reports committed alongside error %v", tc.name, err)
		}
		wantRow(t, s, acme, "short", "0123")
		wantRow(t, s, acme, "blank", "")
		wantRow(t, s, acme, "ok", "abcdef")
		wantAbsent(t, s, acme, "first", "fresh", "missing", TimerKey(5000, "ep"), store.Key([]byte{store.RegistryTag})+"ep")
		wantNotDue(t, s, acme)
		wantRegistered(t, s, acme, false)
	}
	// Each range is checked against the row as the earlier ones of the batch
	// left it; since none changes its length, one past the end refuses the
	// batch even after one that fits.
	var b store.Batch
	b.PutRange("short", 0, store.Value("ab"))
	b.PutRange("short", 2, store.Value("cde"))
	wantRefused(t, s, b, store.ErrCorrupt)
	wantRow(t, s, acme, "short", "0123")
}

// Two batches writing disjoint ranges of one row both commit, neither
// guarded by the row, and both ranges hold: each writer owns its bytes.
func testPutRangesOfDisjointBytesDoNotLoseToEachOther(t *testing.T, s Store) {
	put(t, s, acme, "shared", "................")
	var first, second store.Batch
	first.PutRange("shared", 0, store.Value("AAAA"))
	second.PutRange("shared", 8, store.Value("BBBB"))
	mustCommit(t, s, acme, first)
	mustCommit(t, s, acme, second)
	wantRow(t, s, acme, "shared", "AAAA....BBBB....")

	// Many writers at once, each rewriting its own 4 bytes of one row again
	// and again: every batch commits and every writer's last bytes hold.
	const workers, each = 16, 10
	put(t, s, acme, "shared", string(bytes.Repeat([]byte("."), 4*workers)))
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for round := range each {
				var b store.Batch
				b.PutRange("shared", 4*w, store.Value(fmt.Sprintf("%02d:%d", w, round)))
				r, err := s.Apply(t.Context(), acme, b)
				if err == nil && !r.Committed {
					err = errors.New("an unguarded put-range was not committed")
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var want []byte
	for w := range workers {
		want = fmt.Appendf(want, "%02d:%d", w, each-1)
	}
	wantRow(t, s, acme, "shared", string(want))
}

// A failing precondition wins over a put-range: the batch reports it and
// writes nothing, even when the range would be refused.
func testAFailingPreconditionStopsAPutRange(t *testing.T, s Store) {
	put(t, s, acme, "row", "0123456789")
	var b store.Batch
	b.RequireAbsent("ok")
	b.RequireEquals("pending/1", nil)
	b.Put("first", store.Value("written?"))
	b.PutRange("row", 0, store.Value("ab"))
	mustFailAt(t, s, acme, b, 1)
	b.PutRange("missing", 0, store.Value("x"))
	mustFailAt(t, s, acme, b, 1)
	wantRow(t, s, acme, "row", "0123456789")
	wantAbsent(t, s, acme, "first", "missing")
}

// A put-range batch resent after a lost reply runs twice and leaves the row
// as one run does: rewriting the same bytes again changes nothing more.
func testAResentPutRangeActsOnce(t *testing.T, s Store) {
	put(t, s, acme, "row", "0123456789")
	var b store.Batch
	b.Put("other", store.Value("v"))
	b.PutRange("row", 1, store.Value("abc"))
	b.PutRange("row", 2, store.Value("Z"))
	r, err := LostReplies{s}.Apply(t.Context(), acme, b)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Committed {
		t.Fatalf("the resent run answered %+v, want committed", r)
	}
	wantRow(t, s, acme, "row", "0aZc456789")
	wantRow(t, s, acme, "other", "v")
}

// A range-equals guard holds while its bytes of the row are as given,
// whatever the row's other bytes: a writer of other bytes does not fail
// it, a writer of its bytes does, and so does the row's absence or a row
// too short to hold them.
func testARangeGuardComparesItsBytesOnly(t *testing.T, s Store) {
	put(t, s, acme, "shared", "0123456789")
	for _, tc := range []struct {
		name   string
		key    store.Key
		offset int
		bytes  string
		holds  bool
	}{
		{"its bytes", "shared", 4, "456", true},
		{"the whole row", "shared", 0, "0123456789", true},
		{"the last byte", "shared", 9, "9", true},
		{"other bytes", "shared", 4, "457", false},
		{"past the end", "shared", 9, "9x", false},
		{"beyond the row", "shared", 12, "x", false},
		{"an absent row", "missing", 0, "0", false},
	} {
		var b store.Batch
		b.RequireAbsent("before")
		b.RequireRange(tc.key, tc.offset, store.Value(tc.bytes))
		b.Put("written/"+store.Key(tc.name), store.Value("v"))
		if tc.holds {
			mustCommit(t, s, acme, b)
			wantRow(t, s, acme, "written/"+store.Key(tc.name), "v")
			continue
		}
		mustFailAt(t, s, acme, b, 1)
		wantAbsent(t, s, acme, "written/"+store.Key(tc.name))
	}
	// Another writer's bytes leave the guard holding; its own bytes
	// rewritten fail it.
	var other store.Batch
	other.PutRange("shared", 0, store.Value("AB"))
	mustCommit(t, s, acme, other)
	var b store.Batch
	b.RequireRange("shared", 4, store.Value("456"))
	b.PutRange("shared", 4, store.Value("XYZ"))
	mustCommit(t, s, acme, b)
	mustFailAt(t, s, acme, b, 0)
	wantRow(t, s, acme, "shared", "AB23XYZ789")
}

// PutRange's shape is checked before anything is sent.
func putRangeShapeCases() []struct {
	name string
	b    store.Batch
} {
	one := func(ws ...store.Write) store.Batch {
		var b store.Batch
		b.Put("first", store.Value("1"))
		b.Writes = append(b.Writes, ws...)
		return b
	}
	rng := func(key store.Key, offset int, bytes store.Value) store.Write {
		return store.Write{Kind: store.PutRange, Key: key, Offset: offset, Value: bytes}
	}
	guard := func(pc store.Precondition) store.Batch {
		var b store.Batch
		b.Preconditions = append(b.Preconditions, pc)
		b.Put("first", store.Value("1"))
		return b
	}
	x := store.Value("x")
	return []struct {
		name string
		b    store.Batch
	}{
		{"put-range at a negative offset", one(rng("r", -1, x))},
		{"put-range of no bytes", one(rng("r", 0, nil))},
		{"put-range of too many bytes", one(rng("r", 0, make(store.Value, store.MaxRangeBytes+1)))},
		{"put-range past the largest row", one(rng("r", store.MaxValueBytes, x))},
		{"put-range ending past the largest row", one(rng("r", store.MaxValueBytes-1, store.Value("xy")))},
		{"put-range of an empty key", one(rng("", 0, x))},
		{"put-range of a timer row", one(rng(TimerKey(5000, "ep"), 0, x))},
		{"put-range of a registering row", one(rng(store.Key([]byte{store.RegistryTag})+"ep", 0, x))},
		{"put-range carrying deltas", one(store.Write{Kind: store.PutRange, Key: "r", Value: x, Deltas: []int64{1}})},
		{"put-range saturating", one(store.Write{Kind: store.PutRange, Key: "r", Value: x, Saturating: 1})},
		{"put carrying an offset", one(store.Write{Kind: store.Put, Key: "r", Value: x, Offset: 1})},
		{"put-range row also put before", one(store.Write{Kind: store.Put, Key: "r", Value: x}, rng("r", 0, x))},
		{"put-range row also put after", one(rng("r", 0, x), store.Write{Kind: store.Put, Key: "r", Value: x})},
		{"put-range row also deleted", one(rng("r", 0, x), rng("r", 1, x), store.Write{Kind: store.Delete, Key: "r"})},
		{"put-range row also added", one(rng("r", 0, x), store.Write{Kind: store.Add, Key: "r", Deltas: []int64{1}})},
		{"put-range of an added row", one(store.Write{Kind: store.Add, Key: "r", Deltas: []int64{1}}, rng("r", 0, x))},
		{"range guard of no bytes", guard(store.Precondition{Kind: store.RangeEquals, Key: "r"})},
		{"range guard of too many bytes", guard(store.Precondition{Kind: store.RangeEquals, Key: "r", Value: make(store.Value, store.MaxRangeBytes+1)})},
		{"range guard at a negative offset", guard(store.Precondition{Kind: store.RangeEquals, Key: "r", Value: x, Offset: -1})},
		{"range guard past the largest row", guard(store.Precondition{Kind: store.RangeEquals, Key: "r", Value: x, Offset: store.MaxValueBytes})},
		{"range guard of an empty key", guard(store.Precondition{Kind: store.RangeEquals, Value: x})},
		{"range guard of a timer row", guard(store.Precondition{Kind: store.RangeEquals, Key: TimerKey(5000, "ep"), Value: x})},
		{"equals guard carrying an offset", guard(store.Precondition{Kind: store.Equals, Key: "r", Value: x, Offset: 1})},
	}
}

// A guarded row's put-ranges splice into the row as the guards read it, in
// batch order, whichever guard read it: an equals guard's or a range
// guard's, beside a row no guard read.
func testPutRangesOfAGuardedRowSpliceInOrder(t *testing.T, s Store) {
	put(t, s, acme, "row/ranged", "0123456789")
	put(t, s, acme, "row/equal", "abcdefghij")
	put(t, s, acme, "row/plain", "ABCDEFGHIJ")
	var b store.Batch
	b.RequireRange("row/ranged", 2, store.Value("234"))
	b.RequireEquals("row/equal", store.Value("abcdefghij"))
	b.PutRange("row/ranged", 2, store.Value("xy"))
	b.PutRange("row/equal", 0, store.Value("Q"))
	b.PutRange("row/plain", 9, store.Value("!"))
	b.PutRange("row/ranged", 3, store.Value("Z"))
	b.PutRange("row/equal", 9, store.Value("R"))
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "row/ranged", "01xZ456789")
	wantRow(t, s, acme, "row/equal", "QbcdefghiR")
	wantRow(t, s, acme, "row/plain", "ABCDEFGHI!")
}
