package outbox

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/clock"
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

// RecoveryState is where a recovery is.
type RecoveryState uint8

// Recovery states.
const (
	RecoveryRunning RecoveryState = 1
	RecoveryDone    RecoveryState = 2
	// RecoveryAborted: the endpoint went, or is being deleted.
	RecoveryAborted RecoveryState = 3
)

func (s RecoveryState) String() string {
	switch s {
	case RecoveryRunning:
		return "running"
	case RecoveryDone:
		return "done"
	case RecoveryAborted:
		return "aborted"
	}
	return "unknown"
}

// Recovery is one recovery job.
type Recovery struct {
	ID       string
	Endpoint string
	State    RecoveryState
	// SinceMs and UntilMs are the range of acceptance times, [since, until).
	SinceMs, UntilMs int64
	// NextSeq is the next log row to examine; EndSeq the namespace's next
	// sequence number when the job started: no row at or after it is in
	// the range.
	NextSeq, EndSeq uint64
	// StartSeq is where the job began, for its progress.
	StartSeq uint64
	// Examined counts the log rows looked at, Queued the outcomes queued.
	Examined, Queued      uint64
	CreatedMs, FinishedMs int64
}

const recoveryLen = 1 + 16 + 1 + 8*9

// encodeRecovery is version 1: id (16), state (1), since, until ms, start,
// next, end seq, examined, queued, created, finished ms (8 each).
func encodeRecovery(r Recovery) (store.Value, error) {
	id, err := hex.DecodeString(r.ID)
	if err != nil || len(id) != 16 {
		return nil, invalidf("recovery id %q", r.ID)
	}
	v := make([]byte, 0, recoveryLen)
	v = append(v, codecV1)
	v = append(v, id...)
	v = append(v, byte(r.State))
	for _, n := range []uint64{uint64(r.SinceMs), uint64(r.UntilMs), r.StartSeq, r.NextSeq, r.EndSeq, r.Examined, r.Queued, uint64(r.CreatedMs), uint64(r.FinishedMs)} {
		v = binary.BigEndian.AppendUint64(v, n)
	}
	return v, nil
}

func decodeRecovery(endpoint string, v store.Value) (Recovery, error) {
	rd := newReader("recovery", v)
	r := Recovery{Endpoint: endpoint, ID: hex.EncodeToString(rd.take(16)), State: RecoveryState(rd.u8())}
	r.SinceMs, r.UntilMs = rd.ms(), rd.ms()
	r.StartSeq, r.NextSeq, r.EndSeq, r.Examined, r.Queued = rd.u64(), rd.u64(), rd.u64(), rd.u64(), rd.u64()
	r.CreatedMs, r.FinishedMs = rd.ms(), rd.ms()
	if rd.err == nil && (r.State < RecoveryRunning || r.State > RecoveryAborted) {
		rd.fail("unknown state %d", r.State)
	}
	if err := rd.end(); err != nil {
		return Recovery{}, err
	}
	return r, nil
}

func recoveryKey(endpoint string) store.Key { return tagged(ClassJob, endpoint) }

// retention is the Admin's, bounding a recovery's range.
func (a *Admin) retention() time.Duration { return a.Retention }

// Recover starts a recovery of the endpoint id over outcomes accepted in
// [sinceMs, untilMs). The range must be ordered and start within the
// retention window (older outcomes are gone); a running recovery of the
// endpoint is ErrRecoveryRunning.
func (a *Admin) Recover(ctx context.Context, p store.Partition, id string, sinceMs, untilMs int64) (Recovery, error) {
	nowMs := a.Clock.Now().UnixMilli()
	switch {
	case untilMs <= sinceMs:
		return Recovery{}, invalidf("until must be after since")
	case a.retention() <= 0:
		return Recovery{}, invalidf("nothing is retained (retention is 0), so nothing can be recovered")
	case sinceMs < nowMs-a.retention().Milliseconds():
		return Recovery{}, invalidf("since is before the retention window of %v: those outcomes are no longer kept", a.retention())
	}
	for range adminRetries {
		s, err := a.readStream(ctx, p, id)
		if err != nil {
			return Recovery{}, err
		}
		if s.ep == nil {
			return Recovery{}, ErrNotFound
		}
		if s.ep.ep.DisabledReason == ReasonDeleting {
			return Recovery{}, ErrDeleting
		}
		jobRaw, jobFound, err := a.Store.Get(ctx, p, recoveryKey(id))
		if err != nil {
			return Recovery{}, fmt.Errorf("read recovery of %s/%s: %w", p, id, err)
		}
		if jobFound {
			if old, err := decodeRecovery(id, jobRaw); err == nil && old.State == RecoveryRunning {
				return Recovery{}, ErrRecoveryRunning
			}
		}
		start, err := firstAcceptedAt(ctx, a.Store, p, sinceMs-acceptSlackMs)
		if err != nil {
			return Recovery{}, err
		}
		var end uint64
		if s.seq.found {
			if end, err = DecodeSequence(s.seq.raw); err != nil {
				return Recovery{}, err
			}
		}
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return Recovery{}, fmt.Errorf("recovery id: %w", err)
		}
		r := Recovery{
			ID: hex.EncodeToString(raw[:]), Endpoint: id, State: RecoveryRunning, SinceMs: sinceMs, UntilMs: untilMs,
			StartSeq: start, NextSeq: start, EndSeq: max(end, start), CreatedMs: nowMs,
		}
		v, err := encodeRecovery(r)
		if err != nil {
			return Recovery{}, err
		}
		var b store.Batch
		b.RequireEquals(s.ep.key, s.ep.raw)
		// The sequence as read bounds the job: guarded, so an outcome
		// accepted meanwhile is either in it or after it.
		b.Guard(SequenceKey(), s.seq.raw, s.seq.found)
		b.Guard(recoveryKey(id), jobRaw, jobFound)
		b.Put(recoveryKey(id), v)
		b.Put(timers.Key(nowMs, timers.KindRecovery, id), timers.EncodeIdle(nil))
		ok, err := a.applyOwn(ctx, p, b, func(ctx context.Context) (bool, error) { return a.isJob(ctx, p, id, r.ID) })
		if err != nil {
			return Recovery{}, err
		}
		if ok {
			return r, nil
		}
	}
	return Recovery{}, fmt.Errorf("%w: %s", ErrContended, p)
}

// isJob reports whether the endpoint's job row is the job of id, whatever
// its fires made of it since.
func (a *Admin) isJob(ctx context.Context, p store.Partition, endpoint, id string) (bool, error) {
	v, found, err := a.Store.Get(ctx, p, recoveryKey(endpoint))
	if err != nil {
		return false, fmt.Errorf("read recovery of %s/%s: %w", p, endpoint, err)
	}
	if !found {
		return false, nil
	}
	r, err := decodeRecovery(endpoint, v)
	return err == nil && r.ID == id, nil
}

// Recovery reads the recovery job of the endpoint id: the last one started,
// running or finished.
func (a *Admin) Recovery(ctx context.Context, p store.Partition, id, job string) (Recovery, error) {
	if err := p.Validate(); err != nil {
		return Recovery{}, err
	}
	if err := ValidateEndpointID(id); err != nil {
		return Recovery{}, err
	}
	v, found, err := a.Store.Get(ctx, p, recoveryKey(id))
	if err != nil {
		return Recovery{}, fmt.Errorf("read recovery of %s/%s: %w", p, id, err)
	}
	if !found {
		return Recovery{}, ErrRecoveryNotFound
	}
	r, err := decodeRecovery(id, v)
	if err != nil {
		return Recovery{}, fmt.Errorf("recovery of %s/%s: %w", p, id, err)
	}
	if r.ID != job {
		return Recovery{}, ErrRecoveryNotFound
	}
	return r, nil
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
	jobRaw, found, err := fc.Store.Get(ctx, fc.Partition, recoveryKey(id))
	if err != nil {
		return timers.Fired{}, fmt.Errorf("read recovery of %s/%s: %w", fc.Partition, id, err)
	}
	if !found {
		return timers.Fired{Done: true}, nil
	}
	job, err := decodeRecovery(id, jobRaw)
	if err != nil || job.State != RecoveryRunning {
		// Nothing to run: an unreadable job row is left for an operator,
		// and a new recovery replaces it.
		return timers.Fired{Done: true}, nil
	}
	nowMs := max(fc.NowMs, clk.Now().UnixMilli())
	var b store.Batch
	b.RequireEquals(recoveryKey(id), jobRaw)
	finish := func(state RecoveryState) (timers.Fired, error) {
		job.State, job.FinishedMs = state, nowMs
		v, err := encodeRecovery(job)
		if err != nil {
			return timers.Fired{}, err
		}
		b.Put(recoveryKey(id), v)
		return timers.Fired{Done: true, Batch: b}, nil
	}
	if s.ep == nil {
		// Deleted: its job goes with it.
		b.Delete(recoveryKey(id))
		return timers.Fired{Done: true, Batch: b}, nil
	}
	if s.ep.ep.DisabledReason == ReasonDeleting {
		return finish(RecoveryAborted)
	}
	b.RequireEquals(s.ep.key, s.ep.raw)
	start, end := LogKey(job.NextSeq), LogKey(job.EndSeq)
	page, err := fc.Store.Scan(ctx, fc.Partition, start, end, nil, recoveryRows)
	if err != nil {
		return timers.Fired{}, fmt.Errorf("scan log of %s: %w", fc.Partition, err)
	}
	var queued, bytes uint64
	past := false
	for _, e := range page.Entries {
		pk, ok := Parse(e.Key)
		if !ok || pk.Class != ClassLog {
			return timers.Fired{}, fmt.Errorf("log row of %s: %w", fc.Partition, corruptf("bad log key"))
		}
		l, err := DecodeLog(e.Value)
		if err == nil && l.AcceptedMs >= job.UntilMs+acceptSlackMs {
			past = true
			break
		}
		job.NextSeq, job.Examined = pk.Seq+1, job.Examined+1
		if err != nil || l.AcceptedMs < job.SinceMs || l.AcceptedMs >= job.UntilMs || !s.ep.ep.took(pk.Seq, l.AcceptedMs) {
			continue
		}
		en, ok := l.Entry(id)
		if !ok || en.State != EntryDelivered {
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
		return finish(RecoveryDone)
	}
	v, err := encodeRecovery(job)
	if err != nil {
		return timers.Fired{}, err
	}
	b.Put(recoveryKey(id), v)
	return timers.Fired{DueAtMs: nowMs, Batch: b}, nil
}
