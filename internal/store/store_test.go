package store_test

import (
	"errors"
	"math"
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
