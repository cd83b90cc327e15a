package outbox

import (
	"context"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// MaxPreviewRows bounds the log rows one recovery preview examines: the
// log holds every endpoint's outcomes, so a range of a busy namespace may
// hold far more rows than the endpoint's own, and a preview is a read an
// operator makes before deciding, not a job.
const MaxPreviewRows = 5000

// RecoveryPreview is what a recovery of a range would find, counted
// without writing anything.
type RecoveryPreview struct {
	// Delivered counts the retained outcomes of the range the endpoint had
	// delivered: those a recovery would queue again.
	Delivered uint64
	// Pending counts those of the range still pending on it, which a
	// recovery leaves as they are.
	Pending uint64
	// Examined is how many log rows the count read.
	Examined uint64
	// Partial: the count stopped at its bound (Admin.PreviewRows) before
	// the range's end, so the range holds at least as many.
	Partial bool
}

// PreviewRecovery counts what a recovery of the endpoint id over outcomes
// accepted in [sinceMs, untilMs) would find now, by the rules of Recover
// and its runner, reading at most Admin.PreviewRows log rows. It writes
// nothing; a recovery started after may find more or fewer, as outcomes
// are accepted, delivered and swept meanwhile.
func (a *Admin) PreviewRecovery(ctx context.Context, p store.Partition, id string, sinceMs, untilMs int64) (RecoveryPreview, error) {
	if err := a.checkRecoveryRange(sinceMs, untilMs); err != nil {
		return RecoveryPreview{}, err
	}
	if err := p.Validate(); err != nil {
		return RecoveryPreview{}, err
	}
	if err := schema.ValidateEndpointID(id); err != nil {
		return RecoveryPreview{}, err
	}
	v, found, err := a.Store.Get(ctx, p, schema.ClassEndpoint.Key(id))
	if err != nil {
		return RecoveryPreview{}, fmt.Errorf("read endpoint %s/%s: %w", p, id, err)
	}
	if !found {
		return RecoveryPreview{}, ErrNotFound
	}
	ep, err := schema.DecodeEndpoint(v)
	if err != nil {
		return RecoveryPreview{}, fmt.Errorf("endpoint %s of %s: %w", id, p, err)
	}
	start, err := firstAcceptedAt(ctx, a.Store, p, sinceMs-acceptSlackMs)
	if err != nil {
		return RecoveryPreview{}, err
	}
	_, end := schema.LogRange()
	bound := uint64(MaxPreviewRows)
	if a.PreviewRows > 0 && a.PreviewRows < MaxPreviewRows {
		bound = uint64(a.PreviewRows)
	}
	var out RecoveryPreview
	var after *store.Cursor
	for {
		page, err := a.Store.Scan(ctx, p, schema.LogKey(start), end, after, int(min(bound-out.Examined, previewPage)))
		if err != nil {
			return RecoveryPreview{}, fmt.Errorf("scan log of %s: %w", p, err)
		}
		for _, e := range page.Entries {
			pk, ok := schema.Parse(e.Key)
			if !ok || pk.Class != schema.ClassLog {
				return RecoveryPreview{}, fmt.Errorf("log row of %s: %w", p, corruptf("bad log key"))
			}
			l, err := schema.DecodeLog(e.Value)
			if err == nil && l.AcceptedMs >= untilMs+acceptSlackMs {
				return out, nil
			}
			out.Examined++
			if err != nil || l.AcceptedMs < sinceMs || l.AcceptedMs >= untilMs || !took(&ep, pk.Seq, l.AcceptedMs) {
				continue
			}
			switch en, ok := l.Entry(id); {
			case !ok:
			case en.State == schema.EntryDelivered:
				out.Delivered++
			case en.State == schema.EntryPending:
				out.Pending++
			}
		}
		if page.Next == nil {
			return out, nil
		}
		if out.Examined >= bound {
			out.Partial = true
			return out, nil
		}
		after = page.Next
	}
}

// previewPage is the log rows one read of a preview asks for.
const previewPage = 500

// checkRecoveryRange refuses a range a recovery cannot cover: unordered,
// or starting before the retention window, whose outcomes are gone.
func (a *Admin) checkRecoveryRange(sinceMs, untilMs int64) error {
	nowMs := a.Clock.Now().UnixMilli()
	switch {
	case untilMs <= sinceMs:
		return invalidf("until must be after since")
	case a.retention() <= 0:
		return invalidf("nothing is retained (retention is 0), so nothing can be recovered")
	case sinceMs < nowMs-a.retention().Milliseconds():
		return invalidf("since is before the retention window of %v: those outcomes are no longer kept", a.retention())
	}
	return nil
}
