package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// DeleteEndpoint removes the endpoint id. While rows are pending it refuses
// with a *BacklogError, unless force: then the endpoint is first marked
// deleting (disabled, and ingest gives it no more rows), its rows are
// dropped page by page as if acknowledged, and the endpoint goes last, so a
// delete cut short leaves a consistent stream that a repeated delete
// finishes. It returns how many rows were dropped.
func (a *Admin) DeleteEndpoint(ctx context.Context, p store.Partition, id string, force bool) (uint64, error) {
	var dropped uint64
	// empty: the endpoint is marked deleting and its pending range was
	// found empty, so no row can come back; a backlog that still counts
	// rows counts rows that are not there.
	empty := false
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return dropped, err
		}
		if s.ep == nil {
			return dropped, ErrNotFound
		}
		if rows := s.backlog.backlog.Rows; rows > 0 && !(empty && s.ep.ep.DisabledReason == ReasonDeleting) {
			if !force {
				return dropped, &BacklogError{Rows: rows}
			}
			n, done, err := a.dropPending(ctx, p, s)
			dropped += n
			if err != nil {
				return dropped, err
			}
			empty = done
			continue
		}
		key := schema.ClassEndpoint.Key(id)
		// Rows of the stream that no pending row holds: attempt rows a
		// fire's release wrote after dropPending dropped their rows (its
		// notes are guarded by its lease only), stray records, and the
		// minute rows of the last hour.
		leftover, more, err := a.leftovers(ctx, p, id)
		if err != nil {
			return dropped, err
		}
		if more {
			var b store.Batch
			b.Settles = true
			b.RequireEquals(key, s.ep.raw)
			for _, k := range leftover {
				b.Delete(k)
			}
			if _, err := a.apply(ctx, p, b); err != nil {
				return dropped, err
			}
			continue
		}
		var b store.Batch
		b.Settles = true
		b.RequireEquals(key, s.ep.raw)
		b.Guard(schema.ClassBacklog.Key(id), s.backlog.raw, s.backlog.found)
		b.Delete(key)
		for _, k := range leftover {
			b.Delete(k)
		}
		if s.backlog.found {
			b.Delete(schema.ClassBacklog.Key(id))
		}
		// A fire that could still add to the counters holds the timer,
		// which this batch guards and deletes.
		b.Delete(schema.ClassCounters.Key(id))
		// A recovery's fire finds no endpoint, and ends.
		b.Delete(schema.ClassJob.Key(id))
		b.Delete(schema.ClassHead.Key(id))
		if t := s.timer; t != nil {
			// A fire holding it fails its guard and writes nothing.
			b.RequireEquals(t.Key, t.Raw)
			b.Delete(t.Key)
		}
		MarkEndpoint(&b, id, s.class(), ClassAbsent, false)
		ok, err := a.apply(ctx, p, b)
		if err != nil {
			return dropped, err
		}
		if ok {
			return dropped, nil
		}
	}
	return dropped, fmt.Errorf("%w: %s", ErrContended, p)
}

// maxLeftovers is the most leftover rows the final batch of a delete takes:
// with its eleven other operations it stays within store.MaxBatchOps.
const maxLeftovers = store.MaxBatchOps - 11

// leftovers is up to maxLeftovers attempt and minute rows of the
// stream of id; more reports that there are others. The minute rows go in
// the final batch, which guards the timer, so no fire adds to them after.
func (a *Admin) leftovers(ctx context.Context, p store.Partition, id string) (keys []store.Key, more bool, err error) {
	start, end, err := schema.AttemptRange(id)
	if err != nil {
		return nil, false, err
	}
	page, err := a.Store.Scan(ctx, p, start, end, nil, maxLeftovers+1)
	if err != nil {
		return nil, false, fmt.Errorf("scan stream %s/%s: %w", p, id, err)
	}
	for _, e := range page.Entries {
		keys = append(keys, e.Key)
	}
	if len(keys) > maxLeftovers {
		return keys[:maxLeftovers], true, nil
	}
	minutes, err := minuteLeftovers(ctx, a.Store, p, id, a.Clock.Now().UnixMilli())
	if err != nil {
		return nil, false, err
	}
	if keys = append(keys, minutes...); len(keys) > maxLeftovers {
		return keys[:maxLeftovers], true, nil
	}
	return keys, false, nil
}

// dropPending marks the endpoint deleting, then drops its pending rows a page at
// a time until none is left or a guard fails; it returns the rows dropped,
// and empty when it found the pending range empty after the mark.
func (a *Admin) dropPending(ctx context.Context, p store.Partition, s *streamRead) (dropped uint64, empty bool, err error) {
	id, epKey, epRaw := s.ep.id, s.ep.key, s.ep.raw
	if s.ep.ep.DisabledReason != ReasonDeleting {
		e := s.ep.ep
		e.Enabled, e.DisabledReason = false, ReasonDeleting
		e.UpdatedMs = max(e.CreatedMs, a.Clock.Now().UnixMilli())
		value, err := schema.EncodeEndpoint(&e)
		if err != nil {
			return 0, false, err
		}
		var b store.Batch
		b.RequireEquals(epKey, epRaw)
		b.Put(epKey, value)
		MarkEndpoint(&b, id, s.class(), ClassFailingRow, false)
		if ok, err := a.apply(ctx, p, b); err != nil || !ok {
			return 0, false, err
		}
		epRaw = value
	}
	head := s.head
	for {
		at, err := schema.HeadOf(store.Row{Value: head.raw, Found: head.found})
		if err != nil {
			return dropped, false, fmt.Errorf("head of %s/%s: %w", p, id, err)
		}
		page, err := ReadQueuePrefix(ctx, a.Store, p, id, at, MaxAcksPerBatch)
		if err != nil {
			return dropped, false, err
		}
		refs := make([]StreamRef, 0, len(page.Rows))
		for _, q := range page.Rows {
			if q.Corrupt && !q.Logged {
				return dropped, false, fmt.Errorf("pending row of %s/%s: %w", p, id, corruptf("bad pending key"))
			}
			if !q.Corrupt {
				refs = append(refs, StreamRef{Seq: q.Seq, RID: q.RID, Logged: q.Logged})
			}
		}
		bl, found, err := a.Store.Get(ctx, p, schema.ClassBacklog.Key(id))
		if err != nil {
			return dropped, false, fmt.Errorf("read backlog of %s/%s: %w", p, id, err)
		}
		got, err := ReadStreamRows(ctx, a.Store, p, id, refs)
		if err != nil {
			return dropped, false, err
		}
		acks, err := NewAcks(id, bl, found)
		if err != nil {
			return dropped, false, err
		}
		acks.Retain = a.Retention > 0
		nowMs := a.Clock.Now().UnixMilli()
		for _, q := range page.Rows {
			if q.Corrupt {
				// A log row that does not decode: it stays, and its
				// entry counts dropped as the head moves past it.
				if err := acks.dropUnreadable(q.Seq); err != nil {
					return dropped, false, fmt.Errorf("drop %s/%s: %w", p, id, err)
				}
				continue
			}
			sr := got[0]
			got = got[1:]
			// A row whose record is missing, which delivery keeps and
			// skips, is dropped too: a forced delete is the way out. So is
			// one whose log row does not decode, as a row older than the
			// log: its pending and attempt rows go, the log row stays.
			rec := sr.Record
			if sr.Err != nil {
				rec = StreamRecord{}
			}
			if err := acks.drop(q.RID, q.Seq, rec, nowMs); err != nil {
				return dropped, false, fmt.Errorf("drop %s/%s: %w", p, id, err)
			}
		}
		moved := page.FromHead && page.End > at.Seq
		if acks.Len() == 0 && !moved {
			// The backlog counts rows that are not there: the final batch
			// deletes it with the endpoint.
			return dropped, len(page.Rows) == 0, nil
		}
		var b store.Batch
		b.RequireEquals(epKey, epRaw)
		if moved {
			// Every row the page read from the head is dropped: the head
			// goes past them, and its guard makes a resent batch fail.
			b.RequireEquals(schema.ClassHead.Key(id), head.raw)
			acks.MoveHead(page.End)
		}
		acks.Plan(&b)
		ok, err := a.apply(ctx, p, b)
		if err != nil || !ok {
			return dropped, false, err
		}
		dropped += uint64(acks.Len())
		if moved {
			head = rowRead{raw: schema.EncodeHead(page.End), found: true}
		}
		if acks.Remaining().Rows == 0 {
			return dropped, false, nil
		}
	}
}
