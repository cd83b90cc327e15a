package delivery

import (
	"github.com/hookrelay/relay/internal/store"
)

// partitionQueue is a FIFO of partitions, each in it at most once.
type partitionQueue struct {
	items []queued
	// in maps each queued partition to the generation of its item; an item
	// of another generation was removed and is skipped when its turn
	// comes, so a partition removed and queued again goes to the back.
	in  map[store.Partition]uint64
	gen uint64
}

type queued struct {
	p   store.Partition
	gen uint64
}

func newPartitionQueue() partitionQueue {
	return partitionQueue{in: map[store.Partition]uint64{}}
}

func (q *partitionQueue) len() int { return len(q.in) }

func (q *partitionQueue) has(p store.Partition) bool {
	_, ok := q.in[p]
	return ok
}

func (q *partitionQueue) push(p store.Partition) {
	if _, ok := q.in[p]; ok {
		return
	}
	q.gen++
	q.in[p] = q.gen
	q.items = append(q.items, queued{p: p, gen: q.gen})
}

func (q *partitionQueue) remove(p store.Partition) {
	delete(q.in, p)
	if len(q.items) > 2*len(q.in)+64 {
		// Drop what removals left behind, keeping the order.
		kept := q.items[:0]
		for _, it := range q.items {
			if g, ok := q.in[it.p]; ok && g == it.gen {
				kept = append(kept, it)
			}
		}
		clear(q.items[len(kept):])
		q.items = kept
	}
}

// peek returns the partition pop would, leaving it queued.
func (q *partitionQueue) peek() (store.Partition, bool) {
	for len(q.items) > 0 {
		it := q.items[0]
		if g, ok := q.in[it.p]; ok && g == it.gen {
			return it.p, true
		}
		q.items[0] = queued{}
		q.items = q.items[1:]
	}
	return store.Partition{}, false
}

func (q *partitionQueue) pop() (store.Partition, bool) {
	for len(q.items) > 0 {
		it := q.items[0]
		q.items[0] = queued{}
		q.items = q.items[1:]
		if g, ok := q.in[it.p]; ok && g == it.gen {
			delete(q.in, it.p)
			return it.p, true
		}
	}
	return store.Partition{}, false
}
