package store

import (
	"context"
	"encoding/binary"
	"fmt"
)

// Applied is the row w leaves, given the row it finds (v, found), as Apply
// writes it: a Put's value, nothing after a Delete, an Add's counters
// added, a PutRange's bytes spliced in. It lets a reader who holds a row
// follow a batch it saw commit without reading the row again. The errors
// are Apply's for the same row: ErrCorrupt for an Add of another layout or
// a PutRange past the row's end, ErrCounterRange for a counter leaving
// 0..MaxCounter.
func (w Write) Applied(v Value, found bool) (Value, bool, error) {
	switch w.Kind {
	case Put:
		return w.Value, true, nil
	case Delete:
		return nil, false, nil
	case Add:
		return w.added(v, found)
	case PutRange:
		if !found || w.Offset < 0 || len(v) < w.Offset+len(w.Value) {
			return nil, false, fmt.Errorf("%w: put-range of a row absent or too short", ErrCorrupt)
		}
		out := append(Value(nil), v...)
		copy(out[w.Offset:], w.Value)
		return out, true, nil
	}
	return nil, false, fmt.Errorf("store: write kind %d", w.Kind)
}

func (w Write) added(v Value, found bool) (Value, bool, error) {
	header, n := w.Value, len(w.Deltas)
	if !found {
		v = make(Value, len(header)+8*n)
		copy(v, header)
	} else if len(v) != len(header)+8*n || string(v[:len(header)]) != string(header) {
		return nil, false, fmt.Errorf("%w: counter row has another layout", ErrCorrupt)
	}
	out := append(Value(nil), v...)
	for i, d := range w.Deltas {
		at := out[len(header)+8*i:]
		c := binary.BigEndian.Uint64(at)
		if c > MaxCounter {
			return nil, false, ErrCounterRange
		}
		sum := int64(c) + d
		if sum < 0 && w.Saturating&(1<<i) != 0 {
			sum = 0
		}
		if sum < 0 || sum > MaxCounter {
			return nil, false, ErrCounterRange
		}
		binary.BigEndian.PutUint64(at, uint64(sum))
	}
	return out, true, nil
}

// Observed is st telling committed of each batch that commits through it,
// after Apply returns, so a reader holding rows can follow the batch
// (Write.Applied). A batch whose outcome is not known (an error) is not
// told: a reader that misses it finds out from its guards.
func Observed(st NamespaceStore, committed func(p Partition, writes []Write)) NamespaceStore {
	return observed{NamespaceStore: st, committed: committed}
}

type observed struct {
	NamespaceStore
	committed func(Partition, []Write)
}

func (o observed) Apply(ctx context.Context, p Partition, b Batch) (Result, error) {
	res, err := o.NamespaceStore.Apply(ctx, p, b)
	if err == nil && res.Committed {
		o.committed(p, b.Writes)
	}
	return res, err
}

// ReadMany keeps st's reads in one round trip.
func (o observed) ReadMany(ctx context.Context, p Partition, reads []Read) ([]ReadResult, error) {
	return ReadMany(ctx, o.NamespaceStore, p, reads)
}
