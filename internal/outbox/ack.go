package outbox

import (
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// MaxAcksPerBatch is the most rows one acknowledgement plan may hold. A plan
// of n rows costs at most 4n+5 operations (AckOps), which leaves room in
// the batch for the timer runner's completion (guard, delete and put of
// the timer row) and, for a 410, the endpoint's guard and disable. A failed
// call's attempt row takes one acknowledgement's place (four operations),
// and the fire's count of failed calls joins the plan's Adds, or, counted
// in another minute than the acknowledgements, adds MinuteOps; a fire's
// head move (MoveHead, one Put) and its kept rows (Keep, two operations
// each, refused rows only) add at most 1+2f. For f failed calls that is
// 4(n-f)+5 + f + MinuteOps + 5 + 1 + 2f = 4n+13-f, and 4n+11 for none:
// n = (MaxBatchOps-12)/4 fits every f.
const MaxAcksPerBatch = (store.MaxBatchOps - 12) / 4

// AckOps is the most batch operations a plan of n acknowledged rows adds:
// four per row (the pending row's guard, its deletion, its log entry's
// rewrite and its attempt row's deletion; three for a row the log alone
// queues, whose entry's guard stands for the pending row's; or, for the last stream of a log
// row kept for no retention, the row's guard and the deletion of it, the
// pending and the attempt rows), for the backlog its guard and deletion when the plan acknowledges every
// row it counts, or one relative update when rows remain, one Add to
// the stream's counters, and MinuteOps for its minute (minutes.go).
func AckOps(n int) int { return 4*n + 3 + MinuteOps }

// Acks plans the acknowledgement of delivered rows of one stream, against a
// backlog read after the deliveries. A plan that leaves rows subtracts from
// the backlog (store.Add) rather than writing the count it read under a
// guard of that read: ingest adds to the backlog with every outcome, so
// under steady ingest such a guard would keep failing and the delivered
// rows would be sent again. Only the plan that
// acknowledges every row it counts, after which the stream's timer is done,
// is guarded by the backlog as read: an outcome accepted since must fail it,
// or its row would be left without a timer.
type Acks struct {
	endpoint   string
	backlogKey store.Key
	raw        store.Value
	found      bool
	backlog    schema.Backlog
	rows       []ackRow
	bytes      uint64
	rids       map[string]struct{}
	// dropped counts the rows of a forced delete (drop), which the
	// counters tell from the delivered ones.
	dropped uint64
	// Retain keeps each row's log entry, and its attempt row, for the
	// retention window; false deletes them with the pending row.
	Retain bool
	// StayEmpty leaves a backlog the plan empties at zero rather than
	// deleting it, for a stream whose timer stays (timers.Fired.Stay): the
	// next ingest adds to a row that stands.
	StayEmpty bool
	// kept are rows read from the log that get a pending row (Keep), and
	// head the head the plan moves the stream to (MoveHead).
	kept []ackRow
	head *uint64
}

type ackRow struct {
	rid  string
	seq  uint64
	rec  StreamRecord
	done Done
	// unreadable: a row of the log's queue whose log row does not decode,
	// dropped by a forced delete. It has no row to guard or write; the
	// head the drop moves past it, guarded, makes the batch apply once.
	unreadable bool
}

// Done is how a row's delivery ended, kept in its log entry.
type Done struct {
	AtMs       int64
	DurationMs uint32
	Status     uint16
}

// NewAcks starts a plan for the stream of endpoint, given its backlog row as
// just read (found false when absent). A corrupt backlog is an error.
func NewAcks(endpoint string, backlog store.Value, found bool) (*Acks, error) {
	key, err := schema.BacklogKey(endpoint)
	if err != nil {
		return nil, err
	}
	b, err := schema.BacklogOf(backlog, found)
	if err != nil {
		return nil, fmt.Errorf("backlog of endpoint %s: %w", endpoint, err)
	}
	return &Acks{endpoint: endpoint, backlogKey: key, raw: backlog, found: found, backlog: b, rids: map[string]struct{}{}}, nil
}

// Add acknowledges the pending row (seq, rid) whose outcome was read as
// rec, delivered as done says. The pending row is guarded rather than the
// log row, which other streams' entries share: a row acknowledged elsewhere
// and accepted again gets a new sequence number, so the guard fails even
// when the new record's bytes equal the old. A row the backlog does not
// count (more rows than it holds), a repeated rid or a missing record is
// refused with an error and leaves the plan as it was; the caller keeps
// that row.
func (a *Acks) Add(rid string, seq uint64, rec StreamRecord, done Done) error {
	return a.add(rid, seq, rec, done, false)
}

// drop is Add for a forced delete: a row whose record is missing, which
// delivery keeps and skips, is dropped as well, counting no bytes.
func (a *Acks) drop(rid string, seq uint64, rec StreamRecord, atMs int64) error {
	if err := a.add(rid, seq, rec, Done{AtMs: atMs}, true); err != nil {
		return err
	}
	a.dropped++
	return nil
}

// dropUnreadable drops the row of the log's queue at seq whose log row does
// not decode: it counts as dropped, and the caller moves the head past it.
func (a *Acks) dropUnreadable(seq uint64) error {
	if uint64(len(a.rows)) >= a.backlog.Rows {
		return fmt.Errorf("drop %s at %d: %w of %d rows", a.endpoint, seq, ErrBacklogUnderflow, a.backlog.Rows)
	}
	a.rows = append(a.rows, ackRow{seq: seq, unreadable: true})
	a.dropped++
	return nil
}

func (a *Acks) add(rid string, seq uint64, rec StreamRecord, done Done, recordless bool) error {
	if err := schema.ValidateReservationID(rid); err != nil {
		return err
	}
	record := rec.Record
	if len(record) == 0 && !recordless {
		return fmt.Errorf("acknowledge %s/%s: no record", a.endpoint, rid)
	}
	if rec.logged && (rec.seq != seq || rec.row.RID != rid) {
		return fmt.Errorf("acknowledge %s/%s: log row of another outcome", a.endpoint, rid)
	}
	if _, dup := a.rids[rid]; dup {
		return fmt.Errorf("acknowledge %s/%s: acknowledged twice", a.endpoint, rid)
	}
	if uint64(len(a.rows)) >= a.backlog.Rows {
		return fmt.Errorf("acknowledge %s/%s: %w of %d rows", a.endpoint, rid, ErrBacklogUnderflow, a.backlog.Rows)
	}
	a.rids[rid] = struct{}{}
	a.rows = append(a.rows, ackRow{rid: rid, seq: seq, rec: rec, done: done})
	a.bytes += uint64(len(record))
	return nil
}

// Keep gives a row that its log entry alone queues (QueueRow.Logged) a
// pending row, so that the stream's head can move past it while it stays
// queued: a row refused while the rows behind it were delivered. It is
// guarded by the entry as read and costs two operations.
func (a *Acks) Keep(rid string, seq uint64, rec StreamRecord) error {
	if !rec.queued || rec.seq != seq || rec.row.RID != rid {
		return fmt.Errorf("keep %s/%s: not a row of the log's queue", a.endpoint, rid)
	}
	a.kept = append(a.kept, ackRow{rid: rid, seq: seq, rec: rec})
	return nil
}

// MoveHead moves the stream's head to seq: one operation. The caller owns
// the stream (its lease) and has read, from the head, every row before seq:
// each is done, kept, or not the stream's.
func (a *Acks) MoveHead(seq uint64) { a.head = &seq }

// Kept is the number of rows Keep planned.
func (a *Acks) Kept() int { return len(a.kept) }

// planQueue adds the kept rows and the head move to b.
func (a *Acks) planQueue(b *store.Batch) {
	for _, r := range a.kept {
		schema.RequireEntry(b, r.seq, r.rec.entry)
		b.Put(schema.PendingKeyOf(a.endpoint, r.seq, r.rid), store.Value{})
	}
	if a.head != nil {
		b.Put(schema.ClassHead.Key(a.endpoint), schema.EncodeHead(*a.head))
	}
}

// Len is the number of rows acknowledged.
func (a *Acks) Len() int { return len(a.rows) }

// Backlog is the backlog as read.
func (a *Acks) Backlog() schema.Backlog { return a.backlog }

// Remaining is the backlog the plan leaves, as read: rows reaching 0 means
// every row is acknowledged and the stream's timer may be done. A plan that
// leaves rows may leave more, accepted since the read. Bytes are a gauge and
// saturate at 0 rather than refusing a plan over an accounting drift.
func (a *Acks) Remaining() schema.Backlog {
	r := schema.Backlog{Rows: a.backlog.Rows - uint64(len(a.rows))}
	if a.bytes < a.backlog.Bytes {
		r.Bytes = a.backlog.Bytes - a.bytes
	}
	return r
}

// Plan adds the plan to b and marks it a settling batch: it only deletes and
// shrinks, so it must run on a full store. It costs at most AckOps(Len())
// operations:
//   - no row acknowledged: the backlog guard as read, and the deletion of a
//     backlog row that counts none;
//   - every row the backlog counts acknowledged: the backlog guard as read,
//     per row the four operations AckOps counts, then the backlog's
//     deletion;
//   - else the same rows, then the backlog reduced by the rows and bytes
//     acknowledged, relative to whatever it holds when the batch applies, with
//     no guard on it: ingest only adds to it, and may do so meanwhile. The
//     bytes stop at 0; the rows refuse the batch below it.
//
// A plan that acknowledges rows ends with one Add to the stream's counters
// (the rows delivered, or dropped by a forced delete) and, for delivered
// rows, one to the minute the last of them was delivered in, with the
// deletion of that stream's minute an hour back (minuteWrites). A fire's
// count of failed calls joins those Adds (timers merges its notes' Adds into
// the batch's).
//
// A batch resent after a lost reply finds the pending rows its first run
// deleted and fails their guards, so the reduction and the counts apply
// once.
func (a *Acks) Plan(b *store.Batch) {
	b.Settles = true
	a.planQueue(b)
	if len(a.rows) == 0 {
		b.Guard(a.backlogKey, a.raw, a.found)
		if a.found && a.backlog.Rows == 0 {
			b.Delete(a.backlogKey)
		}
		return
	}
	rest := a.Remaining()
	if rest.Rows == 0 {
		b.Guard(a.backlogKey, a.raw, a.found)
	}
	state := schema.EntryDelivered
	if a.dropped > 0 {
		state = schema.EntryDropped
	}
	for _, r := range a.rows {
		switch {
		case r.unreadable:
		case a.last(r):
			// Its first run deletes the log row: a resend fails this guard.
			b.RequireEquals(schema.LogKey(r.seq), r.rec.log)
		case r.rec.queued:
			// Its first run rewrites the entry.
			schema.RequireEntry(b, r.seq, r.rec.entry)
		default:
			b.RequireEquals(schema.PendingKeyOf(a.endpoint, r.seq, r.rid), store.Value{})
		}
	}
	for _, r := range a.rows {
		if r.unreadable {
			continue
		}
		if !r.rec.queued {
			b.Delete(schema.PendingKeyOf(a.endpoint, r.seq, r.rid))
		}
		switch {
		case !r.rec.logged:
			// Its record is gone (a forced drop): no log entry to change.
		case a.last(r):
			b.Delete(schema.LogKey(r.seq))
		default:
			e := r.rec.entry
			e.State, e.AtMs, e.DurationMs, e.Status = state, max(r.done.AtMs, 0), r.done.DurationMs, r.done.Status
			// A dropped row's attempts go with its endpoint.
			e.Attempts = a.Retain && state == schema.EntryDelivered && r.rec.HasAttempts
			schema.PutEntry(b, r.seq, e)
		}
		if !a.Retain || state == schema.EntryDropped || !r.rec.logged {
			b.Delete(schema.AttemptKeyOf(a.endpoint, r.rid))
		}
	}
	switch {
	case rest.Rows == 0 && a.StayEmpty:
		b.Put(a.backlogKey, schema.EncodeBacklog(schema.Backlog{}))
	case rest.Rows == 0:
		b.Delete(a.backlogKey)
	default:
		// The rows count exactly, so one below 0 is a bug and refuses the
		// batch; the bytes are a gauge and stop at 0, so a drift in them (or
		// plans of other rows landing first) never wedges the stream.
		b.Writes = append(b.Writes, schema.AddBacklog(a.endpoint, -int64(len(a.rows)), -int64(a.bytes), true))
	}
	n := uint64(len(a.rows))
	b.Writes = append(b.Writes, schema.AddCounters(a.endpoint, schema.Counters{Delivered: n - a.dropped, Dropped: a.dropped}))
	if delivered := n - a.dropped; delivered > 0 {
		b.Writes = append(b.Writes, minuteWrites(a.endpoint, a.lastDoneMs(), delivered, 0)...)
	}
}

// lastDoneMs is when the plan's last row was delivered: the minute its
// rows count in. A plan's rows end within one fire, so they are at most a
// fire's bound apart.
func (a *Acks) lastDoneMs() int64 {
	at := int64(-1)
	for _, r := range a.rows {
		at = max(at, r.done.AtMs)
	}
	return at
}

// last reports whether the plan deletes r's log row: nothing is retained
// and no other stream waits on it as read.
func (a *Acks) last(r ackRow) bool {
	return r.rec.logged && !a.Retain && !r.rec.row.PendingElsewhere(a.endpoint)
}
