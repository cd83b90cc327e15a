package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// Fleet totals. Each endpoint holds a failing mark (schema.ClassFailingMark)
// while it is failing as the namespaces summary counts it, and a disabled
// mark (schema.ClassDisabledMark) while an operator has it disabled; the
// store keeps, per bucket, the set of namespaces holding each mark and the
// sums of their backlog rows (store.Totals), in the batch that writes the
// marks and rows. So the fleet's figures cost one read per bucket.
//
// An endpoint is failing when its row does not decode, relay disabled it
// (a 410, failing too long) or it is being deleted, or, enabled, its
// stream's delivery timer counts failed fires (or its state does not
// decode). An operator's disable is on purpose: failing never.
//
// The marks follow two rows written by different writers: the endpoint
// row (operators, and delivery's disable) and the delivery timer (fires).
// Each writer keeps the part it owns and guards the other's:
//   - a change of the endpoint's class (enabled, disabled by an operator,
//     failing by its row, absent) writes both marks; into enabled, the
//     failing mark follows the timer as the batch leaves it, and the batch
//     guards the timer (MarkEndpoint);
//   - a fire or an admin reset that takes a stream's failed fires from 0
//     to more or back writes the failing mark, guarded by the endpoint row
//     as read, and only while that row is enabled (MarkStream).

// EndpointClass is how an endpoint row counts in the fleet's totals.
type EndpointClass uint8

// Endpoint classes.
const (
	// ClassAbsent: no row.
	ClassAbsent EndpointClass = iota
	// ClassEnabled: failing or not as its stream says.
	ClassEnabled
	// ClassOperatorDisabled: disabled by an operator, so not failing.
	ClassOperatorDisabled
	// ClassFailingRow: disabled by relay, being deleted, or not decoding.
	ClassFailingRow
)

// ClassOf is the class of an endpoint row as read.
func ClassOf(raw store.Value, found bool) EndpointClass {
	if !found {
		return ClassAbsent
	}
	ep, err := schema.DecodeEndpoint(raw)
	switch {
	case err != nil:
		return ClassFailingRow
	case ep.Enabled:
		return ClassEnabled
	case ep.DisabledReason == "":
		// An operator's disable gives no reason; relay's always do.
		return ClassOperatorDisabled
	}
	return ClassFailingRow
}

// StateFailing reports whether a delivery timer's state counts failed
// fires, or does not decode; a stream with no timer fails not.
func StateFailing(state []byte) bool {
	st, err := schema.DecodeDeliveryState(state)
	return err != nil || st.FailedFires > 0
}

// timerFailing is StateFailing of a timer as read; nil fails not.
func timerFailing(t *timers.Row) bool {
	return t != nil && StateFailing(t.State)
}

// MarkEndpoint adds to b the marks of endpoint id as its row goes from
// class from to class to. Into ClassEnabled the failing mark is
// streamFailing, the stream as the batch leaves it, which the caller
// guards (or whose absence of a timer it knows: a timer created
// meanwhile starts with no failed fire). A batch that keeps the class
// writes no mark.
func MarkEndpoint(b *store.Batch, id string, from, to EndpointClass, streamFailing bool) {
	if from == to {
		return
	}
	failing, disabled := schema.ClassFailingMark.Key(id), schema.ClassDisabledMark.Key(id)
	switch to {
	case ClassAbsent:
		b.Delete(failing)
		b.Delete(disabled)
	case ClassOperatorDisabled:
		b.Delete(failing)
		b.Put(disabled, nil)
	case ClassFailingRow:
		b.Put(failing, nil)
		b.Delete(disabled)
	case ClassEnabled:
		b.Delete(disabled)
		if streamFailing {
			b.Put(failing, nil)
		} else {
			b.Delete(failing)
		}
	}
}

// MarkStream adds to b the failing mark of endpoint id's stream as its
// failed fires go from was to now, when they cross zero and the endpoint
// row, as read in epRaw, is enabled; the batch then guards that row. Any
// other class owns the mark itself (MarkEndpoint).
func MarkStream(b *store.Batch, id string, epKey store.Key, epRaw store.Value, epFound, was, now bool) {
	if was == now || ClassOf(epRaw, epFound) != ClassEnabled {
		return
	}
	b.RequireEquals(epKey, epRaw)
	if now {
		b.Put(schema.ClassFailingMark.Key(id), nil)
	} else {
		b.Delete(schema.ClassFailingMark.Key(id))
	}
}

// markWake adds the marks of an endpoint row enabled by an operator's
// change to the stream s read, whose timer planWake wakes: an idle timer
// loses its failed fires there, and a leased or undecodable one, which
// planWake guards, keeps them.
func markWake(b *store.Batch, s *streamRead, id string, from EndpointClass) {
	t := s.timer
	failing := false
	if t != nil && (t.Lease != nil || t.Err != nil || !decodes(t.State)) {
		failing = timerFailing(t)
	}
	MarkEndpoint(b, id, from, ClassEnabled, failing)
}

func decodes(state []byte) bool {
	_, err := schema.DecodeDeliveryState(state)
	return err == nil
}

// classOfRow is the class of the endpoint row s read.
func (s *streamRead) class() EndpointClass {
	if s.ep == nil {
		return ClassAbsent
	}
	return ClassOf(s.ep.raw, true)
}

// Remark makes the marks of namespace p what its endpoint rows and
// delivery timers say, in one batch guarded by every row it read, and
// reports whether it changed any. It repairs a namespace written before
// relay kept marks (RemarkAll), and tests hold the marks to it: after any
// mix of changes it finds nothing to change.
func (a *Admin) Remark(ctx context.Context, p store.Partition) (bool, error) {
	for range adminRetries {
		changed, ok, err := a.remark(ctx, p)
		if err != nil || ok {
			return changed, err
		}
	}
	return false, fmt.Errorf("%w: %s", ErrContended, p)
}

func (a *Admin) remark(ctx context.Context, p store.Partition) (changed, ok bool, err error) {
	es, ee := schema.EndpointRange()
	ts, te := schema.ClassRange(schema.ClassTimer)
	fs, fe := schema.ClassRange(schema.ClassFailingMark)
	ds, de := schema.ClassRange(schema.ClassDisabledMark)
	reads := []store.Read{{Start: es, End: ee, Limit: summaryPage}, {Start: ts, End: te, Limit: summaryPage},
		{Start: fs, End: fe, Limit: summaryPage}, {Start: ds, End: de, Limit: summaryPage}}
	var b store.Batch
	class := map[string]EndpointClass{}
	streamFailing := map[string]bool{}
	marked := [2]map[string]bool{{}, {}}
	for len(reads) > 0 {
		res, err := store.ReadMany(ctx, a.Store, p, reads)
		if err != nil {
			return false, false, fmt.Errorf("read the marks of %s: %w", p, err)
		}
		var again []store.Read
		for i, r := range res {
			for _, e := range r.Page.Entries {
				b.RequireEquals(e.Key, e.Value)
				switch reads[i].Start {
				case es:
					id, _ := schema.ClassEndpoint.ID(e.Key)
					class[id] = ClassOf(e.Value, true)
				case ts:
					if id, bad := failingStream(e); bad {
						streamFailing[id] = true
					}
				case fs:
					id, _ := schema.ClassFailingMark.ID(e.Key)
					marked[0][id] = true
				default:
					id, _ := schema.ClassDisabledMark.ID(e.Key)
					marked[1][id] = true
				}
			}
			if r.Page.Next != nil {
				next := reads[i]
				next.After = r.Page.Next
				again = append(again, next)
			}
		}
		reads = again
	}
	want := [2]map[string]bool{{}, {}}
	for id, c := range class {
		want[0][id] = c == ClassFailingRow || c == ClassEnabled && streamFailing[id]
		want[1][id] = c == ClassOperatorDisabled
	}
	keys := [2]schema.Class{schema.ClassFailingMark, schema.ClassDisabledMark}
	for i := range want {
		for id, w := range want[i] {
			if w && !marked[i][id] {
				b.Put(keys[i].Key(id), nil)
			}
		}
		for id := range marked[i] {
			if !want[i][id] {
				b.Delete(keys[i].Key(id))
			}
		}
	}
	if len(b.Writes) == 0 {
		return false, true, nil
	}
	ok, err = a.apply(ctx, p, b)
	return ok, ok, err
}

// Fleet is what every namespace holds, as the store's bucket totals keep
// it (store.Totals).
type Fleet struct {
	// FailingNamespaces counts the namespaces with a failing endpoint.
	FailingNamespaces int64
	// DisabledNamespaces counts the namespaces with an endpoint an
	// operator disabled, failing or not.
	DisabledNamespaces int64
	// Backlog sums every stream's backlog.
	Backlog schema.Backlog
}

// Fleet reads the fleet's totals: one read per bucket, whatever the
// number of namespaces. ErrNoRegistry when the store keeps no totals.
func (a *Admin) Fleet(ctx context.Context) (Fleet, error) {
	tot, ok := a.Store.(store.Totals)
	if !ok {
		return Fleet{}, ErrNoRegistry
	}
	t, err := store.SumTotals(ctx, tot)
	if err != nil {
		return Fleet{}, fmt.Errorf("read fleet totals: %w", err)
	}
	return Fleet{
		FailingNamespaces:  t.Flagged[0],
		DisabledNamespaces: t.Flagged[1],
		Backlog:            schema.Backlog{Rows: uint64(max(t.Sums[0], 0)), Bytes: uint64(max(t.Sums[1], 0))},
	}, nil
}

// RebuildFleet gives a keyspace written before relay kept the fleet's
// totals its marks and totals, once: it marks every registered namespace
// (Remark), then has the store recount every bucket from its rows
// (store.Recounter), then records that the totals are kept. A keyspace
// that already keeps them costs one read. Several processes may run it at
// once: each step is as right run twice. It reports whether it rebuilt.
func (a *Admin) RebuildFleet(ctx context.Context) (bool, error) {
	rc, ok := a.Store.(store.Recounter)
	if !ok {
		return false, nil
	}
	if kept, err := rc.TotalsKept(ctx); err != nil || kept {
		return false, err
	}
	reg, ok := a.Store.(store.Registry)
	if !ok {
		return false, ErrNoRegistry
	}
	var from store.RegistryCursor
	for {
		page, err := store.ListRegistered(ctx, reg, from, store.MaxRegistryPage)
		if err != nil {
			return false, fmt.Errorf("list namespaces: %w", err)
		}
		for _, p := range page.Partitions {
			if _, err := a.Remark(ctx, p); err != nil {
				return false, err
			}
		}
		if page.Next == nil {
			break
		}
		from = *page.Next
	}
	for b := range rc.Buckets() {
		if err := rc.Recount(ctx, b); err != nil {
			return false, err
		}
	}
	return true, rc.RecordTotalsKept(ctx)
}
