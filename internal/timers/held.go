package timers

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/hookrelay/relay/internal/store"
)

// A writer that creates a timer for its own process to fire at once may
// write it held: leased from the start, so the fire needs no claim. The
// lease is a claim's in every way: it runs out lease after nowMs, and if
// the process dies first, any driver takes the timer over at its expiry.

// NewHeld is the row of a new timer due at nowMs and held under a fresh
// lease until nowMs + lease, as Claim would have left it.
func NewHeld(nowMs int64, lease time.Duration, kind Kind, ref string, state []byte) (store.Entry, error) {
	l := Lease{DueAtMs: nowMs}
	if _, err := rand.Read(l.Token[:]); err != nil {
		return store.Entry{}, fmt.Errorf("lease token: %w", err)
	}
	return store.Entry{Key: Key(nowMs+lease.Milliseconds(), kind, ref), Value: encodeLeased(l, state)}, nil
}

// Hold plans holding an idle timer row for this process to fire at once,
// as NewHeld holds a new one: leased under a fresh token until nowMs +
// lease, with its state, guarded by the row as read. A row due no sooner
// than three quarters of the lease from now, and no later than the whole,
// is held in place instead, until its own due time: its key stands, so
// the store writes neither its order nor its due index (a timer a fire
// left to stay, Fired.Stay, is one). Three quarters of a lease still
// outlast a fire. r must be idle.
func (r Row) Hold(b *store.Batch, nowMs int64, lease time.Duration) error {
	e, err := NewHeld(nowMs, lease, r.Kind, r.Reference, r.State)
	if err != nil {
		return err
	}
	b.RequireEquals(r.Key, r.Raw)
	if end := nowMs + lease.Milliseconds(); r.DueAtMs >= end-lease.Milliseconds()/4 && r.DueAtMs <= end {
		// The lease's end is the row's due time: the value does not say it.
		e.Key = r.Key
	} else {
		b.Delete(r.Key)
	}
	b.Put(e.Key, e.Value)
	return nil
}

// Held is the claim a leased row e stands for, as its writer left it; ok
// is false for a row that is idle or does not decode.
func Held(p store.Partition, e store.Entry) (c Claimed, ok bool) {
	row, err := DecodeRow(e.Key, e.Value)
	if err != nil || row.Lease == nil {
		return Claimed{}, false
	}
	return Claimed{
		Partition:   p,
		Timer:       DueTimer{DueAtMs: row.Lease.DueAtMs, Kind: row.Kind, Reference: row.Reference, State: row.State},
		Key:         e.Key,
		Value:       e.Value,
		ExpiresAtMs: row.DueAtMs,
	}, true
}

// Release puts a held timer back, idle and due as it was before its lease,
// for any driver to claim: what a holder that will not fire it does.
// Guarded by the lease, it writes nothing once the lease was taken over.
func Release(ctx context.Context, st store.NamespaceStore, c Claimed) error {
	_, err := release(ctx, st, c, c.Timer.DueAtMs, c.Timer.State, nil)
	return err
}

// releaseTimeout bounds ReleaseDetached.
const releaseTimeout = 5 * time.Second

// ReleaseDetached is Release for a holder giving the timer up on its way
// out: it runs with ctx's values but not its cancellation, within
// releaseTimeout, since the request or fire that held the timer may be
// over.
func ReleaseDetached(ctx context.Context, st store.NamespaceStore, c Claimed) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	return Release(ctx, st, c)
}
