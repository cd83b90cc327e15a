package store

import "context"

// SumTag is the first byte of every summed row key: its value is a counter
// row (one header byte, then 8-byte big-endian counters, the layout Add
// writes), and Apply adds the change of its first SummedCounters counters
// (as the batch leaves the row, less as it stood; an absent row, or one of
// another layout, counts as zeros) to its bucket's Totals, in the same
// atomic step, whatever write made the change: a put, an add (saturating
// or not) or a delete. So a bucket's sums equal the sums of its
// partitions' rows at every instant. The outbox's backlog rows carry it.
const SumTag byte = 'b'

// SummedCounters is how many leading counters of a summed row its bucket
// sums.
const SummedCounters = 2

// FlagTags are the first bytes of the row keys that flag their partition:
// a partition is in its bucket's flag set i while it holds a row whose key
// starts with FlagTags[i], kept by Apply from the rows the batch leaves,
// as the registry is. The outbox's failing and operator-disabled marks
// carry them.
var FlagTags = [NumFlags]byte{FlagTagA, FlagTagB}

// The flag tags, one per flag set.
const (
	FlagTagA byte = 'f'
	FlagTagB byte = 'o'
)

// NumFlags is the number of flag sets a bucket keeps.
const NumFlags = 2

// BucketTotals is what a bucket's partitions hold, kept by Apply.
type BucketTotals struct {
	// Sums are the sums of every summed row's first SummedCounters
	// counters.
	Sums [SummedCounters]int64
	// Flagged counts the partitions in each flag set.
	Flagged [NumFlags]int64
}

// Add adds o to t.
func (t *BucketTotals) Add(o BucketTotals) {
	for i := range t.Sums {
		t.Sums[i] += o.Sums[i]
	}
	for i := range t.Flagged {
		t.Flagged[i] += o.Flagged[i]
	}
}

// Totals reads the buckets' totals and flag sets. Its reads cost one
// command per bucket, whatever the number of partitions.
type Totals interface {
	Buckets() int
	BucketOf(p Partition) int
	// Totals reads every bucket's totals, in bucket order. It reads the
	// buckets one by one, not at one instant: a change between two reads
	// may be counted or not, but each bucket's figures are exact as of
	// its read.
	Totals(ctx context.Context) ([]BucketTotals, error)
	// List returns up to limit partitions of the bucket's set whose
	// names start with prefix and sort strictly after after ("" for the
	// first), in byte order, and whether the set holds more such after
	// them: one range read. A limit above MaxRegistryPage is clamped to it.
	List(ctx context.Context, bucket int, set Set, prefix, after string, limit int) (parts []Partition, more bool, err error)
	// Summed lists the partitions of the bucket whose summed rows' first
	// counters sum above 0, in byte order: bounded by the partitions with
	// something counted, not by all.
	Summed(ctx context.Context, bucket int) ([]Partition, error)
}

// Recounter rebuilds the totals of a keyspace written before they were
// kept: TotalsKept is false there until RecordTotalsKept, which a caller
// sends once it has recounted every bucket.
type Recounter interface {
	Totals
	TotalsKept(ctx context.Context) (bool, error)
	// Recount computes a bucket's totals afresh from its partitions' rows,
	// at one instant.
	Recount(ctx context.Context, bucket int) error
	RecordTotalsKept(ctx context.Context) error
}

// SumTotals sums every bucket's totals (Totals.Totals).
func SumTotals(ctx context.Context, t Totals) (BucketTotals, error) {
	all, err := t.Totals(ctx)
	if err != nil {
		return BucketTotals{}, err
	}
	var out BucketTotals
	for _, b := range all {
		out.Add(b)
	}
	return out, nil
}

// Set names a per-bucket set of partitions kept by name: the registry or a
// flag set.
type Set int

// The sets Totals.List pages.
const (
	SetRegistered Set = iota
	SetFlagA
	SetFlagB
)

// ListSet is ListRegistered over any set, keeping the names that start
// with prefix: the same walk, cursor and bounds, bucket by bucket and by
// name within one, at most RegistryBucketsPerPage buckets a page, one range
// read each. A page costs what it lists and the buckets it reads, not the
// set's size.
func ListSet(ctx context.Context, l Totals, set Set, prefix string, from RegistryCursor, limit int) (RegistryPage, error) {
	return listWith(ctx, l.Buckets(), from, limit, func(b int, after string, n int) ([]Partition, bool, error) {
		return l.List(ctx, b, set, prefix, after, n)
	})
}
