package schema

import (
	"encoding/binary"
	"math"

	"github.com/hookrelay/relay/internal/store"
)

// The log holds each accepted outcome once per namespace, at its sequence
// number ('l' seq(8)), whatever the number of endpoints that take it: the
// record, when it was accepted, and one entry per endpoint whose kinds took
// it, saying what became of it there. A stream's pending row points at its
// log row by the sequence in its key, so the record is not copied into
// every stream.
//
// An entry's last 15 bytes are the only part of the row that changes after
// ingest, and each is written with store.PutRange by the one stream that
// owns it (its acknowledgement, a forced delete's drop, a resend), so
// streams sharing a row never guard each other's writes.
//
//	0x01 | entries (1) | per entry: id len (1), id, state (1),
//	       at ms (8), duration ms (4), status (2)
//	     | accepted ms (8) | rid len (1) | rid | record
//
// A row whose outcome was accepted under a trace is version 2, the same
// with the trace parent (TraceParent: 25 bytes) between the rid and the
// record. Rows accepted untraced stay version 1, a byte shorter than ever.
const (
	// logV2 is a log row that holds a trace parent.
	logV2 = 0x02

	// MaxLogEntries bounds a log row's entries: one per endpoint an outcome
	// is ingested to, at most as many as one ingest batch takes
	// (outbox.MaxIngestEndpoints is this bound).
	MaxLogEntries = 31
	// logEntryTail is the part of an entry after its id: state, at ms,
	// duration ms, status.
	logEntryTail = 1 + 8 + 4 + 2
)

// EntryState is what became of a logged outcome on one stream.
type EntryState uint8

// Entry states. 0 is no state: a row never holds it.
const (
	// EntryPending: the stream's pending row exists.
	EntryPending EntryState = 1
	// EntryDelivered: acknowledged (answered 2xx, or synthetic).
	EntryDelivered EntryState = 2
	// EntryDropped: dropped by a forced delete or an erasure.
	EntryDropped EntryState = 3
)

// entryAttemptsFlag marks, in an entry's state byte, that its stream keeps
// an attempt row for the outcome, which the log sweep deletes with it.
const entryAttemptsFlag = 0x80

func (s EntryState) String() string {
	switch s {
	case EntryPending:
		return "pending"
	case EntryDelivered:
		return "delivered"
	case EntryDropped:
		return "dropped"
	}
	return "unknown"
}

// LogEntry is one stream's part of a log row.
type LogEntry struct {
	Endpoint string
	State    EntryState
	// Attempts: the stream keeps an attempt row for the outcome.
	Attempts bool
	// AtMs is when it was delivered or dropped. While pending it is 0, or,
	// queued again by a Resend, that call's random tag, by which it knows
	// its own write after a lost reply.
	AtMs int64
	// DurationMs and Status are the delivering call's, 0 when not known
	// (a synthetic row, a drop).
	DurationMs uint32
	Status     uint16
	// offset of the entry's state byte in the row, set by DecodeLog.
	offset int
}

// LogRow is one outcome as the log holds it.
type LogRow struct {
	RID        string
	AcceptedMs int64
	// Trace is the span it was accepted under; zero when untraced.
	Trace   TraceParent
	Record  store.Value
	Entries []LogEntry
}

// LogKey is the key of the log row at seq.
func LogKey(seq uint64) store.Key {
	b := make([]byte, 0, 9)
	b = append(b, byte(ClassLog))
	return store.Key(binary.BigEndian.AppendUint64(b, seq))
}

// LogRange is the key range of every log row, in sequence order.
func LogRange() (start, end store.Key) { return ClassRange(ClassLog) }

// EncodeLog encodes a log row. Entries keep their order.
func EncodeLog(l LogRow) (store.Value, error) {
	switch {
	case !validRID(l.RID):
		return nil, invalidf("log row: bad reservation id")
	case l.AcceptedMs < 0:
		return nil, invalidf("log row: accepted time must not be negative")
	case len(l.Entries) > MaxLogEntries:
		return nil, invalidf("log row: %d entries exceed %d", len(l.Entries), MaxLogEntries)
	case len(l.Record) == 0:
		return nil, invalidf("log row: no record")
	case l.Trace != TraceParent{} && !l.Trace.Valid():
		return nil, invalidf("log row: invalid trace parent")
	}
	version, n := byte(codecV1), 1+1+8+1+len(l.RID)+len(l.Record)
	if l.Trace.Valid() {
		version, n = logV2, n+traceParentLen
	}
	for i, e := range l.Entries {
		if !validEndpointID(e.Endpoint) || e.State < EntryPending || e.State > EntryDropped || e.AtMs < 0 {
			return nil, invalidf("log row: bad entry")
		}
		for _, f := range l.Entries[:i] {
			if f.Endpoint == e.Endpoint {
				return nil, invalidf("log row: endpoint %s twice", e.Endpoint)
			}
		}
		n += 1 + len(e.Endpoint) + logEntryTail
	}
	v := make([]byte, 0, n)
	v = append(v, version, byte(len(l.Entries)))
	for _, e := range l.Entries {
		v = append(v, byte(len(e.Endpoint)))
		v = append(v, e.Endpoint...)
		v = appendEntryTail(v, e)
	}
	v = binary.BigEndian.AppendUint64(v, uint64(l.AcceptedMs))
	v = append(v, byte(len(l.RID)))
	v = append(v, l.RID...)
	if version == logV2 {
		v = appendTraceParent(v, l.Trace)
	}
	return append(v, l.Record...), nil
}

func appendEntryTail(v []byte, e LogEntry) []byte {
	state := byte(e.State)
	if e.Attempts {
		state |= entryAttemptsFlag
	}
	v = append(v, state)
	v = binary.BigEndian.AppendUint64(v, uint64(e.AtMs))
	v = binary.BigEndian.AppendUint32(v, e.DurationMs)
	return binary.BigEndian.AppendUint16(v, e.Status)
}

// DecodeLog decodes a log row. The record is returned as stored; decode it
// with DecodeRecord and the row's RID.
func DecodeLog(v store.Value) (LogRow, error) {
	// Version 2 reads as 1 but for its trace parent.
	traced := len(v) > 0 && v[0] == logV2
	r := &reader{what: "log row", b: v}
	if traced {
		r.b = v[1:]
	} else {
		r = newReader("log row", v)
	}
	n := int(r.u8())
	if n > MaxLogEntries {
		r.fail("%d entries", n)
	}
	var l LogRow
	if n > 0 && r.err == nil {
		l.Entries = make([]LogEntry, 0, n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		id := string(r.take(uint64(r.u8())))
		if r.err == nil && !validEndpointID(id) {
			r.fail("bad endpoint id")
		}
		for _, e := range l.Entries {
			if e.Endpoint == id {
				r.fail("endpoint %s twice", id)
			}
		}
		e := LogEntry{Endpoint: id, offset: len(v) - len(r.b)}
		state := r.u8()
		e.State, e.Attempts = EntryState(state&^entryAttemptsFlag), state&entryAttemptsFlag != 0
		if r.err == nil && (e.State < EntryPending || e.State > EntryDropped) {
			r.fail("unknown entry state %d", state)
		}
		at := r.u64()
		if at > math.MaxInt64 {
			r.fail("time out of range")
		}
		e.AtMs, e.DurationMs, e.Status = int64(at), r.u32(), r.u16()
		l.Entries = append(l.Entries, e)
	}
	l.AcceptedMs = r.ms()
	l.RID = string(r.take(uint64(r.u8())))
	if r.err == nil && !validRID(l.RID) {
		r.fail("bad reservation id")
	}
	if traced {
		l.Trace = r.traceParent()
	}
	if r.err == nil {
		if len(r.b) == 0 {
			r.fail("no record")
		}
		l.Record = append(store.Value(nil), r.b...)
		r.b = nil
	}
	if err := r.end(); err != nil {
		return LogRow{}, err
	}
	return l, nil
}

// Entry is the entry of endpoint, and whether the row has one.
func (l *LogRow) Entry(endpoint string) (LogEntry, bool) {
	for _, e := range l.Entries {
		if e.Endpoint == endpoint {
			return e, true
		}
	}
	return LogEntry{}, false
}

// PendingElsewhere reports whether an entry other than endpoint's is
// pending.
func (l *LogRow) PendingElsewhere(endpoint string) bool {
	for _, e := range l.Entries {
		if e.Endpoint != endpoint && e.State == EntryPending {
			return true
		}
	}
	return false
}

// PutEntry is the write that sets e's tail in place in the log row at seq
// it was decoded from.
func PutEntry(b *store.Batch, seq uint64, e LogEntry) {
	b.PutRange(LogKey(seq), e.offset, appendEntryTail(make([]byte, 0, logEntryTail), e))
}

// RequireEntry guards e's tail as read in the log row at seq, whatever the
// row's other entries hold now: it stands for the pending row a stream
// reading its queue from the log does not have.
func RequireEntry(b *store.Batch, seq uint64, e LogEntry) {
	b.RequireRange(LogKey(seq), e.offset, appendEntryTail(make([]byte, 0, logEntryTail), e))
}
