package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/zeebo/blake3"

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
// when it was accepted. For a row older than the log, neither the row nor
// its record says; its seen row does, written in the same batch and kept
// for the idempotency window. A seen row that is
// gone, or that no longer holds this record's digest (the reservation id
// was accepted again once the window had passed), means the row was
// accepted more than a window ago: it is then reported as accepted exactly
// a window ago, a lower bound on its age, never a made-up figure.
type BacklogReader struct {
	Store store.NamespaceStore
	// Window must equal the Appender's; DefaultWindow when zero.
	Window time.Duration
}

// backlogPage bounds one scan of a namespace's backlog rows: there is one
// per endpoint, at most HardMaxEndpoints.
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
	start, end := ClassRange(ClassBacklog)
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

// oldestAccepted is when the head of each of streams was accepted (see
// BacklogReader), 0 for a stream found empty, in two round trips: the heads,
// then their log rows (and, for rows older than the log, their records and
// seen rows).
func oldestAccepted(ctx context.Context, st store.NamespaceStore, p store.Partition, streams []string, nowMs int64, window time.Duration) ([]int64, error) {
	out := make([]int64, len(streams))
	if len(streams) == 0 {
		return out, nil
	}
	reads := make([]store.Read, len(streams))
	for i, id := range streams {
		s, e, err := PendingRange(id)
		if err != nil {
			return nil, err
		}
		reads[i] = store.Read{Start: s, End: e, Limit: 1}
	}
	heads, err := store.ReadMany(ctx, st, p, reads)
	if err != nil {
		return nil, fmt.Errorf("read stream heads of %s: %w", p, err)
	}
	var keys []store.Key
	var at []int
	for i, h := range heads {
		if len(h.Page.Entries) == 0 {
			// The backlog row was read before an acknowledgement that
			// emptied the stream.
			continue
		}
		pk, ok := Parse(h.Page.Entries[0].Key)
		if !ok || pk.Class != ClassPending || pk.Endpoint != streams[i] {
			return nil, fmt.Errorf("pending row of %s/%s: %w", p, streams[i], corruptf("bad pending key"))
		}
		keys = append(keys, LogKey(pk.Seq), streamKey(ClassRecord, pk.Endpoint, pk.RID), tagged(ClassSeen, pk.RID))
		at = append(at, i)
	}
	rows, err := getMany(ctx, st, p, keys)
	if err != nil {
		return nil, err
	}
	floor := nowMs - window.Milliseconds()
	for j, i := range at {
		accepted := floor
		if l := rows[3*j]; l.Found {
			if row, err := DecodeLog(l.Value); err == nil {
				out[i] = row.AcceptedMs
				continue
			}
		}
		// A row older than the log: its seen row dates it.
		if rec, seen := rows[3*j+1], rows[3*j+2]; rec.Found && seen.Found {
			if s, err := DecodeSeen(seen.Value); err == nil && s.Digest == blake3.Sum256(rec.Value) {
				accepted = s.AcceptedMs
			}
		}
		out[i] = accepted
	}
	return out, nil
}

// sumBacklogs adds the backlog rows of p in entries to out, and appends to
// streams the endpoint of each that counts rows.
func sumBacklogs(p store.Partition, entries []store.Entry, out *NamespaceBacklog, streams []string) ([]string, error) {
	for _, e := range entries {
		pk, ok := Parse(e.Key)
		if !ok || pk.Class != ClassBacklog {
			return nil, fmt.Errorf("backlog row of %s: %w", p, corruptf("bad backlog key"))
		}
		b, err := DecodeBacklog(e.Value)
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
