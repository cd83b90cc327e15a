package timers

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/store"
)

// DueTimer is what a handler sees of the timer it fires.
type DueTimer struct {
	// DueAtMs is when the timer was due, before any lease moved it.
	DueAtMs   int64
	Kind      Kind
	Reference string
	// State is the handler's own state, as it last left it.
	State []byte
}

// FireContext is the partition a handler works in.
type FireContext struct {
	Store     store.NamespaceStore
	Partition store.Partition
	NowMs     int64
}

// Fired is a handler's result. Done deletes the timer; otherwise the timer
// moves to DueAtMs with State. Batch is applied in the same atomic step, and
// a batch whose preconditions fail leaves the timer due for the next fire to
// re-plan.
type Fired struct {
	Done    bool
	DueAtMs int64
	State   []byte
	Batch   store.Batch
	// Stay, with Done, keeps the timer where its lease put it, idle with
	// State, rather than deleting it: due when the lease would have run
	// out, it fires then and ends, unless a writer holds it again first
	// (Row.Hold). Kept in place, its key, so its due time, is unchanged,
	// and the store writes neither its order nor its due index, where a
	// delete and a new timer write both: what a stream that takes more
	// rows within the lease saves.
	Stay bool
	// Backoff marks a Reschedule after a failed call whose Batch writes
	// nothing: if its guard fails, the reschedule still applies rather than
	// firing again at once, so an endpoint that keeps failing under steady
	// ingest backs off instead of being called at the rate of ingest.
	Backoff bool
	// Notes are writes that stand whatever the handler's guard finds, such
	// as the record of a failed call: they are applied with the result and,
	// when the guard fails, with the timer's release. Only the lease guards
	// them.
	Notes []store.Write
	// Marks are writes that follow the State this plan writes, applied
	// only with it and only while MarkGuards hold: with the result, and
	// with a Backoff reschedule's release, which writes that State too;
	// never with a release at the timer's state as claimed. A release
	// whose MarkGuards fail is made again without them, at the state as
	// claimed.
	Marks      []store.Write
	MarkGuards []store.Precondition
	// Replan, when set, plans the completion again against fresh rows. A
	// completion whose handler guard failed is re-planned a few times,
	// under the same lease, before the timer is released: the work the
	// fire did (calls made, rows delivered) is then kept, not done again.
	Replan func(ctx context.Context) (Fired, error)
}

// Handler fires the timers of one kind.
type Handler interface {
	Kind() Kind
	Fire(ctx context.Context, fc FireContext, t DueTimer) (Fired, error)
}

// Handlers maps kinds to handlers.
type Handlers struct {
	handlers map[Kind]Handler
}

// NewHandlers returns the map of the given handlers. Two handlers of one
// kind are a programming error.
func NewHandlers(handlers ...Handler) (*Handlers, error) {
	r := &Handlers{handlers: make(map[Kind]Handler, len(handlers))}
	for _, h := range handlers {
		if _, dup := r.handlers[h.Kind()]; dup {
			return nil, fmt.Errorf("timers: two handlers of kind %d", h.Kind())
		}
		r.handlers[h.Kind()] = h
	}
	return r, nil
}

// Handler returns the handler of a kind.
func (r *Handlers) Handler(k Kind) (Handler, bool) {
	h, ok := r.handlers[k]
	return h, ok
}
