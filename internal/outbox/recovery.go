package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/clock"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

// A recovery queues again every retained outcome an endpoint had delivered
// that was accepted in a time range, as a background job: one job row per
// endpoint ('j' endpoint) and a timer (timers.KindRecovery, reference the
// endpoint) whose fires each examine a page of the log and, in one batch
// guarded by the job row as read, queue that page's outcomes and move the
// job on. Any relay process may fire it, so a job cut short by a crash
// continues where its last batch left it, and no outcome is queued twice.

// Errors of a recovery.
var (
	// ErrRecoveryRunning: a recovery of the endpoint is running.
	ErrRecoveryRunning = errors.New("outbox: a recovery of this endpoint is running")
	// ErrRecoveryNotFound: no such recovery of the endpoint.
	ErrRecoveryNotFound = errors.New("outbox: no such recovery")
)

// recoveryRows is the log rows one fire examines: three operations each
// for those it queues, beside the job row's guard and rewrite, the
// endpoint's guard, the backlog and counters adds and the wake's three,
// and the runner's completion.
const recoveryRows = 24

// retention is the Admin's, bounding a recovery's range.
func (a *Admin) retention() time.Duration { return a.Retention }

// isJob reports whether the endpoint's job row is the job of id, whatever
// its fires made of it since.
func (a *Admin) isJob(ctx context.Context, p store.Partition, endpoint, id string) (bool, error) {
	v, found, err := a.Store.Get(ctx, p, schema.ClassJob.Key(endpoint))
	if err != nil {
		return false, fmt.Errorf("read recovery of %s/%s: %w", p, endpoint, err)
	}
	if !found {
		return false, nil
	}
	r, err := schema.DecodeRecovery(endpoint, v)
	return err == nil && r.ID == id, nil
}

// RecoveryRunner is the timers.Handler of timers.KindRecovery.
type RecoveryRunner struct {
	// Clock dates the job's end; clock.System when nil.
	Clock clock.Clock
}

var _ timers.Handler = (*RecoveryRunner)(nil)

// Kind is timers.KindRecovery.
func (*RecoveryRunner) Kind() timers.Kind { return timers.KindRecovery }

// Fire runs one page of the endpoint's job.
func (r *RecoveryRunner) Fire(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	f, err := r.plan(ctx, fc, t)
	if err != nil {
		return timers.Fired{}, err
	}
	f.Replan = func(ctx context.Context) (timers.Fired, error) { return r.plan(ctx, fc, t) }
	return f, nil
}

func (r *RecoveryRunner) plan(ctx context.Context, fc timers.FireContext, t timers.DueTimer) (timers.Fired, error) {
	id := t.Reference
	clk := r.Clock
	if clk == nil {
		clk = clock.System{}
	}
	adm := &Admin{Store: fc.Store, Clock: clk}
	s, err := adm.readStream(ctx, fc.Partition, id)
	if err != nil {
		return timers.Fired{}, err
	}
	jobRaw, found, err := fc.Store.Get(ctx, fc.Partition, schema.ClassJob.Key(id))
	if err != nil {
		return timers.Fired{}, fmt.Errorf("read recovery of %s/%s: %w", fc.Partition, id, err)
	}
	if !found {
		return timers.Fired{Done: true}, nil
	}
	job, err := schema.DecodeRecovery(id, jobRaw)
	if err != nil || job.State != schema.RecoveryRunning {
		// Nothing to run: an unreadable job row is left for an operator,
		// and a new recovery replaces it.
		return timers.Fired{Done: true}, nil
	}
	nowMs := max(fc.NowMs, clk.Now().UnixMilli())
	var b store.Batch
	b.RequireEquals(schema.ClassJob.Key(id), jobRaw)
	finish := func(state schema.RecoveryState) (timers.Fired, error) {
		job.State, job.FinishedMs = state, nowMs
		v, err := schema.EncodeRecovery(job)
		if err != nil {
			return timers.Fired{}, err
		}
		b.Put(schema.ClassJob.Key(id), v)
		return timers.Fired{Done: true, Batch: b}, nil
	}
	if s.ep == nil {
		// Deleted: its job goes with it.
		b.Delete(schema.ClassJob.Key(id))
		return timers.Fired{Done: true, Batch: b}, nil
	}
	if s.ep.ep.DisabledReason == ReasonDeleting {
		return finish(schema.RecoveryAborted)
	}
	b.RequireEquals(s.ep.key, s.ep.raw)
	start, end := schema.LogKey(job.NextSeq), schema.LogKey(job.EndSeq)
	page, err := fc.Store.Scan(ctx, fc.Partition, start, end, nil, recoveryRows)
	if err != nil {
		return timers.Fired{}, fmt.Errorf("scan log of %s: %w", fc.Partition, err)
	}
	var queued, bytes uint64
	past := false
	for _, e := range page.Entries {
		pk, ok := schema.Parse(e.Key)
		if !ok || pk.Class != schema.ClassLog {
			return timers.Fired{}, fmt.Errorf("log row of %s: %w", fc.Partition, corruptf("bad log key"))
		}
		l, err := schema.DecodeLog(e.Value)
		if err == nil && l.AcceptedMs >= job.UntilMs+acceptSlackMs {
			past = true
			break
		}
		job.NextSeq, job.Examined = pk.Seq+1, job.Examined+1
		if err != nil || l.AcceptedMs < job.SinceMs || l.AcceptedMs >= job.UntilMs || !took(&s.ep.ep, pk.Seq, l.AcceptedMs) {
			continue
		}
		en, ok := l.Entry(id)
		if !ok || en.State != schema.EntryDelivered {
			// Pending already, dropped, or never this endpoint's.
			continue
		}
		if err := requeue(&b, id, pk.Seq, e.Value, l, en, 0); err != nil {
			return timers.Fired{}, err
		}
		queued++
		bytes += uint64(len(l.Record))
	}
	job.Queued += queued
	if queued > 0 {
		b.Writes = append(b.Writes, requeueCounts(id, queued, bytes)...)
		if s.ep.ep.Enabled {
			wakeForRows(&b, s, id, nowMs)
		}
	}
	if past || page.Next == nil {
		return finish(schema.RecoveryDone)
	}
	v, err := schema.EncodeRecovery(job)
	if err != nil {
		return timers.Fired{}, err
	}
	b.Put(schema.ClassJob.Key(id), v)
	return timers.Fired{DueAtMs: nowMs, Batch: b}, nil
}

// Recover starts a recovery of the endpoint id over outcomes accepted in
// [sinceMs, untilMs). The range must be ordered and start within the
// retention window (older outcomes are gone); a running recovery of the
// endpoint is ErrRecoveryRunning.
func (a *Admin) Recover(ctx context.Context, p store.Partition, id string, sinceMs, untilMs int64) (schema.Recovery, error) {
	nowMs := a.Clock.Now().UnixMilli()
	if err := a.checkRecoveryRange(sinceMs, untilMs); err != nil {
		return schema.Recovery{}, err
	}
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return schema.Recovery{}, err
		}
		if s.ep == nil {
			return schema.Recovery{}, ErrNotFound
		}
		if s.ep.ep.DisabledReason == ReasonDeleting {
			return schema.Recovery{}, ErrDeleting
		}
		jobRaw, jobFound, err := a.Store.Get(ctx, p, schema.ClassJob.Key(id))
		if err != nil {
			return schema.Recovery{}, fmt.Errorf("read recovery of %s/%s: %w", p, id, err)
		}
		if jobFound {
			if old, err := schema.DecodeRecovery(id, jobRaw); err == nil && old.State == schema.RecoveryRunning {
				return schema.Recovery{}, ErrRecoveryRunning
			}
		}
		start, err := firstAcceptedAt(ctx, a.Store, p, sinceMs-acceptSlackMs)
		if err != nil {
			return schema.Recovery{}, err
		}
		var end uint64
		if s.seq.found {
			if end, err = schema.DecodeSequence(s.seq.raw); err != nil {
				return schema.Recovery{}, err
			}
		}
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return schema.Recovery{}, fmt.Errorf("recovery id: %w", err)
		}
		r := schema.Recovery{
			ID: hex.EncodeToString(raw[:]), Endpoint: id, State: schema.RecoveryRunning, SinceMs: sinceMs, UntilMs: untilMs,
			StartSeq: start, NextSeq: start, EndSeq: max(end, start), CreatedMs: nowMs,
		}
		v, err := schema.EncodeRecovery(r)
		if err != nil {
			return schema.Recovery{}, err
		}
		var b store.Batch
		b.RequireEquals(s.ep.key, s.ep.raw)
		// The sequence as read bounds the job: guarded, so an outcome
		// accepted meanwhile is either in it or after it.
		b.Guard(schema.SequenceKey(), s.seq.raw, s.seq.found)
		b.Guard(schema.ClassJob.Key(id), jobRaw, jobFound)
		b.Put(schema.ClassJob.Key(id), v)
		b.Put(timers.Key(nowMs, timers.KindRecovery, id), timers.EncodeIdle(nil))
		ok, err := a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.isJob(ctx, p, id, r.ID) })
		if err != nil {
			return schema.Recovery{}, err
		}
		if ok {
			return r, nil
		}
	}
	return schema.Recovery{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// Recovery reads the recovery job of the endpoint id: the last one started,
// running or finished.
func (a *Admin) Recovery(ctx context.Context, p store.Partition, id, job string) (schema.Recovery, error) {
	if err := p.Validate(); err != nil {
		return schema.Recovery{}, err
	}
	if err := schema.ValidateEndpointID(id); err != nil {
		return schema.Recovery{}, err
	}
	v, found, err := a.Store.Get(ctx, p, schema.ClassJob.Key(id))
	if err != nil {
		return schema.Recovery{}, fmt.Errorf("read recovery of %s/%s: %w", p, id, err)
	}
	if !found {
		return schema.Recovery{}, ErrRecoveryNotFound
	}
	r, err := schema.DecodeRecovery(id, v)
	if err != nil {
		return schema.Recovery{}, fmt.Errorf("recovery of %s/%s: %w", p, id, err)
	}
	if r.ID != job {
		return schema.Recovery{}, ErrRecoveryNotFound
	}
	return r, nil
}
