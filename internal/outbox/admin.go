package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Errors of Admin that callers branch on.
var (
	// ErrNotFound: the endpoint is not registered.
	ErrNotFound = errors.New("outbox: endpoint not found")
	// ErrNotPending: the row is not pending on the stream.
	ErrNotPending = errors.New("outbox: row not pending")
	// ErrDeleting: a forced delete of the endpoint is under way.
	ErrDeleting = errors.New("outbox: endpoint is being deleted")
	// ErrDisabled: the endpoint is disabled, so nothing would deliver.
	ErrDisabled = errors.New("outbox: endpoint is disabled")
	// ErrBusy: the stream is being delivered this instant.
	ErrBusy = errors.New("outbox: stream is being delivered")
)

// BacklogError refuses to delete an endpoint that still has rows pending.
type BacklogError struct{ Rows uint64 }

func (e *BacklogError) Error() string {
	return fmt.Sprintf("outbox: endpoint has %d rows pending", e.Rows)
}

// ReasonDeleting marks an endpoint whose forced delete is under way: it is
// disabled, ingest no longer gives it rows, and its rows are being dropped.
const ReasonDeleting = "deleting"

// DefaultMaxNamespaces bounds the namespaces a store holds (those with an
// endpoint): far more tenants than one relay serves, while one token that
// may write endpoints cannot grow the store without end, as each new
// namespace costs Redis about a kilobyte before it takes an outcome, and
// every walk of the registry (the console's list, the backlog gauges) reads
// it.
const DefaultMaxNamespaces = 10_000

// adminRetries bounds re-plans of one admin change that lost its guards to
// concurrent ingest or delivery.
const adminRetries = 16

// Admin is what operators do to a namespace's endpoints and streams:
// register, inspect, delete, and replay a stuck row. Every change is one
// guarded batch, re-planned when a concurrent ingest or fire got there
// first. It holds no state and is safe for concurrent use.
type Admin struct {
	Store store.NamespaceStore
	Clock clock.Clock
	// MaxEndpoints bounds the endpoints a namespace is given: a new one
	// beyond it is refused. DefaultMaxEndpoints when zero, at most
	// HardMaxEndpoints.
	MaxEndpoints int
	// Window must equal the Appender's: it dates a stream's oldest row (see
	// BacklogReader). DefaultWindow when zero.
	Window time.Duration
	// Retention must equal the delivery handler's: a dropped row's log
	// entry is kept as long as a delivered one's.
	Retention time.Duration
	// MaxNamespaces bounds the namespaces of the store: the first
	// endpoint of a namespace beyond it is refused (roomForNamespace).
	// DefaultMaxNamespaces when zero.
	MaxNamespaces int
	// PreviewRows bounds the log rows one PreviewRecovery examines;
	// MaxPreviewRows when zero or more.
	PreviewRows int
	// Wait pauses a change that waits for a fire to end (Erase), returning
	// early with ctx's error; a timer when nil. Tests make it a signal.
	Wait func(ctx context.Context, d time.Duration) error
}

func (a *Admin) wait(ctx context.Context, d time.Duration) error {
	if a.Wait != nil {
		return a.Wait(ctx, d)
	}
	return pause(ctx, d)
}

// Stream is an endpoint with the state of its stream.
type Stream struct {
	ID       string
	Endpoint schema.Endpoint
	Backlog  schema.Backlog
	// Timer is the stream's delivery timer; nil when it has none.
	Timer *StreamTimer
	// Counters count what became of the stream's rows.
	Counters schema.Counters
	// OldestAcceptedMs is when the stream's oldest pending row was
	// accepted (see BacklogReader); 0 when none is pending. Only the
	// endpoint views (Endpoint, Endpoints) read it.
	OldestAcceptedMs int64
}

// StreamTimer is a stream's delivery timer as operators see it.
type StreamTimer struct {
	DueAtMs int64
	// FailedFires is how many fires in a row delivered nothing; one told
	// to wait by a Retry-After counts whatever it delivered
	// (schema.DeliveryState.FailedFires).
	FailedFires uint32
	// Leased: a fire holds it now.
	Leased bool
	// Throttle is the stream's limits lowered after its endpoint refused
	// calls; nil when it runs at the configured ones.
	Throttle *schema.Throttle
	// FailingSinceMs is the first failed call since the endpoint last
	// delivered; 0 while it is healthy.
	FailingSinceMs int64
	// LastStatus and LastError are the last failed call's, while failing.
	LastStatus int
	LastError  string
	// Corrupt: the row does not decode; its stream is stuck until replayed.
	Corrupt bool
}

// streamRead is one stream's rows as read: the guards of a change to it.
type streamRead struct {
	// endpoints counts the namespace's endpoints, up to the limit: as many
	// as were read with the sequence, at one instant.
	endpoints int
	ep        *endpointRow // the stream's, nil when not registered
	backlog   backlogRead
	counters  schema.Counters
	timer     *timers.Row // the stream's delivery timer, nil when none
	// head is the stream's head row (queue.go) as read, and headAt what it
	// holds; a head that does not decode reads as none.
	head   rowRead
	headAt schema.Head
	// seq is the namespace's sequence row: every ingest guards it, so a
	// change that creates what ingest plans on (an endpoint, a delivery
	// timer) bumps it to fence out plans read before.
	seq rowRead
}

// fenced is the sequence number fence moves the sequence row to: the first
// an outcome accepted after the batch can have.
func (s *streamRead) fenced() (uint64, error) {
	var next uint64
	if s.seq.found {
		var err error
		if next, err = schema.DecodeSequence(s.seq.raw); err != nil {
			return 0, err
		}
	}
	return next + 1, nil
}

// fence guards the sequence row as read and moves it on by one: every
// ingest, endpoint creation and timer creation read before fails its guard.
// A skipped sequence number is harmless, numbers only order rows.
func (s *streamRead) fence(b *store.Batch) error {
	var next uint64
	if s.seq.found {
		var err error
		if next, err = schema.DecodeSequence(s.seq.raw); err != nil {
			return err
		}
	}
	b.Guard(schema.SequenceKey(), s.seq.raw, s.seq.found)
	b.Put(schema.SequenceKey(), schema.EncodeSequence(next+1))
	return nil
}

// readStream reads the stream of id (its endpoint, backlog, counters, head
// and delivery timer), the namespace's sequence and its endpoints, counted
// up to the limit, in one read at one instant on a store.MultiReader. So a
// creation's fence, which guards the sequence, guards the count too: an
// endpoint created after this read moved the sequence. Endpoints beyond the
// limit are not read: they refuse only the creation of another.
func (a *Admin) readStream(ctx context.Context, p store.Partition, id string) (*streamRead, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := schema.ValidateEndpointID(id); err != nil {
		return nil, err
	}
	es, ee := schema.EndpointRange()
	ts, te := timers.Range()
	// The rows by key come first: a store that reads one at a time then
	// reads the sequence before it counts the endpoints, so an endpoint
	// created between the two moved the sequence the fence guards.
	keys := []store.Key{schema.SequenceKey(), schema.ClassEndpoint.Key(id), schema.ClassBacklog.Key(id), schema.ClassCounters.Key(id), schema.ClassHead.Key(id)}
	res, err := store.ReadMany(ctx, a.Store, p, []store.Read{
		{Keys: keys},
		{Start: es, End: ee, Limit: a.maxEndpoints()},
		{Start: ts, End: te, Limit: timers.MaxRows + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("read stream %s/%s: %w", p, id, err)
	}
	rows := res[0].Rows
	s := &streamRead{endpoints: len(res[1].Page.Entries), seq: rowRead{raw: rows[0].Value, found: rows[0].Found}}
	if r := rows[1]; r.Found {
		ep, err := schema.DecodeEndpoint(r.Value)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s of %s: %w", id, p, err)
		}
		s.ep = &endpointRow{id: id, key: keys[1], raw: r.Value, ep: ep}
	}
	s.backlog.rowRead = rowRead{raw: rows[2].Value, found: rows[2].Found}
	if s.backlog.backlog, err = schema.BacklogOf(rows[2].Value, rows[2].Found); err != nil {
		return nil, fmt.Errorf("backlog of %s/%s: %w", p, id, err)
	}
	if s.counters, err = schema.CountersOf(rows[3].Value, rows[3].Found); err != nil {
		return nil, fmt.Errorf("counters of %s/%s: %w", p, id, err)
	}
	s.head = rowRead{raw: rows[4].Value, found: rows[4].Found}
	s.headAt, _ = schema.HeadOf(rows[4])
	if res[2].Page.Next != nil {
		return nil, fmt.Errorf("%w: partition %s holds more than %d timers", store.ErrCorrupt, p, timers.MaxRows)
	}
	s.timer = streamTimer(timers.AppendRows(nil, res[2].Page.Entries), id)
	return s, nil
}

// streamTimer is the stream's delivery timer among all of a partition's.
func streamTimer(all []timers.Row, id string) *timers.Row {
	for i := range all {
		if all[i].Kind == timers.KindOutcomeDelivery && all[i].Reference == id {
			return &all[i]
		}
	}
	return nil
}

func viewTimer(r *timers.Row) *StreamTimer {
	if r == nil {
		return nil
	}
	t := &StreamTimer{DueAtMs: r.DueAtMs, Leased: r.Lease != nil}
	if r.Lease != nil {
		// The key holds the lease expiry; the stream was due before.
		t.DueAtMs = r.Lease.DueAtMs
	}
	st, err := schema.DecodeDeliveryState(r.State)
	if r.Err != nil || err != nil {
		t.Corrupt = true
		return t
	}
	t.FailedFires = st.FailedFires
	t.Throttle = st.Throttle
	if h := st.Health; h != nil && h.FailingSinceMs != 0 {
		t.FailingSinceMs, t.LastStatus, t.LastError = h.FailingSinceMs, h.LastStatus, h.LastError
	}
	if h := st.Health; h != nil && len(h.Pending) > 0 && r.Lease == nil && h.ResumeMs > t.DueAtMs {
		// Due now only to append its events: the stream itself is next
		// tried when the fire that decided them chose.
		t.DueAtMs = h.ResumeMs
	}
	return t
}

// apply commits b, reporting whether its guards held. Every operator's
// change is answered, so it is as durable as an ingest (store.Batch.Answered).
func (a *Admin) apply(ctx context.Context, p store.Partition, b store.Batch) (bool, error) {
	b.Answered = true
	res, err := a.Store.Apply(ctx, p, b)
	if err != nil {
		return false, fmt.Errorf("apply to %s: %w", p, err)
	}
	return res.Committed, nil
}

func (a *Admin) window() time.Duration {
	if a.Window > 0 {
		return a.Window
	}
	return DefaultWindow
}
