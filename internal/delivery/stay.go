package delivery

import (
	"sync"
	"time"
)

// ends remembers when each stream's fires last ended it in this process,
// so that a fire can tell a stream that keeps taking outcomes (it ended a
// moment ago) from one that takes one now and then. It is only a hint: a
// stream it forgot, or one another process fired, ends as any does.
type ends struct {
	mu sync.Mutex
	at map[streamID]int64
}

type streamID struct{ ns, endpoint string }

const (
	// stayWithin is how recently a stream must have ended for its next end
	// to keep its timer (timers.Fired.Stay). A stream that stays costs one
	// more fire if nothing comes within the lease, so it takes a stream
	// that ended twice within stayWithin: at the rates where it pays.
	stayWithin = 2 * time.Second
	// maxEnds bounds the streams remembered; past it, one is forgotten for
	// each remembered.
	maxEnds = 4096
)

// recent reports whether the stream ended within stayWithin of nowMs.
func (e *ends) recent(id streamID, nowMs int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.at[id]
	return ok && nowMs-at <= stayWithin.Milliseconds() && at <= nowMs
}

// ended remembers that the stream ended at nowMs.
func (e *ends) ended(id streamID, nowMs int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at == nil {
		e.at = make(map[streamID]int64)
	}
	if _, ok := e.at[id]; !ok && len(e.at) >= maxEnds {
		for old := range e.at {
			delete(e.at, old)
			break
		}
	}
	e.at[id] = nowMs
}
