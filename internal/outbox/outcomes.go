package outbox

import (
	"context"
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
