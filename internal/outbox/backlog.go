package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// NamespaceBacklog is what a namespace has waiting, over all its streams.
type NamespaceBacklog struct {
	// Rows and Bytes sum the streams' backlogs.
	Rows, Bytes uint64
	// OldestAcceptedMs is when the oldest row at the head of a stream was
	// accepted; 0 when no row is pending. See BacklogReader for a row older
	// than the idempotency window.
	OldestAcceptedMs int64
}

// BacklogReader reads how much each namespace has waiting, for gauges.
//
// A stream's oldest row is its first pending row: sequence numbers are
// handed out in acceptance order and a row keeps its own. Its log row says
// when it was accepted. A row whose log row is gone (erased) is reported as
// accepted exactly a window ago, a lower bound on its age, never a made-up
// figure.
type BacklogReader struct {
	Store store.NamespaceStore
	// Window must equal the Appender's; DefaultWindow when zero.
	Window time.Duration
}

// backlogPage bounds one scan of a namespace's backlog rows: there is one
// per endpoint, usually within the limit of endpoints; more are read in
// more pages.
const backlogPage = 32

// Read reads the backlog of partition p at nowMs, in three round trips at
// most: the backlog rows, the head of each stream with rows, and those
// heads' records and seen rows.
func (r *BacklogReader) Read(ctx context.Context, p store.Partition, nowMs int64) (NamespaceBacklog, error) {
	window := DefaultWindow
	if r.Window > 0 {
		window = r.Window
	}
	var out NamespaceBacklog
	var streams []string
	start, end := schema.ClassRange(schema.ClassBacklog)
	var after *store.Cursor
	for {
		page, err := r.Store.Scan(ctx, p, start, end, after, backlogPage)
		if err != nil {
			return NamespaceBacklog{}, fmt.Errorf("scan backlogs of %s: %w", p, err)
		}
		if streams, err = sumBacklogs(p, page.Entries, &out, streams); err != nil {
			return NamespaceBacklog{}, err
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	heads, err := oldestAccepted(ctx, r.Store, p, streams, nowMs, window)
	if err != nil {
		return NamespaceBacklog{}, err
	}
	for _, accepted := range heads {
		if accepted != 0 && (out.OldestAcceptedMs == 0 || accepted < out.OldestAcceptedMs) {
			out.OldestAcceptedMs = accepted
		}
	}
	return out, nil
}

// oldestAccepted is when the oldest row of each of streams' queues was
// accepted (see BacklogReader), 0 for a stream found empty, in two round
// trips: each stream's first pending row and its head, then the first
// row's log row, or, for a stream with no pending row, up to queueDateRows log rows
// from its head. A stream with none of its own among those is dated by the
// last, which is no later than its oldest.
func oldestAccepted(ctx context.Context, st store.NamespaceStore, p store.Partition, streams []string, nowMs int64, window time.Duration) ([]int64, error) {
	out := make([]int64, len(streams))
	if len(streams) == 0 {
		return out, nil
	}
	reads := make([]store.Read, len(streams), len(streams)+1)
	headKeys := make([]store.Key, len(streams))
	for i, id := range streams {
		s, e, err := schema.PendingRange(id)
		if err != nil {
			return nil, err
		}
		reads[i] = store.Read{Start: s, End: e, Limit: 1}
		headKeys[i] = schema.ClassHead.Key(id)
	}
	reads = append(reads, store.Read{Keys: headKeys})
	firsts, err := store.ReadMany(ctx, st, p, reads)
	if err != nil {
		return nil, fmt.Errorf("read stream heads of %s: %w", p, err)
	}
	heads := firsts[len(streams)].Rows
	var keys []store.Key
	var at, logAt []int
	var logReads []store.Read
	_, logEnd := schema.LogRange()
	for i, h := range firsts[:len(streams)] {
		if len(h.Page.Entries) == 0 {
			if head, err := schema.HeadOf(heads[i]); err == nil && head.Found {
				logReads = append(logReads, store.Read{Start: schema.LogKey(head.Seq), End: logEnd, Limit: queueDateRows})
				logAt = append(logAt, i)
			}
			// Else the backlog row was read before an acknowledgement
			// that emptied the stream.
			continue
		}
		pk, ok := schema.Parse(h.Page.Entries[0].Key)
		if !ok || pk.Class != schema.ClassPending || pk.Endpoint != streams[i] {
			return nil, fmt.Errorf("pending row of %s/%s: %w", p, streams[i], corruptf("bad pending key"))
		}
		keys = append(keys, schema.LogKey(pk.Seq))
		at = append(at, i)
	}
	for chunk := range slices.Chunk(keys, store.MaxBatchOps) {
		logReads = append(logReads, store.Read{Keys: chunk})
	}
	if len(logReads) == 0 {
		return out, nil
	}
	res, err := store.ReadMany(ctx, st, p, logReads)
	if err != nil {
		return nil, fmt.Errorf("read stream heads of %s: %w", p, err)
	}
	for j, i := range logAt {
		for _, e := range res[j].Page.Entries {
			l, err := schema.DecodeLog(e.Value)
			if err != nil {
				continue
			}
			out[i] = l.AcceptedMs
			if en, ok := l.Entry(streams[i]); ok && en.State == schema.EntryPending {
				break
			}
		}
	}
	var rows []store.Row
	for _, r := range res[len(logAt):] {
		rows = append(rows, r.Rows...)
	}
	floor := nowMs - window.Milliseconds()
	for j, i := range at {
		out[i] = floor
		if l := rows[j]; l.Found {
			if row, err := schema.DecodeLog(l.Value); err == nil {
				out[i] = row.AcceptedMs
			}
		}
	}
	return out, nil
}

// queueDateRows is how many log rows from its head date a stream with no
// pending row.
const queueDateRows = 8

// sumBacklogs adds the backlog rows of p in entries to out, and appends to
// streams the endpoint of each that counts rows.
func sumBacklogs(p store.Partition, entries []store.Entry, out *NamespaceBacklog, streams []string) ([]string, error) {
	for _, e := range entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassBacklog {
			return nil, fmt.Errorf("backlog row of %s: %w", p, corruptf("bad backlog key"))
		}
		b, err := schema.DecodeBacklog(e.Value)
		if err != nil {
			return nil, fmt.Errorf("backlog of %s/%s: %w", p, pk.Endpoint, err)
		}
		out.Rows += b.Rows
		out.Bytes += b.Bytes
		if b.Rows > 0 {
			streams = append(streams, pk.Endpoint)
		}
	}
	return streams, nil
}
