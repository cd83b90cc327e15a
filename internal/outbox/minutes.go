package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// A stream's minute rows count what it delivered and which calls failed in
// each minute, for the console's chart of the last hour. Like the lifetime
// counters they are written only by store.Add, in the batches that make the
// change (an acknowledgement, a fire's note of its failed calls), so they
// hold for every relay process sharing the store, a failed batch counts
// nothing, and a batch sent again after a lost reply fails the guard its
// first run falsified and counts once.
//
// The key puts the minute before the endpoint ('m' minute(4) endpoint), so
// the rows of every stream older than an hour are one range at the start of
// the class, which the log sweep takes with one scan. Each batch that adds
// to a minute also deletes the same stream's minute an hour back, so an
// active stream keeps at most MinutesKept+1 rows with no sweep at all; the
// sweep takes those left behind by a stream that went quiet.

// MinutesKept is how many minutes of a stream are read: the current one
// and the 59 before it, the chart's hour.
const MinutesKept = 60

// MinuteOps is the most operations one count adds to a batch: the Add to
// its minute and the deletion of the minute an hour back.
const MinuteOps = 2

// minuteWrites count delivered rows and failed calls of the stream of
// endpoint in the minute of atMs: one Add, whose absent row counts as
// zeros, and the deletion of the stream's minute an hour back. A time in
// no minute counts nothing there (the lifetime counters still count it).
func minuteWrites(endpoint string, atMs int64, delivered, failed uint64) []store.Write {
	m, ok := schema.MinuteOf(atMs)
	if !ok || delivered+failed == 0 {
		return nil
	}
	out := []store.Write{schema.AddMinute(m, endpoint, delivered, failed)}
	if m >= MinutesKept {
		out = append(out, store.Write{Kind: store.Delete, Key: schema.MinuteKeyOf(m-MinutesKept, endpoint)})
	}
	return out
}

// FailedAttemptsNotes are the writes that count n failed calls of the
// stream of endpoint, which ended by atMs: the lifetime counters' Add
// (FailedAttemptsNote) and the minute's (at most 1 + MinuteOps writes). A
// fire's notes, so they stand whatever its other guards find, guarded by
// its lease alone; the timers runner joins each Add with the
// acknowledgements' Add to the same row.
func FailedAttemptsNotes(endpoint string, n int, atMs int64) ([]store.Write, error) {
	w, err := FailedAttemptsNote(endpoint, n)
	if err != nil {
		return nil, err
	}
	return append([]store.Write{w}, minuteWrites(endpoint, atMs, 0, uint64(n))...), nil
}

// minuteLeftovers are the stream of id's minute rows that a read of the
// last hour around nowMs could see, a few minutes either side for the
// clocks of other processes: the endpoint delete's final batch deletes
// them, so an endpoint created again under the id starts at zero. Older
// rows no read looks at, and the log sweep takes them.
func minuteLeftovers(ctx context.Context, s store.NamespaceStore, p store.Partition, id string, nowMs int64) ([]store.Key, error) {
	last, ok := schema.MinuteOf(nowMs)
	if !ok {
		return nil, nil
	}
	last += minuteSkew
	first := uint32(0)
	if last >= MinutesKept+2*minuteSkew {
		first = last - (MinutesKept + 2*minuteSkew)
	}
	keys := make([]store.Key, 0, last-first+1)
	for m := first; m <= last; m++ {
		keys = append(keys, schema.MinuteKeyOf(m, id))
	}
	rows, err := getMany(ctx, s, p, keys)
	if err != nil {
		return nil, err
	}
	var found []store.Key
	for i, r := range rows {
		if r.Found {
			found = append(found, keys[i])
		}
	}
	return found, nil
}

// minuteSkew is how many minutes another process's clock may be off for
// the endpoint delete still to find the rows it wrote.
const minuteSkew = 2

// staleMinutes are up to limit minute rows of any stream of the namespace
// from minutes more than an hour before nowMs, oldest first: the rows no
// read looks at, which the log sweep deletes.
func staleMinutes(ctx context.Context, s store.NamespaceStore, p store.Partition, nowMs int64, limit int) ([]store.Key, error) {
	m, ok := schema.MinuteOf(nowMs)
	if !ok || m < MinutesKept || limit <= 0 {
		return nil, nil
	}
	start, _ := schema.MinuteRange()
	page, err := s.Scan(ctx, p, start, schema.MinuteKeyOf(m-MinutesKept+1, ""), nil, limit)
	if err != nil {
		return nil, fmt.Errorf("scan minutes of %s: %w", p, err)
	}
	keys := make([]store.Key, len(page.Entries))
	for i, e := range page.Entries {
		keys[i] = e.Key
	}
	return keys, nil
}
