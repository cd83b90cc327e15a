package outbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// A stream's queue is its log entries in state pending, in sequence order. A
// stream with a head row (schema.ClassHead) reads the part of its queue at
// and after the head from the log itself: ingest writes such a stream no
// pending row, so an outcome to 8 endpoints is one log row rather than one
// row per stream beside it. Below the head every pending entry has a
// pending row: the head moves only past rows that are done, or that a
// fire kept by writing their pending row (a row refused while the rows
// behind it were delivered). A pending row may also exist at or above the
// head (a resend writes one wherever its row is); the queue lists such a
// row once. A stream gets its head row at the first row ingest writes it;
// until then every row it has pending has a pending row.

// QueueRow is one row of a stream's queue.
type QueueRow struct {
	// Key is the row's pending key, whether or not that row exists: a
	// cursor after it resumes after the row.
	Key store.Key
	Seq uint64
	// RID is empty when Corrupt.
	RID string
	// Logged: the row has no pending row; its log entry alone queues it.
	Logged bool
	// Corrupt: its pending key does not parse, or its log row does not
	// decode. It is listed so that it is seen, and holds the head.
	Corrupt bool
	// Log is its log row as the page read it, when Logged and not
	// Corrupt: StreamRef.Log, so the fire does not read it twice.
	Log store.Value
}

// QueuePage is a page of a stream's queue in sequence order.
type QueuePage struct {
	Rows []QueueRow
	// Next resumes after the page, nil at the end of the queue. A page may
	// be empty and still have a Next: the log rows it examined held
	// nothing of this stream.
	Next *store.Cursor
	// FromHead: the page read the log from the stream's head, so what it
	// examined there, up to LogEnd, is all of the queue in that range.
	FromHead bool
	// LogEnd is the sequence number after the last log row the page
	// examined: up to it, a fire that read FromHead and finished every
	// row may move the head.
	LogEnd uint64
}

// Cursor is the cursor after row i of the page.
func (q QueuePage) Cursor(i int) *store.Cursor { return store.CursorAfter(q.Rows[i].Key) }

// QueueLogRows is how many log rows a page examines at most per row it
// lists: log rows of a stream's filter, or of other streams, cost a read
// but are not the stream's.
const QueueLogRows = 2

// QueueLogSlack is how many log rows past its limit a dense page examines
// (ReadQueueTo): rows from the head on that the stream is already done with.
const QueueLogSlack = 8

// ReadQueue reads up to limit rows of the stream's queue after the cursor
// (from its start when nil): its pending rows, and, once they end, its log
// entries from max(head, cursor), at most QueueLogRows*limit (at least 8)
// log rows of them. Both are read at once, in one round trip on a
// store.MultiReader: the log's part goes unused when the pending rows
// fill the page.
func ReadQueue(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, head schema.Head, after *store.Cursor, limit int) (QueuePage, error) {
	return ReadQueueTo(ctx, st, p, endpoint, head, after, limit, 0, false)
}

// ReadQueueTo is ReadQueue reading the log only up to sequence number to,
// when to is not 0: a reader that knows the log's last row reads no further
// keys. The page ends there, with no Next, as though the queue did.
//
// A dense page is of a stream whose endpoint takes every outcome kind
// (Endpoint.TakesAll), so that nearly every log row from its head is its
// own: it examines limit+QueueLogSlack log rows rather than
// QueueLogRows*limit, when fewer; at a full page of a fire that is most of
// the read's cost. A
// page that examined rows not the stream's lists fewer and has a Next, as
// any page does.
func ReadQueueTo(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, head schema.Head, after *store.Cursor, limit int, to uint64, dense bool) (QueuePage, error) {
	page, _, err := ReadQueueWith(ctx, st, p, endpoint, head, after, limit, to, dense, nil)
	return page, err
}

// ReadQueueWith is ReadQueueTo that also reads the rows of keys at the
// same instant: a fire reads its endpoint with its queue, so that no row
// it sends was accepted after an edit of the endpoint it did not see.
func ReadQueueWith(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, head schema.Head, after *store.Cursor, limit int, to uint64, dense bool, keys []store.Key) (QueuePage, []store.Row, error) {
	start, end, err := schema.PendingRange(endpoint)
	if err != nil {
		return QueuePage{}, nil, err
	}
	reads := []store.Read{{Start: start, End: end, After: after, Limit: limit}}
	if len(keys) > 0 {
		reads = append(reads, store.Read{Keys: keys})
	}
	from := head.Seq
	if head.Found {
		if pos, ok := queuePos(endpoint, after); ok && pos > from {
			from = pos
		}
		_, logEnd := schema.LogRange()
		if to != 0 && to < math.MaxUint64 {
			logEnd = schema.LogKey(max(to+1, from))
		}
		logRows := QueueLogRows * limit
		if dense {
			logRows = min(limit+QueueLogSlack, logRows)
		}
		reads = append(reads, store.Read{Start: schema.LogKey(from), End: logEnd, Limit: max(logRows, 8)})
	}
	res, err := store.ReadMany(ctx, st, p, reads)
	if err != nil {
		return QueuePage{}, nil, fmt.Errorf("read queue of %s/%s: %w", p, endpoint, err)
	}
	var rows []store.Row
	if len(keys) > 0 {
		rows = res[1].Rows
		res = append(res[:1], res[2:]...)
	}
	page := res[0].Page
	var out QueuePage
	pending := make(map[uint64]bool, len(page.Entries))
	for _, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassPending || pk.Endpoint != endpoint {
			out.Rows = append(out.Rows, QueueRow{Key: e.Key, Corrupt: true})
			continue
		}
		out.Rows = append(out.Rows, QueueRow{Key: e.Key, Seq: pk.Seq, RID: pk.RID})
		pending[pk.Seq] = true
	}
	if page.Next != nil || !head.Found {
		out.Next = page.Next
		return out, rows, nil
	}
	out.FromHead, out.LogEnd = from == head.Seq, from
	logPage := res[1].Page
	more := logPage.Next != nil
	logged := 0
	for _, e := range logPage.Entries {
		if logged == limit {
			more = true
			break
		}
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassLog {
			continue
		}
		out.LogEnd = pk.Seq + 1
		l, err := schema.DecodeLog(e.Value)
		if err != nil {
			out.Rows = append(out.Rows, QueueRow{Key: schema.PendingKeyOf(endpoint, pk.Seq, ""), Seq: pk.Seq, Logged: true, Corrupt: true})
			logged++
			continue
		}
		en, ok := l.Entry(endpoint)
		if !ok || en.State != schema.EntryPending || pending[pk.Seq] {
			continue
		}
		out.Rows = append(out.Rows, QueueRow{Key: schema.PendingKeyOf(endpoint, pk.Seq, l.RID), Seq: pk.Seq, RID: l.RID, Logged: true, Log: e.Value})
		logged++
	}
	// Pending rows at or above the head (resends) and log rows interleave
	// by sequence number; those past what the log part examined wait for
	// a later page, whose cursor must not pass the log rows between.
	slices.SortStableFunc(out.Rows, func(a, b QueueRow) int { return cmp.Compare(a.Seq, b.Seq) })
	if more {
		out.Rows = slices.DeleteFunc(out.Rows, func(r QueueRow) bool { return r.Seq >= out.LogEnd })
	}
	if len(out.Rows) > limit {
		out.Rows, more = out.Rows[:limit], true
		out.LogEnd = min(out.LogEnd, out.Rows[limit-1].Seq+1)
	}
	if more {
		out.Next = store.CursorAfter(queueMark(endpoint, out.LogEnd-1))
	}
	return out, rows, nil
}

// QueuePrefix is rows of a stream's queue read over as many pages as it
// took.
type QueuePrefix struct {
	Rows []QueueRow
	// Next resumes after the rows, nil at the end of the queue.
	Next *store.Cursor
	// FromHead and End are QueuePage's FromHead and LogEnd for all the
	// rows: once every row is done, the head may move to End.
	FromHead bool
	End      uint64
}

// queuePrefixPages bounds the pages ReadQueuePrefix reads: a stream whose
// filter takes few of the log's rows may find fewer than it asks for.
const queuePrefixPages = 64

// ReadQueuePrefix reads the first n rows of the stream's queue from its
// start, page after page, at most queuePrefixPages of them.
func ReadQueuePrefix(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, head schema.Head, n int) (QueuePrefix, error) {
	return readQueueRows(ctx, st, p, endpoint, head, nil, n, queuePrefixPages)
}

// readQueueRows reads up to n rows of the stream's queue after the cursor,
// over at most pages pages, each asked for the rows still wanted.
func readQueueRows(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, head schema.Head, after *store.Cursor, n, pages int) (QueuePrefix, error) {
	var out QueuePrefix
	for i := 0; len(out.Rows) < n && i < pages; i++ {
		page, err := ReadQueue(ctx, st, p, endpoint, head, after, n-len(out.Rows))
		if err != nil {
			return QueuePrefix{}, err
		}
		if i == 0 {
			out.FromHead = head.Found && page.FromHead
		}
		out.Rows, out.Next, out.End = append(out.Rows, page.Rows...), page.Next, page.LogEnd
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	return out, nil
}

// QueueFrom is the cursor from which a stream's queue resumes at seq: its
// pending rows of seq on, and its log from seq when seq is past the head.
func QueueFrom(endpoint string, seq uint64) *store.Cursor {
	if seq == 0 {
		return nil
	}
	return store.CursorAfter(queueMark(endpoint, seq-1))
}

// queueMark is a key in the stream's pending range after every pending
// key of seq and before those of seq+1: rids are printable ASCII.
func queueMark(endpoint string, seq uint64) store.Key {
	return schema.PendingKeyOf(endpoint, seq, "\xff")
}

// queuePos is the first sequence number a cursor in the stream's pending
// range resumes at; false for no cursor, or one outside the range.
func queuePos(endpoint string, c *store.Cursor) (uint64, bool) {
	if c == nil {
		return 0, false
	}
	prefix := string(schema.ClassPending) + endpoint + "/"
	k := string(c.After())
	if !strings.HasPrefix(k, prefix) || len(k) < len(prefix)+8 {
		return 0, false
	}
	seq := binary.BigEndian.Uint64([]byte(k[len(prefix) : len(prefix)+8]))
	if len(k) == len(prefix)+8 || seq == math.MaxUint64 {
		// Before any pending key of seq, so at seq; or past the last.
		return seq, true
	}
	return seq + 1, true
}

// ReadArrived reads what the stream's queue holds among the log rows at
// refs' sequence numbers, consecutive, each with the rid the ingest that
// appended it gave it, and the outcomes and attempt rows of those it
// lists: both in one round trip, with no scan. It is for rows appended
// after a read of the queue from the stream's head found its end: no such
// row was ever delivered to the stream, so no resend wrote it a pending
// row, and its log entry alone queues it. The page lists, in sequence
// order and up to limit, each row whose entry for the stream is pending,
// and, Corrupt, each whose log row does not decode or holds another rid;
// rows[i] is page.Rows[i]'s, unset for a corrupt one. A row absent (every
// stream that took it is done with it) or not the stream's is passed.
// LogEnd is after the last row examined; Next resumes there when the
// limit cut the page short, and is nil otherwise. A Fresh ref is taken as
// it is, with no read: a completion guards its log row all the same.
func ReadArrived(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, refs []StreamRef, limit int) (QueuePage, []StreamRow, error) {
	return ReadArrivedUnder(ctx, st, p, endpoint, nil, refs, limit)
}

// ReadArrivedUnder is ReadArrived for a reader that holds the stream's
// endpoint row as ep: it refuses with ErrEndpointEdited, listing nothing,
// unless each row was accepted under that row, as the ingest that
// accepted it tells (StreamRef.Endpoints), or else as read with the rows.
// An outcome accepted after an edit of its endpoint is answered goes as
// the edit says.
func ReadArrivedUnder(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, ep store.Value, refs []StreamRef, limit int) (QueuePage, []StreamRow, error) {
	if len(refs) > store.MaxBatchOps/2 {
		return QueuePage{}, nil, fmt.Errorf("read %d arrived rows at once", len(refs))
	}
	for i := 1; i < len(refs); i++ {
		if refs[i].Seq != refs[i-1].Seq+1 {
			return QueuePage{}, nil, fmt.Errorf("arrived rows %d and %d are not consecutive", refs[i-1].Seq, refs[i].Seq)
		}
	}
	if err := schema.ValidateEndpointID(endpoint); err != nil {
		return QueuePage{}, nil, err
	}
	keys := make([]store.Key, 0, 2*len(refs)+1)
	readEndpoint := false
	for _, r := range refs {
		if !r.fresh() {
			keys = append(keys, schema.LogKey(r.Seq), schema.AttemptKeyOf(endpoint, r.RID))
		}
		if ep == nil {
			continue
		}
		v, ok := r.Endpoints.Row(endpoint)
		switch {
		case r.Endpoints == nil || !r.fresh():
			// Read with the row: an edit before it is seen.
			readEndpoint = true
		case !ok || !bytes.Equal(v, ep):
			return QueuePage{}, nil, ErrEndpointEdited
		}
	}
	if readEndpoint {
		keys = append(keys, schema.ClassEndpoint.Key(endpoint))
	}
	var got []store.Row
	if len(keys) > 0 {
		var err error
		if got, err = st.GetMany(ctx, p, keys); err != nil {
			return QueuePage{}, nil, fmt.Errorf("read arrived rows of %s/%s: %w", p, endpoint, err)
		}
	}
	if readEndpoint {
		if row := got[len(got)-1]; !row.Found || !bytes.Equal(row.Value, ep) {
			return QueuePage{}, nil, ErrEndpointEdited
		}
	}
	var page QueuePage
	var rows []StreamRow
	if len(refs) > 0 {
		page.LogEnd = refs[0].Seq
	}
	for _, r := range refs {
		if len(page.Rows) == limit {
			page.Next = QueueFrom(endpoint, page.LogEnd)
			break
		}
		page.LogEnd = r.Seq + 1
		logRow, attempt := store.Row{Value: r.Log, Found: true}, store.Row{}
		if !r.fresh() {
			logRow, attempt, got = got[0], got[1], got[2:]
		}
		if !logRow.Found {
			continue
		}
		l, err := schema.DecodeLog(logRow.Value)
		if err != nil || l.RID != r.RID {
			page.Rows = append(page.Rows, QueueRow{Key: schema.PendingKeyOf(endpoint, r.Seq, ""), Seq: r.Seq, Logged: true, Corrupt: true})
			rows = append(rows, StreamRow{})
			continue
		}
		if en, ok := l.Entry(endpoint); !ok || en.State != schema.EntryPending {
			continue
		}
		ref := StreamRef{Seq: r.Seq, RID: r.RID, Logged: true, Log: logRow.Value}
		page.Rows = append(page.Rows, QueueRow{Key: schema.PendingKeyOf(endpoint, r.Seq, r.RID), Seq: r.Seq, RID: r.RID, Logged: true, Log: logRow.Value})
		var sr StreamRow
		if attempt.Found {
			sr.Attempts, sr.AttemptsErr = schema.DecodeAttempts(attempt.Value)
		}
		sr.read(endpoint, ref, logRow.Value, attempt.Found)
		rows = append(rows, sr)
	}
	return page, rows, nil
}
