package delivery

import (
	"container/heap"

	"github.com/hookrelay/relay/internal/store"
)

// dueSoon is what the driver knows of timers due later: for each partition,
// the due time of its earliest timer as last read, from a full poll's look
// ahead or from a scan of the partition. The driver sleeps until the
// earliest and then scans only that partition, rather than reading every
// due index twice a second. What it knows may be stale (another process
// fired or moved the timer): the scan then finds nothing and costs one read.
type dueSoon struct {
	at map[store.Partition]int64
	// h orders at by due time; an item whose due time is no longer at's is
	// skipped when it comes up.
	h dueHeap
}

func newDueSoon() dueSoon {
	return dueSoon{at: map[store.Partition]int64{}}
}

// set records that p's earliest timer is due at dueMs.
func (s *dueSoon) set(p store.Partition, dueMs int64) {
	if old, ok := s.at[p]; ok && old == dueMs {
		return
	}
	s.at[p] = dueMs
	heap.Push(&s.h, dueItem{p: p, dueMs: dueMs})
	if len(s.h) > 2*len(s.at)+64 {
		s.compact()
	}
}

// forget drops what is known of p: a scan of p is about to read it afresh.
func (s *dueSoon) forget(p store.Partition) {
	delete(s.at, p)
}

// next returns the earliest due time known.
func (s *dueSoon) next() (int64, bool) {
	for len(s.h) > 0 {
		it := s.h[0]
		if due, ok := s.at[it.p]; ok && due == it.dueMs {
			return it.dueMs, true
		}
		heap.Pop(&s.h)
	}
	return 0, false
}

// takeDue removes and returns the partitions due at or before nowMs,
// earliest first.
func (s *dueSoon) takeDue(nowMs int64) []store.Partition {
	var out []store.Partition
	for {
		due, ok := s.next()
		if !ok || due > nowMs {
			return out
		}
		it := heap.Pop(&s.h).(dueItem)
		delete(s.at, it.p)
		out = append(out, it.p)
	}
}

// compact drops the heap's stale items.
func (s *dueSoon) compact() {
	kept := s.h[:0]
	for _, it := range s.h {
		if due, ok := s.at[it.p]; ok && due == it.dueMs {
			kept = append(kept, it)
		}
	}
	clear(s.h[len(kept):])
	s.h = kept
	heap.Init(&s.h)
}

type dueItem struct {
	p     store.Partition
	dueMs int64
}

type dueHeap []dueItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].dueMs < h[j].dueMs }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueItem)) }
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = dueItem{}
	*h = old[:len(old)-1]
	return it
}
