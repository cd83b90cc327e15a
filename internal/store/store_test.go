package store_test

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/store"
)

// The bounds of a put-range are inclusive, and an offset near the largest
// int is refused rather than overflowing past the check.
func TestPutRangeBounds(t *testing.T) {
	var ok store.Batch
	ok.PutRange("r", 0, make(store.Value, store.MaxRangeBytes))
	ok.PutRange("r", store.MaxValueBytes-1, store.Value("x"))
	ok.PutRange("r", store.MaxValueBytes-store.MaxRangeBytes, make(store.Value, store.MaxRangeBytes))
	ok.Put("other", nil)
	ok.Delete("gone")
	ok.Add("count", nil, 1)
	if err := ok.Validate(); err != nil {
		t.Fatalf("put-ranges at the bounds: %v", err)
	}
	if ok.Ops() != 6 {
		t.Fatalf("%d operations, want each put-range counted once", ok.Ops())
	}
	for _, offset := range []int{math.MaxInt, math.MaxInt - 1, math.MinInt} {
		var b store.Batch
		b.PutRange("r", offset, store.Value("xy"))
		if err := b.Validate(); !errors.Is(err, store.ErrInvalidBatch) {
			t.Fatalf("put-range at offset %d: %v, want ErrInvalidBatch", offset, err)
		}
	}
}

// A partition's namespace is [a-z0-9][a-z0-9_-]{0,62}: every string of up
// to three bytes over an alphabet with each kind of byte, and lengths
// around the bound, answer as that pattern does.
func TestPartitionValidateIsItsPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	alphabet := []string{"a", "z", "0", "9", "_", "-", "A", ".", "/", " ", "\x00", "\xff", "é"}
	check := func(ns string) {
		err := store.Partition{Namespace: ns}.Validate()
		if want := pattern.MatchString(ns); (err == nil) != want || (err != nil && !errors.Is(err, store.ErrInvalidPartition)) {
			t.Fatalf("Validate(%q) = %v, pattern says %v", ns, err, want)
		}
	}
	check("")
	for _, a := range alphabet {
		check(a)
		for _, b := range alphabet {
			check(a + b)
			for _, c := range alphabet {
				check(a + b + c)
			}
		}
	}
	for _, n := range []int{62, 63, 64, 200} {
		check(strings.Repeat("a", n))
		check("a" + strings.Repeat("-", n-1))
	}
}

func BenchmarkPartitionValidate(b *testing.B) {
	p := store.Partition{Namespace: "bench-latency-4"}
	for b.Loop() {
		if err := p.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
