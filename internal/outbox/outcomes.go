package outbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

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

// OutcomesPage is one page of outcomes in acceptance order.
type OutcomesPage struct {
	Outcomes []OutcomeSummary
	// Next resumes after the last row the page read; nil when none
	// follows in the range.
	Next []byte
}

// Outcomes pages through the namespace's retained outcomes in acceptance
// (sequence) order, filtered, reading at most outcomesScan log rows per
// page, after the position next of an earlier page.
func (a *Admin) Outcomes(ctx context.Context, p store.Partition, f OutcomeFilter, next []byte, limit int) (OutcomesPage, error) {
	if err := p.Validate(); err != nil {
		return OutcomesPage{}, err
	}
	switch {
	case limit < 1 || limit > MaxOutcomesPage:
		return OutcomesPage{}, invalidf("limit must be 1 to %d", MaxOutcomesPage)
	case f.Endpoint != "" && schema.ValidateEndpointID(f.Endpoint) != nil:
		return OutcomesPage{}, schema.ValidateEndpointID(f.Endpoint)
	case f.State != "" && !slices.Contains([]string{"pending", "delivered", "dropped", StateFiltered}, f.State):
		return OutcomesPage{}, invalidf("state must be pending, delivered, dropped or filtered")
	case f.State == StateFiltered && f.Endpoint == "":
		return OutcomesPage{}, invalidf("state filtered needs an endpoint")
	case f.SinceMs < 0 || f.UntilMs < 0 || (f.UntilMs > 0 && f.UntilMs <= f.SinceMs):
		return OutcomesPage{}, invalidf("until must be after since")
	}
	eps, err := readEndpoints(ctx, a.Store, p)
	if err != nil {
		return OutcomesPage{}, err
	}
	if f.Endpoint != "" && !slices.ContainsFunc(eps, func(e endpointRow) bool { return e.id == f.Endpoint }) {
		return OutcomesPage{}, ErrNotFound
	}
	start, end := schema.LogRange()
	var after *store.Cursor
	switch {
	case next != nil:
		if len(next) != 8 {
			return OutcomesPage{}, invalidf("cursor is not a position of this namespace's outcomes")
		}
		after = store.CursorAfter(schema.LogKey(binary.BigEndian.Uint64(next)))
	case f.SinceMs > 0:
		seq, err := firstAcceptedAt(ctx, a.Store, p, f.SinceMs-acceptSlackMs)
		if err != nil {
			return OutcomesPage{}, err
		}
		start = schema.LogKey(seq)
	}
	page, err := a.Store.Scan(ctx, p, start, end, after, outcomesScan)
	if err != nil {
		return OutcomesPage{}, fmt.Errorf("scan log of %s: %w", p, err)
	}
	var out OutcomesPage
	var lastSeq uint64
	for i, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassLog {
			return OutcomesPage{}, fmt.Errorf("log row of %s: %w", p, corruptf("bad log key"))
		}
		lastSeq = pk.Seq
		l, err := schema.DecodeLog(e.Value)
		if err != nil {
			// Kept, and skipped, as delivery does.
			continue
		}
		if f.UntilMs > 0 && l.AcceptedMs >= f.UntilMs+acceptSlackMs {
			return out, nil
		}
		if l.AcceptedMs < f.SinceMs || (f.UntilMs > 0 && l.AcceptedMs >= f.UntilMs) {
			continue
		}
		sum := OutcomeSummary{RID: l.RID, Seq: pk.Seq, AcceptedMs: l.AcceptedMs, Streams: streamStates(pk.Seq, l, eps)}
		if !f.matches(sum.Streams) {
			continue
		}
		if o, err := schema.DecodeRecord(l.RID, l.Record); err == nil {
			sum.Kind = o.Kind()
		}
		out.Outcomes = append(out.Outcomes, sum)
		if len(out.Outcomes) == limit {
			if i < len(page.Entries)-1 || page.Next != nil {
				out.Next = binary.BigEndian.AppendUint64(nil, pk.Seq)
			}
			return out, nil
		}
	}
	if page.Next != nil {
		out.Next = binary.BigEndian.AppendUint64(nil, lastSeq)
	}
	return out, nil
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
