package outbox

import (
	"bytes"
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// MaxPendingPage bounds one page of Admin.Pending.
const MaxPendingPage = 100

// PendingRow is one row waiting on a stream, as operators see it.
type PendingRow struct {
	RID string
	Seq uint64
	// Kind and OccurredUnixMs come from the record; zero when Corrupt.
	Kind           schema.Kind
	OccurredUnixMs int64
	// Attempts are the row's last attempts and their total; empty when
	// none was recorded yet. A pending row's attempts all failed.
	Attempts schema.Attempts
	// Corrupt: the record or attempt row does not decode. The delivery
	// driver keeps and skips such a row.
	Corrupt bool
}

// PendingPage is one page of a stream's pending rows in sequence order.
type PendingPage struct {
	Stream
	Rows []PendingRow
	// Next resumes after the page's last row; nil when no row follows.
	Next []byte
}

// Pending reads up to limit pending rows of the stream of endpoint id, after
// the position next of an earlier page (nil for the head), with the stream's
// backlog and timer. A position that is not one of the stream's is invalid.
func (a *Admin) Pending(ctx context.Context, p store.Partition, id string, after []byte, limit int) (PendingPage, error) {
	if limit < 1 || limit > MaxPendingPage {
		return PendingPage{}, invalidf("limit must be 1 to %d", MaxPendingPage)
	}
	st, err := a.Endpoint(ctx, p, id)
	if err != nil {
		return PendingPage{}, err
	}
	start, end, err := schema.PendingRange(id)
	if err != nil {
		return PendingPage{}, err
	}
	var cur *store.Cursor
	if after != nil {
		if bytes.Compare(after, []byte(start)) < 0 || bytes.Compare(after, []byte(end)) >= 0 {
			return PendingPage{}, invalidf("cursor is not a position of this endpoint's outbox")
		}
		cur = store.NewCursor(after)
	}
	head, err := a.head(ctx, p, id)
	if err != nil {
		return PendingPage{}, err
	}
	page, err := readQueueRows(ctx, a.Store, p, id, head, cur, limit, pendingPages)
	if err != nil {
		return PendingPage{}, err
	}
	out := PendingPage{Stream: st, Rows: make([]PendingRow, 0, len(page.Rows))}
	refs := make([]StreamRef, 0, len(page.Rows))
	for _, q := range page.Rows {
		if q.Corrupt && !q.Logged {
			return PendingPage{}, fmt.Errorf("pending row of %s/%s: %w", p, id, corruptf("bad pending key"))
		}
		out.Rows = append(out.Rows, PendingRow{RID: q.RID, Seq: q.Seq, Corrupt: q.Corrupt})
		if !q.Corrupt {
			refs = append(refs, StreamRef{Seq: q.Seq, RID: q.RID, Logged: q.Logged})
		}
	}
	rows, err := readStreamRowsChunked(ctx, a.Store, p, id, refs)
	if err != nil {
		return PendingPage{}, err
	}
	for i := range out.Rows {
		r := &out.Rows[i]
		if r.Corrupt {
			// Its log row does not decode: shown by its place alone.
			continue
		}
		got := rows[0]
		rows = rows[1:]
		if got.Found && got.Err == nil {
			r.Kind, r.OccurredUnixMs = got.Outcome.Kind(), got.Outcome.OccurredUnixMs
		} else {
			r.Corrupt = true
		}
		if got.AttemptsErr != nil {
			r.Corrupt = true
		} else {
			r.Attempts = got.Attempts
		}
	}
	if page.Next != nil {
		out.Next = page.Next.Bytes()
	}
	return out, nil
}

// pendingPages bounds the queue pages one outbox view reads to fill
// itself: a page of log rows of other streams lists none, and an
// operator's view must not look empty while the stream's rows are further
// on. It may still come back short, with a Next.
const pendingPages = 8

// Replayed is where a replay put a stream.
type Replayed struct {
	Seq     uint64
	DueAtMs int64
}

// Replay makes the stream's next fire start at the pending row rid, now: in
// one guarded batch the stream's timer is set due now with its backoff
// reset and its cursor just before the row, the rest of its state kept
// (replayState; a corrupt timer is replaced; a missing one created). The row is tried first; the rows after it follow,
// then those before. A row that is not pending is ErrNotPending; a disabled
// endpoint ErrDisabled; a stream a fire holds this instant ErrBusy. A
// synthetic reservation id is ErrInvalid, as at ingest: such a row is
// acknowledged without a call, so it is never stuck.
func (a *Admin) Replay(ctx context.Context, p store.Partition, id, rid string) (Replayed, error) {
	if err := ValidateClientReservationID(rid); err != nil {
		return Replayed{}, err
	}
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return Replayed{}, err
		}
		if s.ep == nil {
			return Replayed{}, ErrNotFound
		}
		if !s.ep.ep.Enabled {
			if s.ep.ep.DisabledReason == ReasonDeleting {
				return Replayed{}, ErrDeleting
			}
			return Replayed{}, ErrDisabled
		}
		q, found, err := a.findPending(ctx, p, id, rid, s.headAt)
		if err != nil {
			return Replayed{}, err
		}
		if !found {
			return Replayed{}, ErrNotPending
		}
		seq := q.seq
		nowMs := a.Clock.Now().UnixMilli()
		state, err := schema.EncodeDeliveryState(replayState(s.timer, id, seq))
		if err != nil {
			return Replayed{}, err
		}
		var b store.Batch
		b.RequireEquals(s.ep.key, s.ep.raw)
		q.guard(&b, id, rid)
		switch t := s.timer; {
		case t == nil:
			// Neither the backlog nor the endpoint changes here, so they do
			// not fence out an ingest or another Replay that also read no
			// timer and would create a second one: the sequence does.
			b.Guard(schema.ClassBacklog.Key(id), s.backlog.raw, s.backlog.found)
			if err := s.fence(&b); err != nil {
				return Replayed{}, err
			}
			b.Put(timers.Key(nowMs, timers.KindOutcomeDelivery, id), timers.EncodeIdle(state))
		case t.Lease != nil:
			return Replayed{}, ErrBusy
		default:
			// Replace guards the row as read, corrupt or not.
			t.Replace(&b, nowMs, state)
			MarkStream(&b, id, s.ep.key, s.ep.raw, true, timerFailing(t), false)
		}
		ok, err := a.apply(ctx, p, b)
		if err != nil {
			return Replayed{}, err
		}
		if ok {
			return Replayed{Seq: seq, DueAtMs: nowMs}, nil
		}
	}
	return Replayed{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// replayState is the stream's delivery state with a replay's position
// and its backoff reset: the cursor just before the row at seq, no failed
// fires, and no later due time an appending fire would keep for its
// events. The rest is the stream's own and stays: its token bucket and
// throttle, so the endpoint's limits hold across a replay, and its health,
// with the operator events not yet appended. A state that does not decode
// is replaced by a fresh one.
func replayState(t *timers.Row, id string, seq uint64) schema.DeliveryState {
	var st schema.DeliveryState
	if t != nil && t.Err == nil {
		if got, err := schema.DecodeDeliveryState(t.State); err == nil {
			st = got
		}
	}
	st.Cursor, st.FailedFires = pendingCursorBefore(id, seq), 0
	if st.Health != nil {
		h := *st.Health
		h.ResumeMs = 0
		st.Health = &h
	}
	return st
}

// queued is where findPending found a row of a stream's queue: its
// sequence number, and, when its log entry alone queues it, the entry as
// read.
type queued struct {
	seq    uint64
	logged bool
	entry  schema.LogEntry
}

// guard guards the row as found: its pending row, or its log entry.
func (q queued) guard(b *store.Batch, id, rid string) {
	if q.logged {
		schema.RequireEntry(b, q.seq, q.entry)
		return
	}
	b.RequireEquals(schema.PendingKeyOf(id, q.seq, rid), store.Value{})
}

// findPending finds the row rid of the stream's queue. The seen row names
// its sequence number: the row is queued when its pending row is there,
// or, at or after the head, when its log entry is pending.
func (a *Admin) findPending(ctx context.Context, p store.Partition, id, rid string, head schema.Head) (queued, bool, error) {
	v, found, err := a.Store.Get(ctx, p, schema.ClassSeen.Key(rid))
	if err != nil {
		return queued{}, false, fmt.Errorf("read %s/%s: %w", p, rid, err)
	}
	if !found {
		return queued{}, false, nil
	}
	seen, err := schema.DecodeSeen(v)
	if err != nil || !seen.Logged {
		return queued{}, false, nil
	}
	got, err := a.Store.GetMany(ctx, p, []store.Key{schema.PendingKeyOf(id, seen.Seq, rid), schema.LogKey(seen.Seq)})
	if err != nil {
		return queued{}, false, fmt.Errorf("read %s/%s: %w", p, rid, err)
	}
	if got[0].Found {
		return queued{seq: seen.Seq}, true, nil
	}
	if head.Found && seen.Seq >= head.Seq && got[1].Found {
		if l, err := schema.DecodeLog(got[1].Value); err == nil && l.RID == rid {
			if en, ok := l.Entry(id); ok && en.State == schema.EntryPending {
				return queued{seq: seen.Seq, logged: true, entry: en}, true, nil
			}
		}
	}
	return queued{}, false, nil
}

// head reads the stream's head; one that does not decode reads as none,
// as delivery reads it.
func (a *Admin) head(ctx context.Context, p store.Partition, id string) (schema.Head, error) {
	v, found, err := a.Store.Get(ctx, p, schema.ClassHead.Key(id))
	if err != nil {
		return schema.Head{}, fmt.Errorf("read head of %s/%s: %w", p, id, err)
	}
	h, _ := schema.HeadOf(store.Row{Value: v, Found: found})
	return h, nil
}

// pendingCursorBefore is a cursor that resumes a scan of the stream at the
// pending row of sequence number seq: the row's key without its id sorts
// after every row of a lower sequence number and before the row itself.
func pendingCursorBefore(endpoint string, seq uint64) *store.Cursor {
	return store.CursorAfter(schema.PendingKeyOf(endpoint, seq, ""))
}
