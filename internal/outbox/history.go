package outbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Errors of an outcome's history.
var (
	// ErrOutcomeNotFound: the namespace holds no outcome under this
	// reservation id: never accepted, swept after its retention, or
	// erased.
	ErrOutcomeNotFound = errors.New("outbox: no outcome under this reservation id")
	// ErrStillPending: the outcome still waits on that stream; a replay,
	// not a resend, hurries it.
	ErrStillPending = errors.New("outbox: outcome still pending on this endpoint")
	// ErrNotDelivered: the endpoint's kinds did not take the outcome, or
	// it was created after, so there is nothing to send again.
	ErrNotDelivered = errors.New("outbox: outcome was never for this endpoint")
)

// Delivery states of OutcomeView, beside EntryState's: the endpoint's kinds
// did not take the outcome.
const StateFiltered = "filtered"

// OutcomeView is one outcome as accepted and what became of it on each
// endpoint that existed when it was.
type OutcomeView struct {
	Outcome    schema.Outcome
	Seq        uint64
	AcceptedMs int64
	Streams    []OutcomeStream // in endpoint id order
}

// OutcomeStream is the outcome on one endpoint.
type OutcomeStream struct {
	Endpoint string
	// State is "pending", "delivered", "dropped" or "filtered".
	State string
	// AtMs is when it was delivered or dropped; 0 otherwise.
	AtMs int64
	// Attempts are its last attempts, oldest first, the delivering one
	// last, and their total.
	Attempts schema.Attempts
	// Corrupt: the attempt row does not decode.
	Corrupt bool
}

// loggedOutcome is an outcome found by its reservation id.
type loggedOutcome struct {
	seen    rowRead
	seq     uint64
	raw     store.Value
	row     schema.LogRow
	outcome schema.Outcome
}

// findLogged finds the outcome rid through its seen row, which names its
// log row.
func (a *Admin) findLogged(ctx context.Context, p store.Partition, rid string) (loggedOutcome, error) {
	if err := p.Validate(); err != nil {
		return loggedOutcome{}, err
	}
	if err := schema.ValidateReservationID(rid); err != nil {
		return loggedOutcome{}, err
	}
	key := schema.ClassSeen.Key(rid)
	v, found, err := a.Store.Get(ctx, p, key)
	if err != nil {
		return loggedOutcome{}, fmt.Errorf("read %s/%s: %w", p, rid, err)
	}
	if !found {
		return loggedOutcome{}, ErrOutcomeNotFound
	}
	seen, err := schema.DecodeSeen(v)
	if err != nil {
		return loggedOutcome{}, fmt.Errorf("seen row of %s/%s: %w", p, rid, err)
	}
	if !seen.Logged {
		return loggedOutcome{}, ErrOutcomeNotFound
	}
	raw, found, err := a.Store.Get(ctx, p, schema.LogKey(seen.Seq))
	if err != nil {
		return loggedOutcome{}, fmt.Errorf("read %s/%s: %w", p, rid, err)
	}
	if !found {
		return loggedOutcome{}, ErrOutcomeNotFound
	}
	l, err := schema.DecodeLog(raw)
	if err != nil {
		return loggedOutcome{}, fmt.Errorf("log row of %s/%s: %w", p, rid, err)
	}
	if l.RID != rid {
		// A seen row names the log row its outcome had; one accepted again
		// since has another.
		return loggedOutcome{}, ErrOutcomeNotFound
	}
	o, err := schema.DecodeRecord(rid, l.Record)
	if err != nil {
		return loggedOutcome{}, fmt.Errorf("log row of %s/%s: %w", p, rid, err)
	}
	return loggedOutcome{seen: rowRead{raw: v, found: true}, seq: seen.Seq, raw: raw, row: l, outcome: o}, nil
}

// Outcome reads the outcome rid and its story on every endpoint of the
// namespace that existed when it was accepted.
func (a *Admin) Outcome(ctx context.Context, p store.Partition, rid string) (OutcomeView, error) {
	lo, err := a.findLogged(ctx, p, rid)
	if err != nil {
		return OutcomeView{}, err
	}
	eps, err := readEndpoints(ctx, a.Store, p)
	if err != nil {
		return OutcomeView{}, err
	}
	view := OutcomeView{Outcome: lo.outcome, Seq: lo.seq, AcceptedMs: lo.row.AcceptedMs}
	keys := make([]store.Key, len(eps))
	for i, ep := range eps {
		keys[i] = schema.AttemptKeyOf(ep.id, rid)
	}
	attempts, err := getMany(ctx, a.Store, p, keys)
	if err != nil {
		return OutcomeView{}, err
	}
	for i, ep := range eps {
		en, ok := lo.row.Entry(ep.id)
		if !took(&ep.ep, lo.seq, lo.row.AcceptedMs) {
			// Created after: an entry under its id is an earlier endpoint's.
			continue
		}
		s := OutcomeStream{Endpoint: ep.id, State: StateFiltered}
		if ok {
			s.State = en.State.String()
			if en.State != schema.EntryPending {
				s.AtMs = en.AtMs
			}
		}
		if attempts[i].Found {
			h, err := schema.DecodeAttempts(attempts[i].Value)
			if err != nil {
				s.Corrupt = true
			} else {
				s.Attempts = h
			}
		}
		if ok && en.State == schema.EntryDelivered && !schema.IsSynthetic(rid) {
			s.Attempts = s.Attempts.With(schema.Attempt{AtMs: en.AtMs, DurationMs: en.DurationMs, Status: int(en.Status)})
		}
		view.Streams = append(view.Streams, s)
	}
	return view, nil
}

// Resent is where a resend put the outcome.
type Resent struct {
	Seq     uint64
	DueAtMs int64
}

// Resend queues the retained outcome rid on the stream of endpoint id again,
// at its own sequence number, so it keeps its place and its webhook id: in
// one batch guarded by the log row, the stream's entry is marked pending,
// its pending row written, its backlog and counters moved (one outcome less
// delivered, one more pending), and its timer woken. An outcome still
// pending there is ErrStillPending; one the endpoint never had is
// ErrNotDelivered.
func (a *Admin) Resend(ctx context.Context, p store.Partition, id, rid string) (Resent, error) {
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return Resent{}, err
		}
		if s.ep == nil {
			return Resent{}, ErrNotFound
		}
		if s.ep.ep.DisabledReason == ReasonDeleting {
			return Resent{}, ErrDeleting
		}
		lo, err := a.findLogged(ctx, p, rid)
		if err != nil {
			return Resent{}, err
		}
		en, ok := lo.row.Entry(id)
		switch {
		case !ok || !took(&s.ep.ep, lo.seq, lo.row.AcceptedMs):
			return Resent{}, ErrNotDelivered
		case en.State == schema.EntryPending:
			return Resent{}, ErrStillPending
		case en.State != schema.EntryDelivered:
			return Resent{}, ErrNotDelivered
		}
		nowMs := a.Clock.Now().UnixMilli()
		tag, err := newTag()
		if err != nil {
			return Resent{}, err
		}
		var b store.Batch
		b.RequireEquals(s.ep.key, s.ep.raw)
		if err := requeue(&b, id, lo.seq, lo.raw, lo.row, en, tag); err != nil {
			return Resent{}, err
		}
		b.Writes = append(b.Writes, requeueCounts(id, 1, uint64(len(lo.row.Record)))...)
		due := nowMs
		if s.ep.ep.Enabled {
			wakeForRows(&b, s, id, nowMs)
		} else {
			due = timers.NeverMs
		}
		ok, err = a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.resent(ctx, p, id, lo, tag) })
		if err != nil {
			return Resent{}, err
		}
		if ok {
			return Resent{Seq: lo.seq, DueAtMs: due}, nil
		}
	}
	return Resent{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// resent reports whether the outcome lo's entry for id is pending under the
// tag of the Resend that wrote it.
func (a *Admin) resent(ctx context.Context, p store.Partition, id string, lo loggedOutcome, tag int64) (bool, error) {
	v, found, err := a.Store.Get(ctx, p, schema.LogKey(lo.seq))
	if err != nil {
		return false, fmt.Errorf("read %s/%s: %w", p, lo.row.RID, err)
	}
	if !found {
		return false, nil
	}
	l, err := schema.DecodeLog(v)
	if err != nil || l.RID != lo.row.RID {
		return false, nil
	}
	en, ok := l.Entry(id)
	return ok && en.State == schema.EntryPending && en.AtMs == tag, nil
}

// requeue adds to b the guard of the log row as read and the writes that
// make its entry for id pending again at its own sequence number: three
// operations. tag is the entry's at ms while pending (schema.LogEntry.AtMs): 0,
// or a Resend's tag.
func requeue(b *store.Batch, id string, seq uint64, raw store.Value, row schema.LogRow, en schema.LogEntry, tag int64) error {
	b.RequireEquals(schema.LogKey(seq), raw)
	b.Put(schema.PendingKeyOf(id, seq, row.RID), store.Value{})
	en.State, en.AtMs, en.DurationMs, en.Status = schema.EntryPending, tag, 0, 0
	schema.PutEntry(b, seq, en)
	return nil
}

// requeueCounts are the Adds of n outcomes of bytes in all queued again on
// the stream of id: its backlog grows, and its delivered count gives them
// back to pending.
func requeueCounts(id string, n, bytes uint64) []store.Write {
	return []store.Write{
		schema.AddBacklog(id, int64(n), int64(bytes), false),
		schema.UncountDelivered(id, n),
	}
}

// wakeForRows makes the stream's timer fire now for rows this batch adds:
// planWake, for a backlog that the batch itself grows.
func wakeForRows(b *store.Batch, s *streamRead, id string, nowMs int64) {
	if s.timer == nil {
		// Neither the backlog nor the endpoint fence out an ingest that
		// also read no timer and would create a second one: the sequence
		// does.
		b.Guard(schema.ClassBacklog.Key(id), s.backlog.raw, s.backlog.found)
		_ = s.fence(b)
		b.Put(timers.Key(nowMs, timers.KindOutcomeDelivery, id), timers.EncodeIdle(nil))
		return
	}
	planWake(b, s, id, nowMs)
}

// Erased is what an erasure removed.
type Erased struct {
	// Dropped names the endpoints on which the outcome was still pending.
	Dropped []string
}

// EraseWait bounds how long Erase waits for the fires that hold its
// outcome's streams: a fire's calls end within 15 s, most within
// milliseconds.
const EraseWait = 16 * time.Second

// Erase removes the outcome rid from the namespace at once, whatever its
// retention: its log row, every stream's attempt row and pending row (a
// pending one counted dropped), in one batch guarded by the log row, and
// its seen row keeps only its digest, so the reservation id still answers
// duplicate or conflict for its window.
//
// A fire holds the rows of its page in memory while it calls, so an
// erasure that landed mid-fire could be followed by a call of the row it
// erased. Erase therefore waits while a live lease holds a stream that has
// the outcome pending, and guards each such stream's timer as read: a fire
// that claims it first fails the erasure, which then waits for it. Once
// Erase answers, no fire sends the outcome. Past EraseWait it gives up
// with ErrBusy.
func (a *Admin) Erase(ctx context.Context, p store.Partition, rid string) (Erased, error) {
	var waited time.Duration
	for tries := 0; tries < adminRetries; {
		lo, err := a.findLogged(ctx, p, rid)
		if err != nil {
			return Erased{}, err
		}
		seen, err := schema.DecodeSeen(lo.seen.raw)
		if err != nil {
			return Erased{}, err
		}
		seen.Logged, seen.Seq = false, 0
		// A writer tag of this call's own, by which it knows its write.
		if _, err := rand.Read(seen.Writer[:]); err != nil {
			return Erased{}, fmt.Errorf("erase %s/%s: %w", p, rid, err)
		}
		digestOnly, err := schema.EncodeSeen(seen)
		if err != nil {
			return Erased{}, err
		}
		all, err := timers.All(ctx, a.Store, p)
		if err != nil {
			return Erased{}, err
		}
		nowMs := a.Clock.Now().UnixMilli()
		var b store.Batch
		b.Settles = true
		b.RequireEquals(schema.LogKey(lo.seq), lo.raw)
		b.RequireEquals(schema.ClassSeen.Key(rid), lo.seen.raw)
		b.Delete(schema.LogKey(lo.seq))
		b.Put(schema.ClassSeen.Key(rid), digestOnly)
		var out Erased
		busy := false
		for _, en := range lo.row.Entries {
			b.Delete(schema.AttemptKeyOf(en.Endpoint, rid))
			if en.State != schema.EntryPending {
				continue
			}
			if t := streamTimer(all, en.Endpoint); t != nil {
				// The key of a leased row is its lease's expiry.
				busy = busy || t.Lease != nil && t.DueAtMs > nowMs
				b.RequireEquals(t.Key, t.Raw)
			}
			out.Dropped = append(out.Dropped, en.Endpoint)
			b.Delete(schema.PendingKeyOf(en.Endpoint, lo.seq, rid))
			b.Writes = append(b.Writes,
				schema.AddBacklog(en.Endpoint, -1, -int64(len(lo.row.Record)), true),
				schema.AddCounters(en.Endpoint, schema.Counters{Dropped: 1}))
		}
		if busy {
			if waited >= EraseWait {
				return Erased{}, ErrBusy
			}
			d := min(max(2*waited, eraseWaitBase), eraseWaitMax)
			if err := a.wait(ctx, d); err != nil {
				return Erased{}, err
			}
			waited += d
			continue
		}
		seenKey := schema.ClassSeen.Key(rid)
		ok, err := a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.holds(ctx, p, seenKey, digestOnly) })
		if err != nil {
			return Erased{}, err
		}
		if ok {
			return out, nil
		}
		tries++
	}
	return Erased{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// Pauses of an erasure waiting for fires: short at first, as most fires
// end within milliseconds.
const (
	eraseWaitBase = 2 * time.Millisecond
	eraseWaitMax  = 250 * time.Millisecond
)

// took reports whether the outcome at seq, accepted at acceptedMs, was
// accepted while endpoint e existed: an entry under its id in an older log
// row is an earlier endpoint's of the same id.
func took(e *schema.Endpoint, seq uint64, acceptedMs int64) bool {
	if e.CreatedSeq > 0 {
		return seq >= e.CreatedSeq
	}
	return e.CreatedMs <= acceptedMs
}
