package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// ErrNoRegistry: the Admin's store keeps no registry of namespaces.
var ErrNoRegistry = errors.New("outbox: the store keeps no registry of namespaces")

// NamespaceSummary is one namespace as the registry lists it.
type NamespaceSummary struct {
	Partition store.Partition
	// Endpoints counts the namespace's endpoint rows, one being deleted
	// included.
	Endpoints int
	// Backlog sums its streams' backlogs.
	Backlog schema.Backlog
	// Failing counts the endpoints that need an operator: disabled by
	// relay (a 410, failing too long) or being deleted, or whose stream's
	// last fire delivered nothing and failed (backing off), or whose row or
	// timer does not decode.
	Failing int
	// Disabled counts the endpoints an operator disabled: on purpose, so
	// not failing, whatever their stream did before.
	Disabled int
}

// NamespacePage is one page of Admin.Namespaces. Next is the cursor of the
// next page, nil at the end.
type NamespacePage struct {
	Namespaces []NamespaceSummary
	Next       []byte
}

// summaryPage bounds one scan of a namespace's endpoint or backlog rows:
// there is one of each per endpoint, within the limit of endpoints but for
// a namespace an earlier version let pass it. One holding more is read in
// more pages.
const summaryPage = 32

// summaryReaders bounds the namespaces of a page read at once.
const summaryReaders = 16

// Namespaces lists the registered namespaces (those with an endpoint) from
// the cursor on (nil for the first page, else a page's Next; anything else
// is refused with ErrInvalid), in the registry's order (store.ListRegistered: bucket by
// bucket, by name within one), up to limit of them, each with its endpoint
// count and backlog. It reads the registry page, then for each namespace
// its endpoint and backlog rows at one instant, and nothing else, so a
// page costs the same whatever the number of namespaces. A namespace whose
// last endpoint went between the two reads is left out, so a page may hold
// fewer than limit namespaces and still have a next cursor. It writes
// nothing.
func (a *Admin) Namespaces(ctx context.Context, cursor []byte, limit int) (NamespacePage, error) {
	return a.NamespacesIn(ctx, NamespaceFilter{}, cursor, limit)
}

// NamespaceFilter narrows Admin.NamespacesIn.
type NamespaceFilter struct {
	// Prefix keeps the namespaces whose name starts with it.
	Prefix string
	// Failing lists only the namespaces with a failing endpoint, Disabled
	// only those with an endpoint an operator disabled, from the store's
	// flag sets (store.SetFlagA, SetFlagB): a page costs what it lists,
	// however few of the namespaces are so. At most one of the two.
	Failing, Disabled bool
}

// NamespacesIn is Namespaces narrowed by f: the same walk and cursors,
// over the set f names, keeping f's prefix.
func (a *Admin) NamespacesIn(ctx context.Context, f NamespaceFilter, cursor []byte, limit int) (NamespacePage, error) {
	reg, ok := a.Store.(store.Registry)
	if !ok {
		return NamespacePage{}, ErrNoRegistry
	}
	if f.Failing && f.Disabled {
		return NamespacePage{}, invalidf("failing and disabled are not asked together")
	}
	var from store.RegistryCursor
	if cursor != nil {
		var err error
		if from, err = store.ParseRegistryCursor(reg, cursor); err != nil {
			return NamespacePage{}, invalidf("cursor must be a next_cursor this API returned")
		}
	}
	narrowed := f.Prefix != "" || f.Failing || f.Disabled
	var page store.RegistryPage
	var err error
	switch tot, ok := a.Store.(store.Totals); {
	case !narrowed:
		page, err = store.ListRegistered(ctx, reg, from, limit)
	case !ok:
		return NamespacePage{}, ErrNoRegistry
	default:
		set := store.SetRegistered
		switch {
		case f.Failing:
			set = store.SetFlagA
		case f.Disabled:
			set = store.SetFlagB
		}
		page, err = store.ListSet(ctx, tot, set, f.Prefix, from, limit)
	}
	if err != nil {
		return NamespacePage{}, fmt.Errorf("list namespaces: %w", err)
	}
	sums := make([]NamespaceSummary, len(page.Partitions))
	errs := make([]error, len(page.Partitions))
	var wg sync.WaitGroup
	sem := make(chan struct{}, summaryReaders)
	for i, p := range page.Partitions {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sums[i], errs[i] = a.summary(ctx, p)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return NamespacePage{}, err
	}
	out := NamespacePage{Namespaces: make([]NamespaceSummary, 0, len(sums))}
	if page.Next != nil {
		out.Next = page.Next.Bytes()
	}
	for _, s := range sums {
		if s.Endpoints > 0 {
			out.Namespaces = append(out.Namespaces, s)
		}
	}
	return out, nil
}

// summary reads p's endpoint, backlog and timer rows, in one round trip on
// a store.MultiReader.
func (a *Admin) summary(ctx context.Context, p store.Partition) (NamespaceSummary, error) {
	s := NamespaceSummary{Partition: p}
	es, ee := schema.EndpointRange()
	bs, be := schema.ClassRange(schema.ClassBacklog)
	ts, te := schema.ClassRange(schema.ClassTimer)
	reads := []store.Read{{Start: es, End: ee, Limit: summaryPage}, {Start: bs, End: be, Limit: summaryPage}, {Start: ts, End: te, Limit: summaryPage}}
	// The endpoints, and which of them (or of the timers' references) fail.
	ids, failing, disabled := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for len(reads) > 0 {
		res, err := store.ReadMany(ctx, a.Store, p, reads)
		if err != nil {
			return s, fmt.Errorf("read the summary of %s: %w", p, err)
		}
		var again []store.Read
		for i, r := range res {
			switch reads[i].Start {
			case es:
				s.Endpoints += len(r.Page.Entries)
				for _, e := range r.Page.Entries {
					id, _ := schema.ClassEndpoint.ID(e.Key)
					ids[id] = true
					switch ep, err := schema.DecodeEndpoint(e.Value); {
					case err != nil:
						failing[id] = true
					case !ep.Enabled && ep.DisabledReason == "":
						// An operator's disable gives no reason; relay's
						// always do.
						disabled[id] = true
					case !ep.Enabled:
						failing[id] = true
					}
				}
			case ts:
				for _, e := range r.Page.Entries {
					if id, bad := failingStream(e); bad {
						failing[id] = true
					}
				}
			default:
				var b NamespaceBacklog
				if _, err := sumBacklogs(p, r.Page.Entries, &b, nil); err != nil {
					return s, err
				}
				s.Backlog.Rows += b.Rows
				s.Backlog.Bytes += b.Bytes
			}
			if r.Page.Next != nil {
				next := reads[i]
				next.After = r.Page.Next
				again = append(again, next)
			}
		}
		reads = again
	}
	for id := range ids {
		switch {
		case disabled[id]:
			s.Disabled++
		case failing[id]:
			s.Failing++
		}
	}
	return s, nil
}

// failingStream reports the endpoint of a delivery timer whose state
// counts fires in a row that delivered nothing, or does not decode; other
// timers name none.
func failingStream(e store.Entry) (string, bool) {
	row, err := timers.DecodeRow(e.Key, e.Value)
	if err != nil {
		return "", false // not a stream's: the timers' own reads report it
	}
	if row.Kind != timers.KindOutcomeDelivery {
		return "", false
	}
	st, err := schema.DecodeDeliveryState(row.State)
	return row.Reference, err != nil || st.FailedFires > 0
}
