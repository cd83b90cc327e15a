package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// The seen sweep (timers.KindSeenSweep) is one timer per namespace,
// reference "". Ingest creates it when absent, due a window later; it
// reschedules itself and never finishes, so a timer seen by ingest stays
// valid.

// Sweeper defaults.
const (
	// DefaultSweepEvery is the least gap between two passes: a seen row
	// lives at most this long past its window.
	DefaultSweepEvery = time.Hour
	// DefaultSweepRows is the seen rows one fire examines: two operations
	// each, so the batch keeps room for the runner's completion.
	DefaultSweepRows = 32
	// MaxSweepRows bounds SweepRows: 2*48 + 3 completion ops fit 100.
	MaxSweepRows = 48
	// SweepGrace keeps a seen row past its window for this long: an ingest
	// on a process whose clock lags the sweeper's by less still finds the
	// row it counts as inside the window.
	SweepGrace = time.Minute
)

func sweepTimerKey(dueAtMs int64) store.Key { return timers.Key(dueAtMs, timers.KindSeenSweep, "") }

// sweepTimerValue is a fresh sweep timer: a new pass from the first row.
func sweepTimerValue() store.Value { return timers.EncodeIdle(nil) }

// SeenSweeper is the timers.Handler of timers.KindSeenSweep. A pass pages
// through the seen rows, a page per fire, deleting those older than the
// window, each guarded by its value as read (a row re-accepted meanwhile is
// kept). Seen rows are unordered in the store (store.UnorderedTag), so a
// pass walks them with ScanUnordered in no order; a pass ends when the walk
// does. Rows that do not decode are kept and logged, never dropped.
type SeenSweeper struct {
	// Window must equal the Appender's; DefaultWindow when zero.
	Window time.Duration
	// Every is the least gap between passes, DefaultSweepEvery when zero.
	Every time.Duration
	// Rows per fire, DefaultSweepRows when zero, at most MaxSweepRows.
	Rows int
	// Logger reports rows kept because they do not decode; slog.Default
	// when nil.
	Logger *slog.Logger
}

var _ timers.Handler = (*SeenSweeper)(nil)

// Kind is timers.KindSeenSweep.
func (*SeenSweeper) Kind() timers.Kind { return timers.KindSeenSweep }

// Fire sweeps one page. Within a pass it reschedules now with the page's
// cursor; at the end of a pass it reschedules for when the earliest row it
// kept expires, but not sooner than Every (a window ahead when none remain).
// A page may hold more expired rows than one batch deletes (the store's
// pages are a hint): the fire deletes Rows of them and keeps the page's
// cursor, so the next fire reads the same page again without them.
func (s *SeenSweeper) Fire(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	windowMs, everyMs, rows := DefaultWindow.Milliseconds(), DefaultSweepEvery.Milliseconds(), DefaultSweepRows
	if s.Window > 0 {
		windowMs = s.Window.Milliseconds()
	}
	if s.Every > 0 {
		everyMs = s.Every.Milliseconds()
	}
	if s.Rows > 0 {
		rows = min(s.Rows, MaxSweepRows)
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	st, err := schema.DecodeSweepState(t.State)
	if err != nil || !st.Unordered {
		// The state is only a position, and one of an ordered pass (an
		// earlier version's) is no position in this walk: start over.
		if err != nil {
			log.WarnContext(ctx, "seen sweep state does not decode; restarting the pass", "partition", fc.Partition.Namespace, "error", err)
		}
		st = schema.SweepState{EarliestMs: st.EarliestMs, Unordered: true}
	}
	at := st.Cursor
	var after *store.Cursor
	if len(at) > 0 {
		after = store.NewCursor(at)
	}
	page, err := fc.Store.ScanUnordered(ctx, fc.Partition, after, rows)
	if err != nil {
		return timers.Fired{}, fmt.Errorf("scan seen rows of %s: %w", fc.Partition, err)
	}
	type candidate struct {
		entry store.Entry
		rid   string
		seq   uint64
		// logged: the seen row names its log row, which may hold it.
		logged bool
	}
	var expired []candidate
	var logKeys []store.Key
	for _, e := range page.Entries {
		seen, err := schema.DecodeSeen(e.Value)
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassSeen || err != nil {
			log.WarnContext(ctx, "seen row does not decode; keeping it", "partition", fc.Partition.Namespace, "error", err)
			continue
		}
		expires := seen.AcceptedMs + windowMs + SweepGrace.Milliseconds()
		if expires < seen.AcceptedMs {
			continue // beyond any clock
		}
		if fc.NowMs < expires {
			if st.EarliestMs == 0 || expires < st.EarliestMs {
				st.EarliestMs = expires
			}
			continue
		}
		if seen.Logged {
			logKeys = append(logKeys, schema.LogKey(seen.Seq))
		}
		expired = append(expired, candidate{entry: e, rid: pk.RID, seq: seen.Seq, logged: seen.Logged})
	}
	// A seen row whose outcome the log still holds stays with it, so the
	// outcome can be looked up by its reservation id until the log sweep
	// removes it.
	held := make(map[uint64]string, len(logKeys))
	for len(logKeys) > 0 {
		n := min(len(logKeys), store.MaxBatchOps)
		found, err := fc.Store.GetMany(ctx, fc.Partition, logKeys[:n])
		if err != nil {
			return timers.Fired{}, fmt.Errorf("read log rows of %s: %w", fc.Partition, err)
		}
		for i, r := range found {
			if !r.Found {
				continue
			}
			pk, _ := schema.Parse(logKeys[i])
			if l, err := schema.DecodeLog(r.Value); err != nil {
				held[pk.Seq] = "" // unreadable: keep whatever names it
			} else {
				held[pk.Seq] = l.RID
			}
		}
		logKeys = logKeys[n:]
	}
	b := store.Batch{Settles: true}
	more := false
	for _, c := range expired {
		if rid, ok := held[c.seq]; c.logged && ok && (rid == "" || rid == c.rid) {
			if due := fc.NowMs + everyMs; st.EarliestMs == 0 || due < st.EarliestMs {
				st.EarliestMs = due
			}
			continue
		}
		if len(b.Writes) == rows {
			more = true
			break
		}
		b.RequireEquals(c.entry.Key, c.entry.Value)
		b.Delete(c.entry.Key)
	}
	switch {
	case more:
		st.Cursor = at
	case page.Next != nil:
		st.Cursor = page.Next.Bytes()
	default:
		due := fc.NowMs + everyMs
		if st.EarliestMs == 0 {
			due = max(due, fc.NowMs+windowMs)
		} else {
			due = max(due, st.EarliestMs)
		}
		return timers.Fired{DueAtMs: due, Batch: b}, nil
	}
	return timers.Fired{DueAtMs: fc.NowMs, State: schema.EncodeSweepState(st), Batch: b}, nil
}

// passPage reads the next page of a sweep's pass over [start, end), resuming
// after the cursor its timer's state holds.
func passPage(ctx context.Context, fc timers.FireContext, t timers.DueTimer, what string, start, end store.Key, rows int, log *slog.Logger) (schema.SweepState, store.Page, error) {
	st, err := schema.DecodeSweepState(t.State)
	if err != nil {
		// The state is only a position: start the pass over.
		log.WarnContext(ctx, what+" sweep state does not decode; restarting the pass", "partition", fc.Partition.Namespace, "error", err)
		st = schema.SweepState{}
	}
	var after *store.Cursor
	if len(st.Cursor) > 0 {
		after = store.NewCursor(st.Cursor)
	}
	page, err := fc.Store.Scan(ctx, fc.Partition, start, end, after, rows)
	if err != nil {
		return schema.SweepState{}, store.Page{}, fmt.Errorf("scan %s rows of %s: %w", what, fc.Partition, err)
	}
	return st, page, nil
}
