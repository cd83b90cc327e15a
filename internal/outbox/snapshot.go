package outbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// rowRead is a row as read: the guard of any plan that depends on it.
type rowRead struct {
	raw   store.Value
	found bool
}

type endpointRow struct {
	id  string
	key store.Key
	raw store.Value
	ep  schema.Endpoint
}

type backlogRead struct {
	rowRead
	backlog schema.Backlog
}

// snapshot is what one ingest plan depends on, read from the partition. After
// a batch commits, fold follows its writes, so the next batch is planned
// without reading again.
type snapshot struct {
	nowMs int64
	// hold is how long a new delivery timer is written held by this
	// process (Appender.Hold); 0 writes it idle.
	hold time.Duration
	// readMs is when the rows were read: nowMs of the read.
	readMs int64
	// readAt is when the read began, on this process's monotonic clock:
	// a batch seen committed before it is in the snapshot.
	readAt time.Time
	// writer tags the seen rows this Append writes (schema.Seen.Writer).
	writer    [8]byte
	endpoints []endpointRow // in id order
	seq       rowRead
	next      uint64
	backlogs  map[string]backlogRead // by endpoint id
	// heads says which streams have a head row (queue.go), by endpoint id.
	heads  map[string]bool
	timers []timers.Row       // in key (due) order
	seen   map[string]rowRead // by rid
	// logs are the log rows of the seen rows past the window, by seq.
	logs map[uint64]rowRead
}

// earlierLog is the log row of an outcome accepted under a rid before its
// window ended.
type earlierLog struct {
	seq uint64
	raw store.Value
	row schema.LogRow
}

// earlier is the log row of rid's seen row, when the row is past the
// window and its log row still holds the rid.
func (s *snapshot) earlier(rid string) (earlierLog, bool) {
	r := s.seen[rid]
	if !r.found {
		return earlierLog{}, false
	}
	seen, err := schema.DecodeSeen(r.raw)
	if err != nil || !seen.Logged {
		return earlierLog{}, false
	}
	l, ok := s.logs[seen.Seq]
	if !ok || !l.found {
		return earlierLog{}, false
	}
	row, err := schema.DecodeLog(l.raw)
	if err != nil || row.RID != rid {
		return earlierLog{}, false
	}
	return earlierLog{seq: seen.Seq, raw: l.raw, row: row}, true
}

// readEarlier reads the log rows of the seen rows past the window: an
// outcome accepted again after its window must not join one of the same
// rid still waiting.
func (a *Appender) readEarlier(ctx context.Context, p store.Partition, s *snapshot, cfg appendConfig) error {
	var keys []store.Key
	var seqs []uint64
	for _, r := range s.seen {
		if !r.found {
			continue
		}
		seen, err := schema.DecodeSeen(r.raw)
		if err != nil || !seen.Logged || s.nowMs-seen.AcceptedMs < cfg.windowMs {
			continue
		}
		keys, seqs = append(keys, schema.LogKey(seen.Seq)), append(seqs, seen.Seq)
	}
	if len(keys) == 0 {
		return nil
	}
	rows, err := getMany(ctx, a.Store, p, keys)
	if err != nil {
		return err
	}
	s.logs = make(map[uint64]rowRead, len(rows))
	for i, r := range rows {
		s.logs[seqs[i]] = rowRead{raw: r.Value, found: r.Found}
	}
	return nil
}

// read reads the endpoints, the sequence, the timers, every endpoint's
// backlog and the seen rows of the items: one round trip on a store that
// reads several things at once (store.MultiReader). Endpoints and backlogs
// are both scanned, since the backlog keys depend on the endpoints; the
// plan guards every row it uses, so reads from different instants are safe.
func (a *Appender) read(ctx context.Context, p store.Partition, items []*item, cfg appendConfig) (*snapshot, error) {
	readAt := time.Now()
	nowMs := a.Clock.Now().UnixMilli()
	rp := readsFor(items, cfg)
	res, err := store.ReadMany(ctx, a.Store, p, rp.reads)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	s, err := a.snapshotFrom(ctx, p, nowMs, rp, res, cfg)
	if err != nil {
		return nil, err
	}
	s.readAt = readAt
	return s, nil
}

// readPlan is the reads of a snapshot: the stream rows and the timers
// scanned, then the sequence and the items' seen rows (keys, each rid's at
// seenAt).
type readPlan struct {
	reads  []store.Read
	keys   []store.Key
	seenAt map[string]int
}

func readsFor(items []*item, cfg appendConfig) readPlan {
	rp := readPlan{keys: []store.Key{schema.SequenceKey()}, seenAt: map[string]int{}}
	for _, it := range items {
		if _, dup := rp.seenAt[it.rid]; !dup {
			rp.seenAt[it.rid] = len(rp.keys)
			rp.keys = append(rp.keys, it.seenKey)
		}
	}
	tStart, tEnd := timers.Range()
	rp.reads = []store.Read{
		streamRowsRead(),
		{Start: tStart, End: tEnd, Limit: timers.MaxRows + 1},
	}
	for chunk := range slices.Chunk(rp.keys, store.MaxBatchOps) {
		rp.reads = append(rp.reads, store.Read{Keys: chunk})
	}
	return rp
}

// streamRowsRead reads the endpoints, backlogs and heads in one range: the
// classes from the backlog's to the head's are those and the counters, a
// row each per endpoint, so one scan of a partition of up to
// MaxIngestEndpoints endpoints costs the store one range read instead of
// three.
func streamRowsRead() store.Read {
	start, _ := schema.ClassRange(schema.ClassBacklog)
	_, end := schema.ClassRange(schema.ClassHead)
	return store.Read{Start: start, End: end, Limit: 4*MaxIngestEndpoints + 1}
}

// snapshotFrom is the snapshot of what rp read (res), at nowMs, taken
// before the reads.
func (a *Appender) snapshotFrom(ctx context.Context, p store.Partition, nowMs int64, rp readPlan, res []store.ReadResult, cfg appendConfig) (*snapshot, error) {
	s := &snapshot{
		nowMs:    nowMs,
		readMs:   nowMs,
		backlogs: map[string]backlogRead{},
		heads:    map[string]bool{},
		seen:     map[string]rowRead{},
	}
	keys, seenAt := rp.keys, rp.seenAt
	rows := make([]store.Row, 0, len(keys))
	for _, r := range res[2:] {
		rows = append(rows, r.Rows...)
	}
	if res[0].Page.Next != nil {
		// More stream rows than an ingest takes endpoints: too many
		// endpoints, or orphans never written by relay. Read the
		// endpoints' own.
		return a.readSlow(ctx, p, s, keys, seenAt, cfg)
	}
	var endpoints store.Page
	backlogs := map[string]rowRead{}
	for _, e := range res[0].Page.Entries {
		if e.Key[0] == byte(schema.ClassEndpoint) {
			// Decoded, and refused when they do not, by endpointsFrom.
			endpoints.Entries = append(endpoints.Entries, e)
			continue
		}
		pk, ok := schema.Parse(e.Key)
		switch {
		case !ok:
		case pk.Class == schema.ClassBacklog:
			backlogs[pk.Endpoint] = rowRead{raw: e.Value, found: true}
		case pk.Class == schema.ClassHead:
			s.heads[pk.Endpoint] = true
		}
	}
	if err := s.endpointsFrom(p, endpoints); err != nil {
		return nil, err
	}
	if err := s.backlogsFrom(p, func(i int) rowRead { return backlogs[s.endpoints[i].id] }); err != nil {
		return nil, err
	}
	if err := s.keysFrom(p, rows, seenAt); err != nil {
		return nil, err
	}
	if res[1].Page.Next != nil {
		return nil, fmt.Errorf("%w: partition %s holds more than %d timers", store.ErrCorrupt, p, timers.MaxRows)
	}
	s.timers = timers.AppendRows(nil, res[1].Page.Entries)
	if err := a.readEarlier(ctx, p, s, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// readSlow reads what read does, one read at a time.
func (a *Appender) readSlow(ctx context.Context, p store.Partition, s *snapshot, keys []store.Key, seenAt map[string]int, cfg appendConfig) (*snapshot, error) {
	start, end := schema.EndpointRange()
	page, err := a.Store.Scan(ctx, p, start, end, nil, MaxIngestEndpoints+1)
	if err != nil {
		return nil, fmt.Errorf("scan endpoints of %s: %w", p, err)
	}
	s.endpoints = nil
	if err := s.endpointsFrom(p, page); err != nil {
		return nil, err
	}
	blKeys := make([]store.Key, 0, 2*len(s.endpoints))
	for _, ep := range s.endpoints {
		blKeys = append(blKeys, schema.ClassBacklog.Key(ep.id))
	}
	for _, ep := range s.endpoints {
		blKeys = append(blKeys, schema.ClassHead.Key(ep.id))
	}
	rows, err := getMany(ctx, a.Store, p, append(keys, blKeys...))
	if err != nil {
		return nil, err
	}
	bl := rows[len(keys):]
	clear(s.heads)
	for i, ep := range s.endpoints {
		if bl[len(s.endpoints)+i].Found {
			s.heads[ep.id] = true
		}
	}
	if err := s.backlogsFrom(p, func(i int) rowRead { return rowRead{raw: bl[i].Value, found: bl[i].Found} }); err != nil {
		return nil, err
	}
	if err := s.keysFrom(p, rows[:len(keys)], seenAt); err != nil {
		return nil, err
	}
	if s.timers, err = timers.All(ctx, a.Store, p); err != nil {
		return nil, err
	}
	if err := a.readEarlier(ctx, p, s, cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// endpointsFrom decodes the scanned endpoint rows. A namespace over its
// limit of endpoints is ingested into like any other, up to the most one
// outcome's batch takes.
func (s *snapshot) endpointsFrom(p store.Partition, page store.Page) error {
	if len(page.Entries) > MaxIngestEndpoints {
		return fmt.Errorf("%w: %s holds more than %d, the most one outcome's batch can take", ErrTooManyEndpoints, p, MaxIngestEndpoints)
	}
	for _, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassEndpoint {
			return fmt.Errorf("endpoint row of %s: %w", p, corruptf("bad endpoint key"))
		}
		ep, err := schema.DecodeEndpoint(e.Value)
		if err != nil {
			return fmt.Errorf("endpoint %s of %s: %w", pk.Endpoint, p, err)
		}
		s.endpoints = append(s.endpoints, endpointRow{id: pk.Endpoint, key: e.Key, raw: e.Value, ep: ep})
	}
	return nil
}

// backlogsFrom decodes each endpoint's backlog row, as row(i) gives it.
func (s *snapshot) backlogsFrom(p store.Partition, row func(i int) rowRead) error {
	for i, ep := range s.endpoints {
		r := row(i)
		b, err := schema.BacklogOf(r.raw, r.found)
		if err != nil {
			return fmt.Errorf("backlog of %s/%s: %w", p, ep.id, err)
		}
		s.backlogs[ep.id] = backlogRead{rowRead: r, backlog: b}
	}
	return nil
}

// keysFrom takes the sequence (rows[0]) and the seen rows.
func (s *snapshot) keysFrom(p store.Partition, rows []store.Row, seenAt map[string]int) error {
	s.seq = rowRead{raw: rows[0].Value, found: rows[0].Found}
	if s.seq.found {
		var err error
		if s.next, err = schema.DecodeSequence(s.seq.raw); err != nil {
			return fmt.Errorf("sequence of %s: %w", p, err)
		}
	}
	for rid, i := range seenAt {
		s.seen[rid] = rowRead{raw: rows[i].Value, found: rows[i].Found}
	}
	return nil
}

// getMany reads rows in as few round trips as the store allows.
func getMany(ctx context.Context, st store.NamespaceStore, p store.Partition, keys []store.Key) ([]store.Row, error) {
	rows := make([]store.Row, 0, len(keys))
	for chunk := range slices.Chunk(keys, store.MaxBatchOps) {
		r, err := st.GetMany(ctx, p, chunk)
		if err != nil {
			return nil, fmt.Errorf("read rows of %s: %w", p, err)
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// matching is the indexes of the endpoints whose filter takes the item's
// kind, or the one endpoint an event that routes itself names, enabled or
// not: a disabled endpoint keeps accumulating rows to catch up later. An
// endpoint being deleted takes none, so its delete can finish.
func (s *snapshot) matching(it *item) []int {
	var out []int
	for i := range s.endpoints {
		ep := &s.endpoints[i].ep
		takes := ep.Accepts(it.kind)
		if it.to != "" {
			takes = s.endpoints[i].id == it.to
		}
		if takes && ep.DisabledReason != ReasonDeleting {
			out = append(out, i)
		}
	}
	return out
}

// planDeliveryTimer makes sure the stream of endpoint i will be fired for its
// new rows:
//   - enabled, no timer: create one due now with empty state, held by
//     this process when the Appender holds new timers (Appender.Hold);
//   - idle, not backing off, due later: pull it to now, guarded, held by
//     this process when the Appender holds timers (in place when it is
//     due about a lease from now, as a fire that stays leaves it);
//   - backing off: leave it, a failing endpoint is not hammered at the
//     ingest rate; the new rows go when it recovers;
//   - paced (its last fire ran out of its rate_limit's tokens): leave it,
//     due when the next tokens are; pulled, it would fire for nothing;
//   - leased: leave it; the fire's backlog guard fails (this batch changes
//     the backlog) and the runner re-plans, or it reschedules;
//   - disabled: leave it, parked until the endpoint is enabled;
//   - parked (due never) while the endpoint is enabled: pull it to now with
//     its count of failed fires reset, or nothing would ever wake it.
//
// A timer whose state does not decode is left for its handler to report.
func (s *snapshot) planDeliveryTimer(b *store.Batch, i int) {
	ep := &s.endpoints[i]
	if !ep.ep.Enabled {
		return
	}
	var idle *timers.Row
	for j := range s.timers {
		r := &s.timers[j]
		if r.Kind != timers.KindOutcomeDelivery || r.Reference != ep.id {
			continue
		}
		if r.Lease != nil || r.Err != nil {
			// Left alone, but guarded: a fire that ends Done before this
			// batch applies would otherwise leave the new rows no timer.
			b.RequireEquals(r.Key, r.Raw)
			return
		}
		if idle == nil {
			idle = r
		}
	}
	if idle == nil {
		if s.hold > 0 {
			if e, err := timers.NewHeld(s.nowMs, s.hold, timers.KindOutcomeDelivery, ep.id, nil); err == nil {
				b.Put(e.Key, e.Value)
				// Its fire's first read, done by this batch.
				askStreamRows(b, ep.id)
				return
			}
		}
		b.Put(timers.Key(s.nowMs, timers.KindOutcomeDelivery, ep.id), timers.EncodeIdle(nil))
		return
	}
	st, err := schema.DecodeDeliveryState(idle.State)
	if err != nil {
		b.RequireEquals(idle.Key, idle.Raw)
		return
	}
	if idle.DueAtMs == timers.NeverMs {
		// Parked (its endpoint was disabled) though the endpoint is enabled
		// now: nothing else would ever wake it, so start afresh.
		failing := st.FailedFires > 0
		st.FailedFires = 0
		if state, err := schema.EncodeDeliveryState(st); err == nil {
			idle.Replace(b, s.nowMs, state)
			MarkStream(b, ep.id, ep.key, ep.raw, true, failing, false)
		}
		return
	}
	if st.FailedFires > 0 || st.Paced() || idle.DueAtMs <= s.nowMs {
		b.RequireEquals(idle.Key, idle.Raw)
		return
	}
	if s.hold > 0 {
		// Held for this process, as a new timer would be: fired at once,
		// with no claim, and in place when its fire left it to stay.
		if err := idle.Hold(b, s.nowMs, s.hold); err == nil {
			askStreamRows(b, ep.id)
			return
		}
	}
	idle.MoveTo(b, s.nowMs)
}

// timer is the partition's first timer of kind, as read or folded.
func (s *snapshot) timer(kind timers.Kind) (timers.Row, bool) {
	at := slices.IndexFunc(s.timers, func(r timers.Row) bool { return r.Kind == kind })
	if at < 0 {
		return timers.Row{}, false
	}
	return s.timers[at], true
}

// reuse readies the snapshot a run left for the next run, at nowMs and
// under its writer tag. The seen rows it holds are dropped, so it does not
// grow with every outcome a busy partition takes: the next items' rows
// plan as absent, guarded.
func (s *snapshot) reuse(nowMs int64, writer [8]byte) {
	s.nowMs, s.writer = nowMs, writer
	clear(s.seen)
	s.logs = nil
}

// fold follows a committed batch: the rows the snapshot holds take its
// writes as Apply left them, whoever wrote them (this Append, or a fire of
// this process; Coalescer.Observe). It reports false when it cannot
// follow one (an endpoint written, a row that does not decode): the
// snapshot must be read again. A fold that goes wrong is still safe, only
// slower: every row a plan depends on is guarded, so the batch fails and
// the rows are read again.
func (s *snapshot) fold(writes []store.Write) bool {
	for _, w := range writes {
		pk, ok := schema.Parse(w.Key)
		if !ok {
			continue
		}
		switch pk.Class {
		case schema.ClassEndpoint:
			return false
		case schema.ClassSequence:
			v, found, err := w.Applied(s.seq.raw, s.seq.found)
			if err != nil {
				return false
			}
			next := uint64(0)
			if found {
				if next, err = schema.DecodeSequence(v); err != nil {
					return false
				}
			}
			s.seq, s.next = rowRead{raw: v, found: found}, next
		case schema.ClassBacklog:
			cur := s.backlogs[pk.Endpoint]
			v, found, err := w.Applied(cur.raw, cur.found)
			if err != nil {
				return false
			}
			b, err := schema.BacklogOf(v, found)
			if err != nil {
				return false
			}
			s.backlogs[pk.Endpoint] = backlogRead{rowRead: rowRead{raw: v, found: found}, backlog: b}
		case schema.ClassSeen:
			cur := s.seen[pk.RID]
			v, found, err := w.Applied(cur.raw, cur.found)
			if err != nil {
				return false
			}
			s.seen[pk.RID] = rowRead{raw: v, found: found}
		case schema.ClassHead:
			// Only whether a stream has a head counts, which a PutRange
			// (of a present row) leaves as it is.
			if w.Kind == store.Put || w.Kind == store.Delete {
				s.heads[pk.Endpoint] = w.Kind == store.Put
			}
		case schema.ClassTimer:
			at := slices.IndexFunc(s.timers, func(r timers.Row) bool { return r.Key == w.Key })
			var cur rowRead
			if at >= 0 {
				cur = rowRead{raw: s.timers[at].Raw, found: true}
				s.timers = slices.Delete(s.timers, at, at+1)
			}
			v, found, err := w.Applied(cur.raw, cur.found)
			if err != nil {
				return false
			}
			if !found {
				continue
			}
			row, err := timers.DecodeRow(w.Key, v)
			if err != nil {
				return false
			}
			at, _ = slices.BinarySearchFunc(s.timers, row.Key, func(r timers.Row, k store.Key) int { return strings.Compare(string(r.Key), string(k)) })
			s.timers = slices.Insert(s.timers, at, row)
		}
	}
	return true
}
