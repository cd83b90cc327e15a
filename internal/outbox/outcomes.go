package outbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// Bounds of Admin.Outcomes.
const (
	// MaxOutcomesPage is the most outcomes one page returns.
	MaxOutcomesPage = 100
	// outcomesScan is the most log rows one page reads, whatever its
	// filter: a page may hold fewer outcomes than asked and still have a
	// next one.
	outcomesScan = 200
	// acceptSlack widens a time range's start: processes stamp acceptance
	// by their own clocks, so sequence order is acceptance order only to
	// within their skew.
	acceptSlackMs = 1000
)

// OutcomeFilter selects outcomes of a namespace. Zero fields select all.
type OutcomeFilter struct {
	// Endpoint keeps outcomes that endpoint had (a state of its own, or
	// filtered when it existed then and its kinds did not take it).
	Endpoint string
	// State keeps outcomes in that state: on Endpoint, or on any endpoint.
	State string
	// SinceMs and UntilMs keep outcomes accepted in [SinceMs, UntilMs).
	SinceMs, UntilMs int64
	// Kind keeps outcomes of that kind.
	Kind schema.Kind
	// RIDPrefix keeps outcomes whose reservation id starts with it. No
	// index orders reservation ids (seen rows are kept unordered), so it
	// filters the rows a page reads like the fields above.
	RIDPrefix string
	// NewestFirst lists the outcomes kept newest first.
	NewestFirst bool
}

func (f OutcomeFilter) validate() error {
	switch {
	case f.Endpoint != "" && schema.ValidateEndpointID(f.Endpoint) != nil:
		return schema.ValidateEndpointID(f.Endpoint)
	case f.State != "" && !slices.Contains([]string{"pending", "delivered", "dropped", StateFiltered}, f.State):
		return invalidf("state must be pending, delivered, dropped or filtered")
	case f.State == StateFiltered && f.Endpoint == "":
		return invalidf("state filtered needs an endpoint")
	case f.SinceMs < 0 || f.UntilMs < 0 || (f.UntilMs > 0 && f.UntilMs <= f.SinceMs):
		return invalidf("until must be after since")
	case f.Kind != "" && !f.Kind.Valid():
		return invalidf("kind must be committed, aborted, expired or read_served")
	case f.RIDPrefix != "" && schema.ValidateReservationID(f.RIDPrefix) != nil:
		return invalidf("rid_prefix must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'")
	}
	return nil
}

// OutcomeSummary is one outcome of a page: what it is and its state on each
// endpoint, without its attempts.
type OutcomeSummary struct {
	RID        string
	Seq        uint64
	AcceptedMs int64
	Kind       schema.Kind
	Streams    []OutcomeStream
}

// OutcomesPage is one page of outcomes in the filter's order.
type OutcomesPage struct {
	Outcomes []OutcomeSummary
	// Next resumes after the last row the page read, in the page's order;
	// nil when none follows in the range.
	Next []byte
	// Prev reads the rows before the page's first, in the page's order;
	// nil on a first page. A page it reads may be empty.
	Prev []byte
}

// streamStates is the state of a log row's outcome on each endpoint that
// existed when it was accepted.
func streamStates(seq uint64, l schema.LogRow, eps []endpointRow) []OutcomeStream {
	var out []OutcomeStream
	for _, ep := range eps {
		if !took(&ep.ep, seq, l.AcceptedMs) {
			continue
		}
		s := OutcomeStream{Endpoint: ep.id, State: StateFiltered}
		if en, ok := l.Entry(ep.id); ok {
			s.State = en.State.String()
			if en.State != schema.EntryPending {
				s.AtMs = en.AtMs
			}
		}
		out = append(out, s)
	}
	return out
}

func (f OutcomeFilter) matches(streams []OutcomeStream) bool {
	if f.Endpoint == "" && f.State == "" {
		return true
	}
	for _, s := range streams {
		if (f.Endpoint == "" || s.Endpoint == f.Endpoint) && (f.State == "" || s.State == f.State) {
			return true
		}
	}
	return false
}

// firstAcceptedAt is the sequence number of the first log row accepted at
// or after atMs, by binary search over the sequence numbers, one one-row
// scan per step; the namespace's next sequence number when there is none.
// Rows gone from the log leave gaps, so each step looks at the first row at
// or after its middle.
//
// A row that does not decode has no known time, so a step that lands on
// one goes by the first readable row of the few after it (readableAfter),
// as every step assumes sequence order is acceptance order: that row
// before atMs puts the unreadable ones before it too, otherwise the range
// starts no later than the step's middle. Neither skips a readable row in
// range; at worst the range starts at a few rows it then reads past.
func firstAcceptedAt(ctx context.Context, st store.NamespaceStore, p store.Partition, atMs int64) (uint64, error) {
	v, found, err := st.Get(ctx, p, schema.SequenceKey())
	if err != nil {
		return 0, fmt.Errorf("read sequence of %s: %w", p, err)
	}
	var hi uint64
	if found {
		if hi, err = schema.DecodeSequence(v); err != nil {
			return 0, err
		}
	}
	_, end := schema.LogRange()
	lo := uint64(0)
	for lo < hi {
		mid := lo + (hi-lo)/2
		page, err := st.Scan(ctx, p, schema.LogKey(mid), end, nil, 1)
		if err != nil {
			return 0, fmt.Errorf("scan log of %s: %w", p, err)
		}
		if len(page.Entries) == 0 {
			hi = mid
			continue
		}
		seq, acceptedMs, ok, err := readableAfter(ctx, st, p, page.Entries[0], end)
		if err != nil {
			return 0, err
		}
		if ok && acceptedMs < atMs {
			lo = max(seq, mid) + 1
			continue
		}
		hi = mid
	}
	return lo, nil
}

// unreadableLook bounds the rows a step of firstAcceptedAt reads past
// unreadable ones for one that decodes.
const unreadableLook = 8

// readableAfter is the sequence number and acceptance time of row e, or,
// when it does not decode, of the first of the unreadableLook rows after
// it that does; ok is false when none does.
func readableAfter(ctx context.Context, st store.NamespaceStore, p store.Partition, e store.Entry, end store.Key) (seq uint64, acceptedMs int64, ok bool, err error) {
	if l, err := schema.DecodeLog(e.Value); err == nil {
		pk, _ := schema.Parse(e.Key)
		return pk.Seq, l.AcceptedMs, true, nil
	}
	page, err := st.Scan(ctx, p, e.Key, end, store.CursorAfter(e.Key), unreadableLook)
	if err != nil {
		return 0, 0, false, fmt.Errorf("scan log of %s: %w", p, err)
	}
	for _, e := range page.Entries {
		if l, err := schema.DecodeLog(e.Value); err == nil {
			pk, _ := schema.Parse(e.Key)
			return pk.Seq, l.AcceptedMs, true, nil
		}
	}
	return 0, 0, false, nil
}

// Outcomes pages through the namespace's retained outcomes, filtered, in
// acceptance (sequence) order or, with f.NewestFirst, newest first,
// reading at most outcomesScan log rows per page. The cursor is a page's
// Next or Prev (nil for the first page): it names a position and a way
// from it, so that either cursor serves either order.
func (a *Admin) Outcomes(ctx context.Context, p store.Partition, f OutcomeFilter, cursor []byte, limit int) (OutcomesPage, error) {
	if err := p.Validate(); err != nil {
		return OutcomesPage{}, err
	}
	if err := f.validate(); err != nil {
		return OutcomesPage{}, err
	}
	if limit < 1 || limit > MaxOutcomesPage {
		return OutcomesPage{}, invalidf("limit must be 1 to %d", MaxOutcomesPage)
	}
	at, err := decodeLogCursor(cursor)
	if err != nil {
		return OutcomesPage{}, err
	}
	eps, err := readEndpoints(ctx, a.Store, p)
	if err != nil {
		return OutcomesPage{}, err
	}
	if f.Endpoint != "" && !slices.ContainsFunc(eps, func(e endpointRow) bool { return e.id == f.Endpoint }) {
		return OutcomesPage{}, ErrNotFound
	}
	w := logWalk{a: a, p: p, f: f, eps: eps, limit: limit}
	// Without a cursor the walk starts at the end the order starts at.
	back := at != nil && at.before || at == nil && f.NewestFirst
	var out OutcomesPage
	var cont, rev *logCursor
	if back {
		out.Outcomes, cont, err = w.backward(ctx, at)
	} else {
		out.Outcomes, cont, err = w.forward(ctx, at)
	}
	if err != nil {
		return OutcomesPage{}, err
	}
	if at != nil {
		// Whence the cursor came: the page the walk turned from.
		switch {
		case len(out.Outcomes) > 0 && back:
			rev = &logCursor{seq: out.Outcomes[0].Seq}
		case len(out.Outcomes) > 0:
			rev = &logCursor{seq: out.Outcomes[0].Seq, before: true}
		case back:
			rev = &logCursor{seq: at.seq - 1}
		default:
			rev = &logCursor{seq: at.seq + 1, before: true}
		}
	}
	if back != f.NewestFirst {
		// The walk went against the order: its rows read the other way,
		// and what it would read next is the order's previous page.
		slices.Reverse(out.Outcomes)
		cont, rev = rev, cont
	}
	out.Next, out.Prev = cont.encode(), rev.encode()
	return out, nil
}

// logCursor is a position in the namespace's log: the rows after seq, or,
// before, the rows before it.
type logCursor struct {
	seq    uint64
	before bool
}

// A cursor's bytes: the 8 of the sequence number for after, as the list
// always answered, or a tag and the 8 for before.
const logCursorBefore = 'b'

func (c *logCursor) encode() []byte {
	if c == nil {
		return nil
	}
	if c.before {
		return binary.BigEndian.AppendUint64([]byte{logCursorBefore}, c.seq)
	}
	return binary.BigEndian.AppendUint64(nil, c.seq)
}

func decodeLogCursor(b []byte) (*logCursor, error) {
	switch {
	case b == nil:
		return nil, nil
	case len(b) == 8:
		return &logCursor{seq: binary.BigEndian.Uint64(b)}, nil
	case len(b) == 9 && b[0] == logCursorBefore && binary.BigEndian.Uint64(b[1:]) > 0:
		return &logCursor{seq: binary.BigEndian.Uint64(b[1:]), before: true}, nil
	}
	return nil, invalidf("cursor is not a position of this namespace's outcomes")
}

// logWalk reads one page of a namespace's log for Outcomes.
type logWalk struct {
	a     *Admin
	p     store.Partition
	f     OutcomeFilter
	eps   []endpointRow
	limit int
}

// keep reports the summary of the log row at seq when the filter keeps
// it; a row that does not decode is kept in the log and skipped, as
// delivery does.
func (w *logWalk) keep(seq uint64, v store.Value) (OutcomeSummary, bool) {
	l, err := schema.DecodeLog(v)
	if err != nil || !strings.HasPrefix(l.RID, w.f.RIDPrefix) {
		return OutcomeSummary{}, false
	}
	if l.AcceptedMs < w.f.SinceMs || (w.f.UntilMs > 0 && l.AcceptedMs >= w.f.UntilMs) {
		return OutcomeSummary{}, false
	}
	sum := OutcomeSummary{RID: l.RID, Seq: seq, AcceptedMs: l.AcceptedMs, Streams: streamStates(seq, l, w.eps)}
	if !w.f.matches(sum.Streams) {
		return OutcomeSummary{}, false
	}
	if o, err := schema.DecodeRecord(l.RID, l.Record); err == nil {
		sum.Kind = o.Kind()
	}
	if w.f.Kind != "" && sum.Kind != w.f.Kind {
		return OutcomeSummary{}, false
	}
	return sum, true
}

// forward reads the log in sequence order from the range's start, or
// after the cursor, and answers the position it would read on from.
func (w *logWalk) forward(ctx context.Context, at *logCursor) ([]OutcomeSummary, *logCursor, error) {
	start, end := schema.LogRange()
	var after *store.Cursor
	switch {
	case at != nil:
		after = store.CursorAfter(schema.LogKey(at.seq))
	case w.f.SinceMs > 0:
		seq, err := firstAcceptedAt(ctx, w.a.Store, w.p, w.f.SinceMs-acceptSlackMs)
		if err != nil {
			return nil, nil, err
		}
		start = schema.LogKey(seq)
	}
	page, err := w.a.Store.Scan(ctx, w.p, start, end, after, outcomesScan)
	if err != nil {
		return nil, nil, fmt.Errorf("scan log of %s: %w", w.p, err)
	}
	var out []OutcomeSummary
	var lastSeq uint64
	for i, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassLog {
			return nil, nil, fmt.Errorf("log row of %s: %w", w.p, corruptf("bad log key"))
		}
		lastSeq = pk.Seq
		if w.f.UntilMs > 0 {
			if l, err := schema.DecodeLog(e.Value); err == nil && l.AcceptedMs >= w.f.UntilMs+acceptSlackMs {
				return out, nil, nil
			}
		}
		sum, ok := w.keep(pk.Seq, e.Value)
		if !ok {
			continue
		}
		out = append(out, sum)
		if len(out) == w.limit {
			if i < len(page.Entries)-1 || page.Next != nil {
				return out, &logCursor{seq: pk.Seq}, nil
			}
			return out, nil, nil
		}
	}
	if page.Next != nil {
		return out, &logCursor{seq: lastSeq}, nil
	}
	return out, nil, nil
}

// backward reads the log newest first from the range's end, or before the
// cursor. Log keys are the sequence numbers, so it reads the
// outcomesScan numbers below its start by key, in one GetMany, down to the
// oldest row the range holds: a number without a row (an outcome erased,
// or one taken by an endpoint's creation) costs its place in the budget
// as a scanned row would.
func (w *logWalk) backward(ctx context.Context, at *logCursor) ([]OutcomeSummary, *logCursor, error) {
	st, p := w.a.Store, w.p
	var hi uint64 // the walk reads below hi
	switch {
	case at != nil:
		hi = at.seq
	case w.f.UntilMs > 0:
		seq, err := firstAcceptedAt(ctx, st, p, w.f.UntilMs+acceptSlackMs)
		if err != nil {
			return nil, nil, err
		}
		hi = seq
	default:
		v, found, err := st.Get(ctx, p, schema.SequenceKey())
		if err != nil {
			return nil, nil, fmt.Errorf("read sequence of %s: %w", p, err)
		}
		if found {
			if hi, err = schema.DecodeSequence(v); err != nil {
				return nil, nil, err
			}
		}
	}
	// The oldest row of the range bounds the walk: below it the log holds
	// nothing, swept or never written.
	start, end := schema.LogRange()
	if w.f.SinceMs > 0 {
		seq, err := firstAcceptedAt(ctx, st, p, w.f.SinceMs-acceptSlackMs)
		if err != nil {
			return nil, nil, err
		}
		start = schema.LogKey(seq)
	}
	first, err := st.Scan(ctx, p, start, end, nil, 1)
	if err != nil {
		return nil, nil, fmt.Errorf("scan log of %s: %w", p, err)
	}
	if len(first.Entries) == 0 {
		return nil, nil, nil
	}
	pk, ok := schema.Parse(first.Entries[0].Key)
	if !ok || pk.Class != schema.ClassLog {
		return nil, nil, fmt.Errorf("log row of %s: %w", p, corruptf("bad log key"))
	}
	floor := pk.Seq
	if hi <= floor {
		return nil, nil, nil
	}
	lo := floor
	if hi-floor > outcomesScan {
		lo = hi - outcomesScan
	}
	keys := make([]store.Key, 0, hi-lo)
	for seq := hi; seq > lo; seq-- {
		keys = append(keys, schema.LogKey(seq-1))
	}
	rows, err := st.GetMany(ctx, p, keys)
	if err != nil {
		return nil, nil, fmt.Errorf("read log of %s: %w", p, err)
	}
	var out []OutcomeSummary
	for i, r := range rows {
		seq := hi - 1 - uint64(i)
		if !r.Found {
			continue
		}
		if w.f.SinceMs > 0 {
			if l, err := schema.DecodeLog(r.Value); err == nil && l.AcceptedMs < w.f.SinceMs-acceptSlackMs {
				return out, nil, nil
			}
		}
		sum, ok := w.keep(seq, r.Value)
		if !ok {
			continue
		}
		out = append(out, sum)
		if len(out) == w.limit {
			if seq > floor {
				return out, &logCursor{seq: seq, before: true}, nil
			}
			return out, nil, nil
		}
	}
	if lo > floor {
		return out, &logCursor{seq: lo, before: true}, nil
	}
	return out, nil, nil
}
