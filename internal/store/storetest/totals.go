package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// summedKey and flagKey are keys of a summed row and of a row of flag i.
func summedKey(id string) store.Key      { return store.Key(string(store.SumTag) + id) }
func flagKey(i int, id string) store.Key { return store.Key(string(store.FlagTags[i]) + id) }

func totals(t *testing.T, s Store) store.BucketTotals {
	t.Helper()
	got, err := store.SumTotals(t.Context(), s)
	if err != nil {
		t.Fatalf("totals: %v", err)
	}
	return got
}

func wantTotals(t *testing.T, s Store, want store.BucketTotals) {
	t.Helper()
	if got := totals(t, s); got != want {
		t.Fatalf("totals = %+v, want %+v", got, want)
	}
}

// flagged lists every partition of flag set i, over every bucket.
func flagged(t *testing.T, s Store, i int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for b := range s.Buckets() {
		after := ""
		for {
			parts, more, err := s.List(t.Context(), b, store.Set(i+1), "", after, 2)
			if err != nil {
				t.Fatalf("flagged: %v", err)
			}
			for _, p := range parts {
				if s.BucketOf(p) != b || out[p.Namespace] {
					t.Fatalf("flag set %d of bucket %d lists %s wrongly", i, b, p)
				}
				out[p.Namespace] = true
				after = p.Namespace
			}
			if !more {
				break
			}
		}
	}
	return out
}

func summed(t *testing.T, s Store) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for b := range s.Buckets() {
		parts, err := s.Summed(t.Context(), b)
		if err != nil {
			t.Fatalf("summed: %v", err)
		}
		for _, p := range parts {
			out[p.Namespace] = true
		}
	}
	return out
}

// Every kind of write that changes a summed row moves the totals by its
// change: put, add, saturating add, delete; a row of another layout counts
// as zeros.
func testSummedRowsMoveTheTotalsWhateverTheWrite(t *testing.T, s Store) {
	var b store.Batch
	b.Put(summedKey("x"), store.Value(counterRow(3, 300)))
	b.Add(summedKey("y"), counterHeader, 2, 20)
	mustCommit(t, s, acme, b)
	wantTotals(t, s, store.BucketTotals{Sums: [2]int64{5, 320}})
	b = store.Batch{}
	b.AddSaturating(summedKey("x"), counterHeader, 0b10, -1, -1000)
	b.Add(summedKey("g"), counterHeader, 7, 70)
	mustCommit(t, s, acme, b)
	mustCommit(t, s, globex, b2(func(b *store.Batch) { b.Put(summedKey("z"), store.Value(counterRow(1, 1))) }))
	wantTotals(t, s, store.BucketTotals{Sums: [2]int64{2 + 2 + 7 + 1, 0 + 20 + 70 + 1}})
	if got := summed(t, s); !got["acme"] || !got["globex"] || len(got) != 2 {
		t.Fatalf("summed = %v, want acme and globex", got)
	}
	// A row of another layout counts as zeros, before and after.
	mustCommit(t, s, globex, b2(func(b *store.Batch) { b.Put(summedKey("z"), store.Value("not counters")) }))
	b = store.Batch{}
	b.Delete(summedKey("x"))
	b.Delete(summedKey("y"))
	b.Delete(summedKey("g"))
	b.Delete(summedKey("absent"))
	mustCommit(t, s, acme, b)
	wantTotals(t, s, store.BucketTotals{})
	if got := summed(t, s); len(got) != 0 {
		t.Fatalf("summed = %v, want none", got)
	}
}

func b2(f func(b *store.Batch)) store.Batch {
	var b store.Batch
	f(&b)
	return b
}

// A batch that fails a guard, or a resent one its first run falsified,
// moves no total.
func testAFailedBatchMovesNoTotal(t *testing.T, s Store) {
	b := b2(func(b *store.Batch) {
		b.RequireAbsent("guard")
		b.Put("guard", nil)
		b.Add(summedKey("x"), counterHeader, 4, 40)
		b.Put(flagKey(0, "x"), nil)
	})
	mustCommit(t, s, acme, b)
	mustFailAt(t, s, acme, b, 0)
	wantTotals(t, s, store.BucketTotals{Sums: [2]int64{4, 40}, Flagged: [2]int64{1, 0}})
}

// A partition is in a flag set while it holds a row of the flag's tag, and
// counted once however many it holds.
func testFlagSetsFollowTheRows(t *testing.T, s Store) {
	mustCommit(t, s, acme, b2(func(b *store.Batch) { b.Put(flagKey(0, "a"), nil); b.Put(flagKey(0, "b"), nil) }))
	mustCommit(t, s, globex, b2(func(b *store.Batch) { b.Put(flagKey(1, "a"), nil) }))
	wantTotals(t, s, store.BucketTotals{Flagged: [2]int64{1, 1}})
	if f0, f1 := flagged(t, s, 0), flagged(t, s, 1); !f0["acme"] || len(f0) != 1 || !f1["globex"] || len(f1) != 1 {
		t.Fatalf("flag sets %v, %v; want acme, globex", f0, f1)
	}
	mustCommit(t, s, acme, b2(func(b *store.Batch) { b.Delete(flagKey(0, "a")) }))
	wantTotals(t, s, store.BucketTotals{Flagged: [2]int64{1, 1}})
	// Put and deleted in one batch: the rows decide.
	mustCommit(t, s, acme, b2(func(b *store.Batch) {
		b.Put(flagKey(1, "a"), nil)
		b.Delete(flagKey(1, "a"))
		b.Delete(flagKey(0, "b"))
	}))
	mustCommit(t, s, globex, b2(func(b *store.Batch) { b.Put(flagKey(1, "b"), nil) }))
	wantTotals(t, s, store.BucketTotals{Flagged: [2]int64{0, 1}})
	mustCommit(t, s, globex, b2(func(b *store.Batch) { b.Delete(flagKey(1, "a")); b.Delete(flagKey(1, "b")) }))
	wantTotals(t, s, store.BucketTotals{})
	if f := flagged(t, s, 1); len(f) != 0 {
		t.Fatalf("flag set 1 = %v, want empty", f)
	}
}

// Concurrent writers of many partitions leave totals equal to what the
// rows hold: none is lost or counted twice.
func testConcurrentWritersLeaveExactTotals(t *testing.T, s Store) {
	parts := make([]store.Partition, 12)
	for i := range parts {
		parts[i] = store.Partition{Namespace: fmt.Sprintf("ns%d", i)}
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 60 {
				p := parts[r.IntN(len(parts))]
				id := fmt.Sprintf("e%d", r.IntN(3))
				var b store.Batch
				switch r.IntN(5) {
				case 0:
					b.Put(flagKey(r.IntN(2), id), nil)
				case 1:
					b.Delete(flagKey(r.IntN(2), id))
				case 2:
					b.AddSaturating(summedKey(id), counterHeader, 0b11, int64(r.IntN(5))-2, int64(r.IntN(50))-25)
				case 3:
					b.Put(summedKey(id), store.Value(counterRow(uint64(r.IntN(9)), uint64(r.IntN(90)))))
				default:
					b.Delete(summedKey(id))
				}
				if _, err := s.Apply(t.Context(), p, b); err != nil {
					t.Errorf("apply: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var want store.BucketTotals
	wantSummed := map[string]bool{}
	for _, p := range parts {
		var rows int64
		for _, e := range scanAll(t, s, p, "", "\xff", 100) {
			switch e.Key[0] {
			case store.SumTag:
				r, bs := counters2(e.Value)
				want.Sums[0] += r
				want.Sums[1] += bs
				rows += r
			}
		}
		if rows > 0 {
			wantSummed[p.Namespace] = true
		}
		for i := range store.NumFlags {
			page, err := s.Scan(t.Context(), p, flagKey(i, ""), flagKey(i, "\xff"), nil, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Entries) > 0 {
				want.Flagged[i]++
			}
		}
	}
	wantTotals(t, s, want)
	if got := summed(t, s); len(got) != len(wantSummed) {
		t.Fatalf("summed = %v, want %v", got, wantSummed)
	}
}

func counters2(v store.Value) (int64, int64) {
	if len(v) != 17 {
		return 0, 0
	}
	var n [2]int64
	for k := range n {
		for _, c := range v[1+8*k : 9+8*k] {
			n[k] = n[k]*256 + int64(c)
		}
	}
	return n[0], n[1]
}

// ListSet keeps the names that start with its prefix, each once, in the
// walk's order, through pages resumed from their cursors; over a flag set
// it lists the flagged partitions alone.
func testListSetKeepsItsPrefix(t *testing.T, s Store) {
	names := []string{"ab", "ab-1", "abc", "abz9", "a", "b", "aa", "xab"}
	for i, n := range names {
		var b store.Batch
		b.Put(store.Key(string(store.RegistryTag)+"e"), nil)
		if i%2 == 0 {
			b.Put(flagKey(0, "e"), nil)
		}
		mustCommit(t, s, store.Partition{Namespace: n}, b)
	}
	walk := func(set store.Set, prefix string) []string {
		var out []string
		var from store.RegistryCursor
		for range 1000 {
			page, err := store.ListSet(t.Context(), s, set, prefix, from, 2)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			for _, p := range page.Partitions {
				out = append(out, p.Namespace)
			}
			if page.Next == nil {
				return out
			}
			c, err := store.ParseRegistryCursor(s, page.Next.Bytes())
			if err != nil {
				t.Fatalf("cursor: %v", err)
			}
			from = c
		}
		t.Fatal("the walk does not end")
		return nil
	}
	want := func(got []string, w ...string) {
		t.Helper()
		slices.Sort(got)
		if !slices.Equal(got, w) {
			t.Fatalf("listed %v, want %v", got, w)
		}
	}
	want(walk(store.SetRegistered, "ab"), "ab", "ab-1", "abc", "abz9")
	want(walk(store.SetRegistered, ""), "a", "aa", "ab", "ab-1", "abc", "abz9", "b", "xab")
	want(walk(store.SetFlagA, ""), "a", "aa", "ab", "abc")
	want(walk(store.SetFlagA, "ab"), "ab", "abc")
	want(walk(store.SetFlagB, ""))
}
