package outbox

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// StreamRecord is the outcome of one stream row as read from its log row.
type StreamRecord struct {
	// Record is the outcome's record encoding.
	Record store.Value
	// AcceptedMs is when the log row says it was accepted.
	AcceptedMs int64
	// HasAttempts: the stream keeps an attempt row for it.
	HasAttempts bool

	// logged: read from a log row; false when the row was not found.
	logged bool
	// queued: the row has no pending row; its log entry alone queues it
	// (queue.go), so its entry, not a pending row, guards its
	// acknowledgement.
	queued bool
	seq    uint64
	log    store.Value
	row    schema.LogRow
	entry  schema.LogEntry
}

// StreamRef names one row of a stream: its sequence number and rid, and
// whether its log entry alone queues it (QueueRow.Logged).
type StreamRef struct {
	Seq    uint64
	RID    string
	Logged bool
	// Log is the row's log row as the queue read it (QueueRow.Log), which
	// is then not read again; nil to read it.
	Log store.Value
	// Fresh: Log is the row as its ingest committed it (Status.Log), under
	// a reservation id never accepted before, so the row has no attempt
	// row either and ReadArrived reads nothing of it.
	Fresh bool
	// Endpoints are the endpoint rows the ingest that accepted the row
	// guarded (Status.Endpoints); nil when not known.
	Endpoints *Endpoints
}

func (r StreamRef) fresh() bool { return r.Fresh && r.Log != nil }

// StreamRow is one stream row's outcome and attempts as read. Found is false
// when no log row holds it; Err says why a row that
// was found cannot be used (it does not decode, or is another outcome's).
type StreamRow struct {
	Found    bool
	Err      error
	Record   StreamRecord
	Outcome  schema.Outcome
	Attempts schema.Attempts
	// AttemptsErr: the attempt row is present but does not decode.
	AttemptsErr error
}

// ReadStreamRows reads the outcomes and attempt rows of rows of the stream
// of endpoint, in one round trip. At most MaxBatchOps/2 rows.
func ReadStreamRows(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, refs []StreamRef) ([]StreamRow, error) {
	if len(refs) > store.MaxBatchOps/2 {
		return nil, fmt.Errorf("read %d stream rows at once", len(refs))
	}
	out := make([]StreamRow, len(refs))
	if len(refs) == 0 {
		return out, nil
	}
	keys := make([]store.Key, 0, 2*len(refs))
	// at[i] is the index of refs[i]'s first key.
	at := make([]int, len(refs))
	for i, r := range refs {
		at[i] = len(keys)
		if r.Log == nil {
			keys = append(keys, schema.LogKey(r.Seq))
		}
		keys = append(keys, schema.AttemptKeyOf(endpoint, r.RID))
	}
	got, err := st.GetMany(ctx, p, keys)
	if err != nil {
		return nil, fmt.Errorf("read stream rows of %s/%s: %w", p, endpoint, err)
	}
	for i, r := range refs {
		logRow, attempt := store.Row{Value: r.Log, Found: true}, got[at[i]]
		if r.Log == nil {
			logRow, attempt = got[at[i]], got[at[i]+1]
		}
		if attempt.Found {
			out[i].Attempts, out[i].AttemptsErr = schema.DecodeAttempts(attempt.Value)
			out[i].Record.HasAttempts = true
		}
		if !logRow.Found {
			continue
		}
		out[i].read(endpoint, r, logRow.Value, out[i].Record.HasAttempts)
	}
	return out, nil
}

// read sets the row's record and outcome from its log row v.
func (sr *StreamRow) read(endpoint string, ref StreamRef, v store.Value, attempts bool) {
	sr.Found = true
	sr.Record, sr.Err = fromLog(endpoint, ref, v, attempts)
	if sr.Err == nil {
		sr.Outcome, sr.Err = schema.DecodeRecord(ref.RID, sr.Record.Record)
		sr.Outcome.Trace = sr.Record.row.Trace
	}
}

// fromLog is the stream record of ref from its log row.
func fromLog(endpoint string, ref StreamRef, v store.Value, attempts bool) (StreamRecord, error) {
	l, err := schema.DecodeLog(v)
	if err != nil {
		return StreamRecord{}, err
	}
	if l.RID != ref.RID {
		return StreamRecord{}, corruptf("log row %d holds another reservation id", ref.Seq)
	}
	e, ok := l.Entry(endpoint)
	if !ok {
		return StreamRecord{}, corruptf("log row %d has no entry for endpoint %s", ref.Seq, endpoint)
	}
	return StreamRecord{
		Record: l.Record, AcceptedMs: l.AcceptedMs, HasAttempts: attempts,
		logged: true, queued: ref.Logged, seq: ref.Seq, log: v, row: l, entry: e,
	}, nil
}

// readStreamRowsChunked is ReadStreamRows for any number of rows.
func readStreamRowsChunked(ctx context.Context, st store.NamespaceStore, p store.Partition, endpoint string, refs []StreamRef) ([]StreamRow, error) {
	out := make([]StreamRow, 0, len(refs))
	for chunk := range slices.Chunk(refs, store.MaxBatchOps/2) {
		rows, err := ReadStreamRows(ctx, st, p, endpoint, chunk)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// Shared reports whether the record's log row, as read, has another stream
// waiting on it. With nothing retained, the last stream done with a row
// deletes it, so such a row is worth reading again just before its
// acknowledgement: the other stream may have finished meanwhile.
func (r StreamRecord) Shared() bool {
	return r.logged && r.row.PendingElsewhere(r.entry.Endpoint)
}

// LogKey is the key of the record's log row; ok is false for a record
// that was not found.
func (r StreamRecord) LogKey() (key store.Key, ok bool) {
	if !r.logged {
		return "", false
	}
	return schema.LogKey(r.seq), true
}

// Reread is r as its log row reads now, and whether the stream still has
// it pending: false when the row is gone (erased), holds another outcome or
// does not decode, or its entry is no longer pending (dropped), so that
// there is nothing left for the stream to acknowledge. A record that was
// not found reads as it was.
func (r StreamRecord) Reread(row store.Row) (StreamRecord, bool) {
	if !r.logged {
		return r, true
	}
	if !row.Found {
		return r, false
	}
	fresh, err := fromLog(r.entry.Endpoint, StreamRef{Seq: r.seq, RID: r.row.RID, Logged: r.queued}, row.Value, r.HasAttempts)
	if err != nil || !bytes.Equal(fresh.Record, r.Record) || fresh.entry.State != schema.EntryPending {
		return r, false
	}
	return fresh, true
}

// Handed is what a committed ingest batch hands the fires of the delivery
// timers it wrote held (Appender.Due): what each would read first.
type Handed struct {
	// Rows are the batch's accepted rows when each is fresh (StreamRef:
	// its log row as committed, under a reservation id never accepted
	// before), in sequence order: a fire of a timer the batch created may
	// take them as its stream's rows without reading them, when its
	// stream's backlog counts no other. Nil otherwise.
	Rows []StreamRef
	// Streams holds, by endpoint id, the rows of each stream whose timer
	// the batch wrote held, read by the batch once its writes applied.
	Streams map[string]StreamRows
}

// StreamRows are a stream's backlog, endpoint and head rows, the rows a
// delivery fire reads before anything else.
type StreamRows struct {
	Backlog, Endpoint, Head store.Row
}

// askStreamRows asks b to read stream id's rows (StreamRows) once it
// applied, when they fit its reads.
func askStreamRows(b *store.Batch, id string) {
	if len(b.Reads)+3 <= store.MaxBatchReads {
		b.Reads = append(b.Reads, schema.ClassBacklog.Key(id), schema.ClassEndpoint.Key(id), schema.ClassHead.Key(id))
	}
}

// streamsRead is the streams whose rows a committed b read (askStreamRows),
// given the rows its Apply returned.
func streamsRead(b *store.Batch, rows []store.Row) map[string]StreamRows {
	if len(b.Reads) == 0 || len(rows) != len(b.Reads) || len(rows)%3 != 0 {
		return nil
	}
	out := make(map[string]StreamRows, len(rows)/3)
	for i := 0; i < len(rows); i += 3 {
		id, _ := schema.ClassBacklog.ID(b.Reads[i])
		out[id] = StreamRows{Backlog: rows[i], Endpoint: rows[i+1], Head: rows[i+2]}
	}
	return out
}
