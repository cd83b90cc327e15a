package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// The log sweep (timers.KindLogSweep) is one timer per namespace, reference
// "". Ingest creates it when absent, due LogSweepFirst later; it reschedules
// itself and never finishes, so a timer seen by ingest stays valid.

// Log sweeper defaults.
const (
	// DefaultRetention keeps a delivered outcome's log row and attempts
	// this long after its last stream is done with it: the idempotency
	// window, so an outcome that answers duplicate can still be looked up.
	DefaultRetention = 24 * time.Hour
	// MaxRetention bounds the retention: thirty days of log rows.
	MaxRetention = 30 * 24 * time.Hour
	// LogSweepFirst is when a new namespace's first pass is due.
	LogSweepFirst = time.Minute
	// DefaultLogSweepEvery is the least gap between two passes.
	DefaultLogSweepEvery = time.Minute
	// DefaultLogSweepRows is the log rows one fire examines.
	DefaultLogSweepRows = 32
	// logSweepOps bounds the batch of one fire, leaving the runner's
	// completion (guard, delete and put of the timer row) room.
	logSweepOps = store.MaxBatchOps - 3
)

func logSweepTimerKey(dueAtMs int64) store.Key { return timers.Key(dueAtMs, timers.KindLogSweep, "") }

// LogSweeper is the timers.Handler of timers.KindLogSweep. A pass pages
// through the log in sequence order, a page per fire, deleting each row
// whose streams are all done with it (none pending) once the retention has
// passed since the last of them was, with the attempt rows its entries
// flag, each guarded by the row as read (a resend meanwhile keeps it).
// Sequence order is acceptance order, so a pass ends at the first row
// accepted less than a retention ago: none after it can be due. Rows that
// do not decode are kept and logged, never dropped.
type LogSweeper struct {
	// Retention must equal the delivery handler's; 0 keeps nothing.
	Retention time.Duration
	// Every is the least gap between passes, DefaultLogSweepEvery when
	// zero.
	Every time.Duration
	// Rows per fire, DefaultLogSweepRows when zero, at most
	// logSweepOps/2.
	Rows int
	// Logger reports rows kept because they do not decode; slog.Default
	// when nil.
	Logger *slog.Logger
}

var _ timers.Handler = (*LogSweeper)(nil)

// Kind is timers.KindLogSweep.
func (*LogSweeper) Kind() timers.Kind { return timers.KindLogSweep }

// Fire sweeps one page. Within a pass it reschedules now with the page's
// cursor; at the end of a pass it reschedules for when the earliest row it
// kept is due, but not sooner than Every.
func (s *LogSweeper) Fire(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	retentionMs, everyMs, rows := s.Retention.Milliseconds(), DefaultLogSweepEvery.Milliseconds(), DefaultLogSweepRows
	if s.Every > 0 {
		everyMs = s.Every.Milliseconds()
	}
	if s.Rows > 0 {
		rows = min(s.Rows, logSweepOps/2)
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	start, end := schema.LogRange()
	st, page, err := passPage(ctx, fc, t, "log", start, end, rows, log)
	if err != nil {
		return timers.Fired{}, err
	}
	b := store.Batch{Settles: true}
	keep := func(dueMs int64) {
		if st.EarliestMs == 0 || dueMs < st.EarliestMs {
			st.EarliestMs = dueMs
		}
	}
	ended := false
	var last store.Key
	for _, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		l, err := schema.DecodeLog(e.Value)
		if !ok || pk.Class != schema.ClassLog || err != nil {
			log.WarnContext(ctx, "log row does not decode; keeping it", "partition", fc.Partition.Namespace, "error", err)
			last = e.Key
			continue
		}
		if fc.NowMs < l.AcceptedMs+retentionMs {
			// Accepted less than a retention ago, and so is every row
			// after it.
			keep(l.AcceptedMs + retentionMs)
			ended = true
			break
		}
		doneMs, pending := l.AcceptedMs, false
		for _, en := range l.Entries {
			pending = pending || en.State == schema.EntryPending
			doneMs = max(doneMs, en.AtMs)
		}
		if pending {
			// Its stream will be done some day; the next pass looks again.
			last = e.Key
			continue
		}
		if fc.NowMs < doneMs+retentionMs {
			keep(doneMs + retentionMs)
			last = e.Key
			continue
		}
		ops := 2
		for _, en := range l.Entries {
			if en.Attempts {
				ops++
			}
		}
		if b.Ops()+ops > logSweepOps {
			break
		}
		b.RequireEquals(e.Key, e.Value)
		b.Delete(e.Key)
		for _, en := range l.Entries {
			if en.Attempts {
				b.Delete(schema.AttemptKeyOf(en.Endpoint, l.RID))
			}
		}
		last = e.Key
	}
	if !ended && last != "" && (page.Next != nil || last != page.Entries[len(page.Entries)-1].Key) {
		st.Cursor = []byte(last)
		return timers.Fired{DueAtMs: fc.NowMs, State: schema.EncodeSweepState(st), Batch: b}, nil
	}
	// The pass is over: the minute rows more than an hour old, of streams
	// that went quiet (an active one deletes its own), go with its last
	// page. No read looks at them, so they need no guard.
	stale, err := staleMinutes(ctx, fc.Store, fc.Partition, fc.NowMs, logSweepOps-b.Ops())
	if err != nil {
		return timers.Fired{}, err
	}
	for _, k := range stale {
		b.Delete(k)
	}
	due := fc.NowMs + everyMs
	if st.EarliestMs != 0 {
		due = max(due, st.EarliestMs)
	}
	return timers.Fired{DueAtMs: due, Batch: b}, nil
}
