package outbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

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

const minuteMs = 60_000

// Minute is one minute of a stream.
type Minute struct {
	// StartMs is when the minute began.
	StartMs int64
	// Delivered counts the rows acknowledged in the minute, synthetic ones
	// included; a resent outcome counts again when it is delivered again.
	Delivered uint64
	// Failed counts the calls that failed in the minute.
	Failed uint64
}

const minuteLen = 1 + 2*8

// minuteHeader precedes a minute row's two counters, the layout store.Add
// adds to.
var minuteHeader = store.Value{codecV1}

// minuteOf is the minute holding ms; ms before 1970 or past 2^32 minutes
// (year 10136) are in no minute.
func minuteOf(ms int64) (uint32, bool) {
	if ms < 0 || ms/minuteMs > math.MaxUint32 {
		return 0, false
	}
	return uint32(ms / minuteMs), true
}

func minuteKey(minute uint32, endpoint string) store.Key {
	b := make([]byte, 0, 5+len(endpoint))
	b = append(b, byte(ClassMinute))
	b = binary.BigEndian.AppendUint32(b, minute)
	return store.Key(append(b, endpoint...))
}

// MinuteKey is the key of the minute row of the stream of endpoint that
// holds atMs.
func MinuteKey(endpoint string, atMs int64) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	m, ok := minuteOf(atMs)
	if !ok {
		return "", invalidf("time %d ms is in no minute", atMs)
	}
	return minuteKey(m, endpoint), nil
}

// MinuteRange is the key range of every minute row of the namespace, oldest
// minute first.
func MinuteRange() (start, end store.Key) { return ClassRange(ClassMinute) }

// EncodeMinute is version 1, delivered u64, failed u64.
func EncodeMinute(m Minute) store.Value {
	v := make([]byte, 0, minuteLen)
	v = append(v, codecV1)
	v = binary.BigEndian.AppendUint64(v, m.Delivered)
	return binary.BigEndian.AppendUint64(v, m.Failed)
}

// DecodeMinute decodes a minute row's counts; StartMs is the key's.
func DecodeMinute(v store.Value) (Minute, error) {
	r := newReader("minute", v)
	m := Minute{Delivered: r.u64(), Failed: r.u64()}
	if err := r.end(); err != nil {
		return Minute{}, err
	}
	return m, nil
}

// minuteWrites count delivered rows and failed calls of the stream of
// endpoint in the minute of atMs: one Add, whose absent row counts as
// zeros, and the deletion of the stream's minute an hour back. A time in
// no minute counts nothing there (the lifetime counters still count it).
func minuteWrites(endpoint string, atMs int64, delivered, failed uint64) []store.Write {
	m, ok := minuteOf(atMs)
	if !ok || delivered+failed == 0 {
		return nil
	}
	out := []store.Write{{Kind: store.Add, Key: minuteKey(m, endpoint), Value: minuteHeader,
		Deltas: []int64{int64(delivered), int64(failed)}}}
	if m >= MinutesKept {
		out = append(out, store.Write{Kind: store.Delete, Key: minuteKey(m-MinutesKept, endpoint)})
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

// PerMinute reads the stream of endpoint id's last MinutesKept minutes up
// to the one holding nowMs, oldest first, one entry a minute (zeros where
// nothing happened), at one instant. It does not look at the endpoint row:
// a stream without one reads as zeros.
func (a *Admin) PerMinute(ctx context.Context, p store.Partition, id string, nowMs int64) ([]Minute, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateEndpointID(id); err != nil {
		return nil, err
	}
	last, ok := minuteOf(nowMs)
	if !ok || last < MinutesKept-1 {
		return nil, invalidf("time %d ms has no hour of minutes before it", nowMs)
	}
	first := last - (MinutesKept - 1)
	keys := make([]store.Key, MinutesKept)
	for i := range keys {
		keys[i] = minuteKey(first+uint32(i), id)
	}
	rows, err := getMany(ctx, a.Store, p, keys)
	if err != nil {
		return nil, err
	}
	out := make([]Minute, MinutesKept)
	for i, r := range rows {
		out[i].StartMs = int64(first+uint32(i)) * minuteMs
		if !r.Found {
			continue
		}
		m, err := DecodeMinute(r.Value)
		if err != nil {
			return nil, fmt.Errorf("minute %d of %s/%s: %w", first+uint32(i), p, id, err)
		}
		out[i].Delivered, out[i].Failed = m.Delivered, m.Failed
	}
	return out, nil
}

// minuteLeftovers are the stream of id's minute rows that a read of the
// last hour around nowMs could see, a few minutes either side for the
// clocks of other processes: the endpoint delete's final batch deletes
// them, so an endpoint created again under the id starts at zero. Older
// rows no read looks at, and the log sweep takes them.
func minuteLeftovers(ctx context.Context, s store.NamespaceStore, p store.Partition, id string, nowMs int64) ([]store.Key, error) {
	last, ok := minuteOf(nowMs)
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
		keys = append(keys, minuteKey(m, id))
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
	m, ok := minuteOf(nowMs)
	if !ok || m < MinutesKept || limit <= 0 {
		return nil, nil
	}
	start, _ := MinuteRange()
	page, err := s.Scan(ctx, p, start, minuteKey(m-MinutesKept+1, ""), nil, limit)
	if err != nil {
		return nil, fmt.Errorf("scan minutes of %s: %w", p, err)
	}
	keys := make([]store.Key, len(page.Entries))
	for i, e := range page.Entries {
		keys[i] = e.Key
	}
	return keys, nil
}
