package delivery

import (
	"sync"
	"time"
)

// workerIdle is how long a call worker waits for its next call before it
// ends.
const workerIdle = 30 * time.Second

// workers runs each delivery call on a goroutine that ran an earlier one,
// when one is free, rather than on a new goroutine: a new goroutine's stack
// starts small, and signing, encoding (BLAKE3's frames alone are over 8 KiB)
// and the HTTP client grew it on every call, which cost more CPU than some
// of the work itself. A call that never returns (a sink ignoring its
// context) holds only its own worker; the next call gets another. The most
// recently freed worker is used first, so the fewest stay warm.
type workers struct {
	mu   sync.Mutex
	idle []chan func()
	// Test seams: idleFor replaces workerIdle; parked is called each time
	// a worker is free, ended when one ends.
	idleFor       time.Duration
	parked, ended func()
}

// callWorkers runs the calls of every Handler.
var callWorkers workers

// run runs f on a free worker, or on a new one.
func (w *workers) run(f func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		next := w.idle[n-1]
		w.idle[n-1] = nil
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		next <- f // buffered, and only its worker receives
		return
	}
	w.mu.Unlock()
	go w.work(f)
}

func (w *workers) work(f func()) {
	next := make(chan func(), 1)
	idleFor := w.idleFor
	if idleFor == 0 {
		idleFor = workerIdle
	}
	idle := time.NewTimer(idleFor)
	defer idle.Stop()
	for {
		f()
		f = nil // nothing of the call is kept while idle
		w.mu.Lock()
		w.idle = append(w.idle, next)
		w.mu.Unlock()
		if w.parked != nil {
			w.parked()
		}
		idle.Reset(idleFor)
		select {
		case f = <-next:
			continue
		case <-idle.C:
		}
		if !w.leave(next) {
			// run took this worker as the timer fired: its call is on
			// the way.
			f = <-next
			continue
		}
		if w.ended != nil {
			w.ended()
		}
		return
	}
}

// leave takes a worker off the free list; false when run has taken it.
func (w *workers) leave(next chan func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, c := range w.idle {
		if c == next {
			n := copy(w.idle[i:], w.idle[i+1:])
			w.idle[i+n] = nil
			w.idle = w.idle[:i+n]
			return true
		}
	}
	return false
}
