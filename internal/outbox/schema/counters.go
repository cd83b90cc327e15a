package schema

import (
	"encoding/binary"

	"github.com/hookrelay/relay/internal/store"
)

// Counters count what became of a stream's outcomes, over the life of its
// endpoint. They live in one row per stream, written only by store.Add in
// the batches that make the change they count, so they hold for the whole
// cluster and a batch that fails writes none of them. Each such batch
// carries a guard its own first run falsifies (the pending rows it deletes,
// or the lease of the fire), so a batch sent again after a lost reply does
// not count twice.
type Counters struct {
	// Delivered counts the rows acknowledged: answered 2xx, or synthetic.
	Delivered uint64
	// FailedAttempts counts the calls that failed.
	FailedAttempts uint64
	// Dropped counts the rows a forced delete dropped.
	Dropped uint64
}

const countersLen = 1 + 3*8

// countersHeader precedes a counters row's three counters, the layout
// store.Add adds to.
var countersHeader = store.Value{codecV1}

// The counters' positions in the row.
const (
	counterDelivered = iota
	counterFailed
	counterDropped
	numCounters
)

// CountersKey is the key of a stream's counters.
func CountersKey(endpoint string) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	return ClassCounters.Key(endpoint), nil
}

// EncodeCounters is version 1, delivered u64, failed attempts u64, dropped
// u64.
func EncodeCounters(c Counters) store.Value {
	v := make([]byte, 0, countersLen)
	v = append(v, codecV1)
	v = binary.BigEndian.AppendUint64(v, c.Delivered)
	v = binary.BigEndian.AppendUint64(v, c.FailedAttempts)
	return binary.BigEndian.AppendUint64(v, c.Dropped)
}

// DecodeCounters decodes a counters row.
func DecodeCounters(v store.Value) (Counters, error) {
	r := newReader("counters", v)
	c := Counters{Delivered: r.u64(), FailedAttempts: r.u64(), Dropped: r.u64()}
	if err := r.end(); err != nil {
		return Counters{}, err
	}
	return c, nil
}

// CountersOf decodes counters as read; an absent row counts nothing
// (PutEndpoint writes the row with the endpoint, so only a damaged or
// half-deleted stream lacks one).
func CountersOf(v store.Value, found bool) (Counters, error) {
	if !found {
		return Counters{}, nil
	}
	return DecodeCounters(v)
}

// AddCounters is the one Add of a batch to the counters of endpoint, an id
// already checked, carrying all of that batch's deltas. An absent row counts
// as zeros (store.Add creates it).
func AddCounters(endpoint string, c Counters) store.Write {
	d := make([]int64, numCounters)
	d[counterDelivered], d[counterFailed], d[counterDropped] = int64(c.Delivered), int64(c.FailedAttempts), int64(c.Dropped)
	return store.Write{Kind: store.Add, Key: ClassCounters.Key(endpoint), Value: countersHeader, Deltas: d}
}

// UncountDelivered is the Add that takes n rows off the delivered count of
// endpoint, an id already checked: rows queued again. The count stops at 0
// rather than refuse the batch, as the backlog's bytes do.
func UncountDelivered(endpoint string, n uint64) store.Write {
	return store.Write{Kind: store.Add, Key: ClassCounters.Key(endpoint), Value: countersHeader,
		Deltas: []int64{-int64(n), 0, 0}, Saturating: 1 << counterDelivered}
}
