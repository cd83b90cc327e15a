package storetest

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// counterHeader is the header of the counter rows of these cases.
var counterHeader = store.Value{0x01}

// counterRow is a row of counterHeader and the counters, as Add lays it out.
func counterRow(counters ...uint64) string {
	v := append([]byte(nil), counterHeader...)
	for _, c := range counters {
		v = binary.BigEndian.AppendUint64(v, c)
	}
	return string(v)
}

func wantRefused(t *testing.T, s Store, b store.Batch, want error) {
	t.Helper()
	r, err := s.Apply(t.Context(), acme, b)
	if !errors.Is(err, want) {
		t.Fatalf("apply = %+v, %v; want an error wrapping %v", r, err, want)
	}
	if r.Committed {
		t.Fatalf("apply reports committed alongside error %v", err)
	}
}

func testAddToAbsentRowStartsFromZero(t *testing.T, s Store) {
	var b store.Batch
	b.Add("backlog", counterHeader, 3, 250)
	b.Add("other", nil, 1)
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "backlog", counterRow(3, 250))
	wantRow(t, s, acme, "other", string(binary.BigEndian.AppendUint64(nil, 1)))
	// An added row is a row like any other: scanned in order.
	wantKeys(t, scanAll(t, s, acme, "", "\xff", 10), "backlog", "other")
}

func testAddAddsToThePresentCounters(t *testing.T, s Store) {
	put(t, s, acme, "backlog", counterRow(10, 1000), "pending/1", "")
	var b store.Batch
	b.RequireEquals("pending/1", nil)
	b.Delete("pending/1")
	b.Add("backlog", counterHeader, -1, -300)
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "backlog", counterRow(9, 700))
	wantAbsent(t, s, acme, "pending/1")
	// To exactly zero, and up to the largest counter.
	b = store.Batch{}
	b.Add("backlog", counterHeader, -9, store.MaxCounter-700)
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "backlog", counterRow(0, store.MaxCounter))
}

// A present row of another layout (width or header) refuses the whole batch
// before any write, however the batch's other writes are ordered.
func testAddToARowOfAnotherLayoutIsRefusedWhole(t *testing.T, s Store) {
	for _, row := range []string{
		counterRow(1),                 // one counter short
		counterRow(1, 2, 3),           // one counter long
		counterRow(1, 2)[1:],          // no header
		"\x02" + counterRow(1, 2)[1:], // another header
		"",
		"not a counter row",
	} {
		put(t, s, acme, "backlog", row, "pending/1", "")
		var b store.Batch
		b.RequireEquals("pending/1", nil)
		b.Put("first", store.Value("written?"))
		b.Delete("pending/1")
		b.Add("fresh", counterHeader, 1, 1)
		b.Add("backlog", counterHeader, -1, -1)
		b.Put(TimerKey(5000, "ep"), store.Value("timer"))
		wantRefused(t, s, b, store.ErrCorrupt)
		wantRow(t, s, acme, "backlog", row)
		wantRow(t, s, acme, "pending/1", "")
		wantAbsent(t, s, acme, "first", "fresh", TimerKey(5000, "ep"))
		wantNotDue(t, s, acme)
	}
}

// A counter taken below zero or above MaxCounter, or found above it,
// refuses the whole batch before any write.
func testAddOutOfRangeIsRefusedWhole(t *testing.T, s Store) {
	for _, tc := range []struct {
		name   string
		row    string
		deltas []int64
	}{
		{"below zero", counterRow(1, 5), []int64{-1, -6}},
		{"absent row below zero", "", []int64{0, -1}},
		{"above the largest", counterRow(1, store.MaxCounter), []int64{0, 1}},
		{"found above the largest", counterRow(1, store.MaxCounter+1), []int64{-1, -1}},
		{"found at the top of a u64", counterRow(^uint64(0), 0), []int64{-1, 0}},
	} {
		key := store.Key("backlog/" + tc.name)
		if tc.row != "" {
			put(t, s, acme, string(key), tc.row)
		}
		var b store.Batch
		b.Put("first", store.Value("written?"))
		b.Add("fresh", counterHeader, 1, 1)
		b.Add(key, counterHeader, tc.deltas...)
		wantRefused(t, s, b, store.ErrCounterRange)
		if tc.row != "" {
			wantRow(t, s, acme, key, tc.row)
		} else {
			wantAbsent(t, s, acme, key)
		}
		wantAbsent(t, s, acme, "first", "fresh")
	}
}

// A saturating counter (bytes, bit 1) taken below 0 is 0, in the same row
// as a refusing one (rows, bit 0), which still refuses the whole batch.
func testASaturatingCounterStopsAtZeroBesideARefusingOne(t *testing.T, s Store) {
	put(t, s, acme, "backlog", counterRow(5, 10))
	var b store.Batch
	b.AddSaturating("backlog", counterHeader, 0b10, -1, -25)
	b.AddSaturating("fresh", counterHeader, 0b10, 2, -3)
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "backlog", counterRow(4, 0))
	wantRow(t, s, acme, "fresh", counterRow(2, 0))
	// A saturating counter at 0 and the refusing one at exactly 0.
	b = store.Batch{}
	b.AddSaturating("backlog", counterHeader, 0b10, -4, -1)
	mustCommit(t, s, acme, b)
	wantRow(t, s, acme, "backlog", counterRow(0, 0))

	// The refusing counter below 0 refuses the batch whole, saturation of
	// the other counter and the other writes included.
	put(t, s, acme, "backlog", counterRow(1, 10))
	b = store.Batch{}
	b.Put("first", store.Value("written?"))
	b.AddSaturating("fresh", counterHeader, 0b10, 1, -100)
	b.AddSaturating("backlog", counterHeader, 0b10, -2, -100)
	wantRefused(t, s, b, store.ErrCounterRange)
	wantRow(t, s, acme, "backlog", counterRow(1, 10))
	wantRow(t, s, acme, "fresh", counterRow(2, 0))
	wantAbsent(t, s, acme, "first")
	// A plain Add of the same row still refuses the byte counter.
	b = store.Batch{}
	b.Add("backlog", counterHeader, 0, -11)
	wantRefused(t, s, b, store.ErrCounterRange)
	wantRow(t, s, acme, "backlog", counterRow(1, 10))
}

// Saturating is at 0 only: a saturating counter taken past MaxCounter, or
// found above it, refuses the batch whole as any counter does.
func testASaturatingCounterStillRefusesAboveTheLargest(t *testing.T, s Store) {
	for _, tc := range []struct {
		name   string
		row    string
		deltas []int64
	}{
		{"above the largest", counterRow(1, store.MaxCounter), []int64{0, 1}},
		{"found above the largest", counterRow(1, store.MaxCounter+1), []int64{0, -1}},
		{"found at the top of a u64", counterRow(1, ^uint64(0)), []int64{0, -1}},
	} {
		key := store.Key("backlog/" + tc.name)
		put(t, s, acme, string(key), tc.row)
		var b store.Batch
		b.Put("first", store.Value("written?"))
		b.AddSaturating(key, counterHeader, 0b11, tc.deltas...)
		wantRefused(t, s, b, store.ErrCounterRange)
		wantRow(t, s, acme, key, tc.row)
		wantAbsent(t, s, acme, "first")
	}
}

// A failing precondition wins over an add: the batch reports it and writes
// nothing, the add's row included, even when the add would be refused.
func testAFailingPreconditionStopsAnAdd(t *testing.T, s Store) {
	put(t, s, acme, "backlog", counterRow(2, 20), "bad", counterRow(1))
	var b store.Batch
	b.RequireAbsent("ok")
	b.RequireEquals("pending/1", nil)
	b.Add("backlog", counterHeader, -1, -10)
	b.Put("first", store.Value("written?"))
	mustFailAt(t, s, acme, b, 1)
	b.Add("bad", counterHeader, -5, 0)
	mustFailAt(t, s, acme, b, 1)
	wantRow(t, s, acme, "backlog", counterRow(2, 20))
	wantAbsent(t, s, acme, "first")
}

// A batch resent after a lost reply runs twice. The add is not idempotent;
// the guard on the row the batch deletes is falsified by its first run, so
// the second writes nothing and the counters move once.
func testAResentAddIsFalsifiedByItsOwnGuard(t *testing.T, s Store) {
	put(t, s, acme, "backlog", counterRow(2, 20), "pending/1", "", "record/1", "0123456789")
	var b store.Batch
	b.RequireEquals("pending/1", nil)
	b.Delete("pending/1")
	b.Delete("record/1")
	b.Add("backlog", counterHeader, -1, -10)
	r, err := LostReplies{s}.Apply(t.Context(), acme, b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Committed || r.Failed != 0 {
		t.Fatalf("the resent run answered %+v, want its guard (0) to fail", r)
	}
	wantRow(t, s, acme, "backlog", counterRow(1, 10))
	wantAbsent(t, s, acme, "pending/1", "record/1")
}

// Adds of many writers, none guarded by the counter row, all land: a
// relative update does not lose to the writers it races.
func testConcurrentAddsAreExact(t *testing.T, s Store) {
	const workers, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range each {
				var b store.Batch
				b.Add("backlog", counterHeader, 1, int64(w))
				r, err := s.Apply(t.Context(), acme, b)
				if err == nil && !r.Committed {
					err = errors.New("an unguarded add was not committed")
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
	wantRow(t, s, acme, "backlog", counterRow(workers*each, each*(workers*(workers-1)/2)))
}

// Add's shape is checked before anything is sent.
func addShapeCases() []struct {
	name string
	b    store.Batch
} {
	one := func(w store.Write) store.Batch {
		var b store.Batch
		b.Put("first", store.Value("1"))
		b.Writes = append(b.Writes, w)
		return b
	}
	var twice, withPut store.Batch
	twice.Add("c", nil, 1)
	twice.Add("c", nil, 1)
	withPut.Put("c", store.Value("x"))
	withPut.Add("c", nil, 1)
	return []struct {
		name string
		b    store.Batch
	}{
		{"add of no counter", one(store.Write{Kind: store.Add, Key: "c"})},
		{"add of too many counters", one(store.Write{Kind: store.Add, Key: "c", Deltas: make([]int64, store.MaxCounters+1)})},
		{"add beyond the largest delta", one(store.Write{Kind: store.Add, Key: "c", Deltas: []int64{store.MaxCounter + 1}})},
		{"add below the least delta", one(store.Write{Kind: store.Add, Key: "c", Deltas: []int64{-store.MaxCounter - 1}})},
		{"add header too long", one(store.Write{Kind: store.Add, Key: "c", Value: make(store.Value, store.MaxCounterHeader+1), Deltas: []int64{1}})},
		{"add to a timer row", one(store.Write{Kind: store.Add, Key: TimerKey(5000, "ep"), Deltas: []int64{1}})},
		{"put carrying deltas", one(store.Write{Kind: store.Put, Key: "c", Deltas: []int64{1}})},
		{"put saturating", one(store.Write{Kind: store.Put, Key: "c", Saturating: 1})},
		{"add saturating a counter it lacks", one(store.Write{Kind: store.Add, Key: "c", Deltas: []int64{-1, -1}, Saturating: 0b100})},
		{"two adds of one row", twice},
		{"an added row also put", withPut},
	}
}

// Write.Applied computes the row each write leaves as Apply leaves it, and
// refuses what Apply refuses, with the same error.
func testAppliedFollowsApply(t *testing.T, s Store) {
	add := func(header store.Value, saturating uint8, deltas ...int64) store.Write {
		return store.Write{Kind: store.Add, Key: "row", Value: header, Deltas: deltas, Saturating: saturating}
	}
	for i, c := range []struct {
		row   *string
		write store.Write
	}{
		{nil, store.Write{Kind: store.Put, Key: "row", Value: store.Value("new")}},
		{ptr("old"), store.Write{Kind: store.Put, Key: "row", Value: store.Value("new")}},
		{ptr("old"), store.Write{Kind: store.Delete, Key: "row"}},
		{nil, add(counterHeader, 0, 3, 250)},
		{ptr(counterRow(10, 1000)), add(counterHeader, 0, -1, -300)},
		{ptr(counterRow(10, 1000)), add(counterHeader, 0b10, -1, -2000)},
		{ptr(counterRow(10, 1000)), add(counterHeader, 0b01, -11, 0)},
		{ptr(counterRow(10, store.MaxCounter-1)), add(counterHeader, 0, 0, 2)},
		{ptr(counterRow(10)), add(counterHeader, 0, 1, 1)},
		{ptr("\x02" + counterRow(1, 2)[1:]), add(counterHeader, 0, 1, 1)},
		{ptr("abcdef"), store.Write{Kind: store.PutRange, Key: "row", Value: store.Value("XY"), Offset: 2}},
		{ptr("abc"), store.Write{Kind: store.PutRange, Key: "row", Value: store.Value("XY"), Offset: 2}},
		{nil, store.Write{Kind: store.PutRange, Key: "row", Value: store.Value("XY"), Offset: 0}},
	} {
		var b store.Batch
		b.Delete("row")
		if c.row != nil {
			b.Put("row", store.Value(*c.row))
		}
		mustCommit(t, s, acme, b)
		before, found := get(t, s, acme, "row")
		want, wantFound, wantErr := c.write.Applied(before, found)
		_, err := s.Apply(t.Context(), acme, store.Batch{Writes: []store.Write{c.write}})
		if wantErr != nil {
			if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrCounterRange) ||
				errors.Is(err, store.ErrCorrupt) != errors.Is(wantErr, store.ErrCorrupt) {
				t.Fatalf("case %d: Applied refuses with %v, Apply answers %v", i, wantErr, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d: Applied gives %q, Apply refuses: %v", i, want, err)
		}
		got, gotFound := get(t, s, acme, "row")
		if gotFound != wantFound || string(got) != string(want) {
			t.Fatalf("case %d: Applied gives %q (%v), Apply left %q (%v)", i, want, wantFound, got, gotFound)
		}
	}
}

func ptr(s string) *string { return &s }
