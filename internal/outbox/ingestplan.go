package outbox

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// dueTimers is what an ingest batch leaves due that no fire holds: the
// delivery timers it writes (a new one, or one pulled forward, each due
// at nowMs), and the idle ones already due by nowMs it depends on, each as
// the batch left it. A stream whose timer is leased, or waits past nowMs,
// needs no fire for these rows. A timer row that does not decode counts
// as due, for its fire to report.
func dueTimers(b *store.Batch, nowMs int64) (due []store.Entry) {
	for _, w := range b.Writes {
		if w.Kind != store.Put {
			continue
		}
		if _, kind, _, ok := timers.ParseKey(w.Key); ok && kind == timers.KindOutcomeDelivery {
			due = append(due, store.Entry{Key: w.Key, Value: w.Value})
		}
	}
	for _, pc := range b.Preconditions {
		if pc.Kind != store.Equals {
			continue
		}
		if at, kind, _, ok := timers.ParseKey(pc.Key); ok && kind == timers.KindOutcomeDelivery && at <= nowMs {
			if row, err := timers.DecodeRow(pc.Key, pc.Value); err != nil || row.Lease == nil {
				due = append(due, store.Entry{Key: pc.Key, Value: pc.Value})
			}
		}
	}
	return due
}

// known is what the failed batches of one Append taught it.
type known struct {
	// sent maps an item (its index in the request) to the seen row a failed
	// batch wrote for it. A client resends a script whose reply was lost,
	// and the resent run fails the guard its first run falsified; finding
	// that exact row (digest and acceptance time) on the next read means the
	// first run committed. Keyed by item, not by reservation id: a later
	// item of the same request under the same id is another outcome.
	sent map[int]store.Value
}

// remember notes the seen rows of the items a failed plan would have
// accepted.
func (k *known) remember(items []*item, pl plan) {
	seen := map[string]store.Value{}
	for _, w := range pl.batch.Writes {
		if pk, ok := schema.Parse(w.Key); ok && pk.Class == schema.ClassSeen && w.Kind == store.Put {
			seen[pk.RID] = w.Value
		}
	}
	for j, d := range pl.decided {
		// Only items this batch wrote: one answered from an earlier lost
		// reply keeps what it was remembered by.
		if v, ok := seen[items[j].rid]; ok && d.status.Code == Accepted {
			k.sent[d.index] = v
		}
	}
}

type decision struct {
	index  int
	status Status
	// log is the log row the batch writes for an item guarded as never
	// accepted before (Status.Log once the batch commits); nil otherwise.
	log store.Value
}

// plan is one batch and the answers it stands for.
type plan struct {
	batch store.Batch
	// decided answers items[:consumed]; accepted of them are in the batch.
	decided  []decision
	consumed int
	accepted int
}

// plan packs the leading items into one batch while it fits MaxBatchOps.
// Items that need no write (duplicate, conflict, no endpoint) are answered
// from the snapshot. The pack stops before a rid already in it, so that item
// sees the first one's seen row.
func (s *snapshot) plan(items []*item, k *known, cfg appendConfig) (plan, error) {
	var pl plan
	var pack []*item
	rids := map[string]bool{}
	// bound is at least the operations of the pack's batch, kept as items
	// join, so that the batch is built once rather than once per item: the
	// sequence guard and write, the sweep timer, a guard per endpoint, and
	// per endpoint used its backlog guard and write, up to three timer
	// operations and its head's creation; per item its seen guard and
	// write, its log row and the guard of an earlier one, and a pending
	// row per endpoint taking it.
	bound := 4 + len(s.endpoints)
	var enc encoded
	used := make([]bool, len(s.endpoints))
	for j, it := range items {
		if rids[it.rid] {
			break
		}
		st, done, err := s.decide(it, k, cfg)
		if err != nil {
			return plan{}, err
		}
		if !done {
			cand := append(pack[:len(pack):len(pack)], it)
			grow := 4
			for _, i := range s.matching(it) {
				grow++
				if !used[i] {
					grow += 7
				}
			}
			exact := -1
			if bound+grow > store.MaxBatchOps {
				// Near the limit the bound is too coarse: count exactly,
				// and go on from the exact count, or every item after
				// would build the whole batch again.
				b, err := s.build(cand, cfg, &enc)
				if err != nil {
					return plan{}, err
				}
				if b.Ops() > store.MaxBatchOps {
					if len(pack) == 0 {
						return plan{}, fmt.Errorf("one outcome needs %d batch operations", b.Ops())
					}
					break
				}
				exact = b.Ops()
			}
			for _, i := range s.matching(it) {
				used[i] = true
			}
			pack, bound = cand, bound+grow
			if exact >= 0 {
				bound = exact
			}
			rids[it.rid] = true
			pl.accepted++
			st = Status{Code: Accepted, Seq: s.next + uint64(len(pack)-1)}
		}
		pl.decided = append(pl.decided, decision{index: it.index, status: st})
		pl.consumed = j + 1
	}
	if len(pack) > 0 {
		var err error
		if pl.batch, err = s.build(pack, cfg, &enc); err != nil {
			return plan{}, err
		}
		// The build encoded each packed item's log row at its place.
		for i, d := range pl.decided {
			if d.status.Code == Accepted && !d.status.Due && !s.seen[items[i].rid].found {
				pl.decided[i].log = enc.logs[d.status.Seq-s.next]
			}
		}
	}
	return pl, nil
}

// decide answers an item that needs no write; done is false for an item to
// accept. A seen row inside the window answers first; then the filters; then
// an outcome of the rid past the window still waiting on a stream (its log
// row has a pending entry), which is never accepted again beside it: one
// pending row per stream and rid, or two deliveries would share one id.
func (s *snapshot) decide(it *item, k *known, cfg appendConfig) (st Status, done bool, err error) {
	if sent, r := k.sent[it.index], s.seen[it.rid]; sent != nil && r.found && bytes.Equal(r.raw, sent) {
		return Status{Code: Accepted, Due: true}, true, nil
	}
	if r := s.seen[it.rid]; r.found {
		seen, err := schema.DecodeSeen(r.raw)
		if err != nil {
			return Status{}, false, fmt.Errorf("seen row of %s: %w", it.rid, err)
		}
		if s.nowMs-seen.AcceptedMs < cfg.windowMs {
			if seen.Matches(it.digest) {
				return Status{Code: Duplicate}, true, nil
			}
			return Status{Code: Conflict, Detail: "a different outcome was already accepted under this reservation_id"}, true, nil
		}
	}
	eps := s.matching(it)
	if len(eps) == 0 {
		return Status{Code: NoEndpoint, Detail: fmt.Sprintf("no endpoint of this namespace receives %s outcomes", it.kind)}, true, nil
	}
	if old, ok := s.earlier(it.rid); ok && slices.ContainsFunc(old.row.Entries, func(e schema.LogEntry) bool { return e.State == schema.EntryPending }) {
		if bytes.Equal(old.row.Record, it.record) {
			return Status{Code: Duplicate}, true, nil
		}
		return Status{Code: Conflict, Detail: "a different outcome under this reservation_id is still waiting for delivery"}, true, nil
	}
	return Status{}, false, nil
}

// encoded holds the log and seen rows build encoded for the items of one
// plan, by their place in its pack. Every build of a plan is of a prefix
// of the same pack, and a pack near the batch limit is built again as
// items join: the rows, the most of its cost, are encoded once.
type encoded struct{ logs, seen []store.Value }

// build is the batch accepting items, all known to be new. A backlog it
// would take past store.MaxCounter is refused (ErrBacklogFull): the store's
// adds refuse a counter beyond it, so no acknowledgement could reduce it.
func (s *snapshot) build(items []*item, cfg appendConfig, enc *encoded) (store.Batch, error) {
	// Sized for streams with heads, so a combined batch of 100 outcomes
	// does not grow its slices a dozen times.
	b := store.Batch{
		Preconditions: make([]store.Precondition, 0, 1+2*len(s.endpoints)+len(items)),
		Writes:        make([]store.Write, 0, 2+2*len(items)+4*len(s.endpoints)),
	}
	matching := make([][]int, len(items))
	added := make([]schema.Backlog, len(s.endpoints))
	used := make([]bool, len(s.endpoints))
	for j, it := range items {
		matching[j] = s.matching(it)
		for _, i := range matching[j] {
			used[i] = true
			added[i].Rows++
			added[i].Bytes += uint64(len(it.record))
		}
	}
	// Preconditions: every row the plan read and depends on, as read.
	// Every endpoint read is guarded, used or not: a filter widened or an
	// endpoint enabled meanwhile changes who must get these outcomes. An
	// endpoint created meanwhile is not seen, as if this ingest came first.
	b.Guard(schema.SequenceKey(), s.seq.raw, s.seq.found)
	for i, ep := range s.endpoints {
		b.RequireEquals(ep.key, ep.raw)
		if !used[i] {
			continue
		}
		bl := s.backlogs[ep.id]
		b.Guard(schema.ClassBacklog.Key(ep.id), bl.raw, bl.found)
	}
	for _, it := range items {
		r := s.seen[it.rid]
		b.Guard(it.seenKey, r.raw, r.found)
		if old, ok := s.earlier(it.rid); ok {
			// Accepted again past the window because nothing waits on the
			// earlier one: a resend of it meanwhile must fail this batch.
			b.RequireEquals(schema.LogKey(old.seq), old.raw)
		}
	}
	// Writes. A stream with a head reads these rows from the log; one
	// without starts its head at its first (whatever it holds pending is
	// below it, in pending rows).
	seq := s.next
	headed := make([]bool, len(s.endpoints))
	for i, ep := range s.endpoints {
		headed[i] = s.heads[ep.id]
	}
	for j, it := range items {
		cached := enc != nil && j < len(enc.logs)
		var l schema.LogRow
		if !cached {
			l = schema.LogRow{RID: it.rid, AcceptedMs: s.nowMs, Trace: it.trace, Record: it.record, Entries: make([]schema.LogEntry, len(matching[j]))}
		}
		for n, i := range matching[j] {
			id := s.endpoints[i].id
			if !cached {
				l.Entries[n] = schema.LogEntry{Endpoint: id, State: schema.EntryPending}
			}
			if !headed[i] {
				b.RequireAbsent(schema.ClassHead.Key(id))
				b.Put(schema.ClassHead.Key(id), schema.EncodeHead(seq))
				headed[i] = true
			}
		}
		var v, seen store.Value
		if cached {
			v, seen = enc.logs[j], enc.seen[j]
		} else {
			var err error
			if v, err = schema.EncodeLog(l); err != nil {
				return store.Batch{}, err
			}
			seen, _ = schema.EncodeSeen(schema.Seen{Digest: it.digest, AcceptedMs: s.nowMs, Writer: s.writer, Logged: true, Seq: seq})
			if enc != nil {
				enc.logs, enc.seen = append(enc.logs, v), append(enc.seen, seen)
			}
		}
		b.Put(schema.LogKey(seq), v)
		b.Put(it.seenKey, seen)
		seq++
	}
	b.Put(schema.SequenceKey(), schema.EncodeSequence(seq))
	for i, ep := range s.endpoints {
		if !used[i] {
			continue
		}
		bl := s.backlogs[ep.id].backlog
		if bl.Rows > store.MaxCounter-added[i].Rows || bl.Bytes > store.MaxCounter-added[i].Bytes {
			return store.Batch{}, fmt.Errorf("%w: endpoint %s holds %d rows of %d bytes", ErrBacklogFull, ep.id, bl.Rows, bl.Bytes)
		}
		b.Put(schema.ClassBacklog.Key(ep.id), schema.EncodeBacklog(schema.Backlog{Rows: bl.Rows + added[i].Rows, Bytes: bl.Bytes + added[i].Bytes}))
	}
	for i := range s.endpoints {
		if used[i] {
			s.planDeliveryTimer(&b, i)
		}
	}
	// A partition holds each sweep timer while it holds rows to sweep. One
	// the snapshot holds is guarded as it reads: a fire may have ended it
	// since (another process's, which no fold follows), and then this
	// batch must put a new one.
	if r, ok := s.timer(timers.KindSeenSweep); ok {
		b.RequireEquals(r.Key, r.Raw)
	} else {
		b.Put(sweepTimerKey(s.nowMs+cfg.windowMs), sweepTimerValue())
	}
	if r, ok := s.timer(timers.KindLogSweep); ok {
		b.RequireEquals(r.Key, r.Raw)
	} else {
		b.Put(logSweepTimerKey(s.nowMs+LogSweepFirst.Milliseconds()), sweepTimerValue())
	}
	return b, nil
}
