package outbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// A store may run a batch twice and answer the second run, as a Redis
// client does that resends a script whose reply it lost: the second run
// fails the guard the first one falsified, so the caller hears "not
// committed", or, the reply lost for good, an error, of a batch that did
// commit. An operator's change then reads back a row it wrote, holding a
// value no other call writes (an endpoint row with this call's times and
// the secret or keys it generated, a recovery's random id, a resent
// entry's random tag, an erased seen row's fresh writer tag), and answers
// as its first run would have, rather than as a change that found
// someone else's.

// applyOwn applies b, reporting whether it committed. When the store says
// it did not, or answers an error, mine reads whether the rows hold what b
// wrote; if they do, b committed. Otherwise the store's answer stands.
func (a *Admin) applyOwn(ctx context.Context, p store.Partition, b store.Batch, mine func(context.Context) (bool, error)) (bool, error) {
	ok, err := a.apply(ctx, p, b)
	if ok {
		return true, nil
	}
	landed, rerr := mine(ctx)
	if rerr != nil || !landed {
		return false, err
	}
	if err != nil {
		// Read back from the master: a store that waits for replicas
		// may have answered the error because they did not hold it yet.
		if err := a.replicated(ctx, p); err != nil {
			return false, err
		}
	}
	return true, nil
}

// replicated returns once the replicas a durable store waits for hold
// every write the master held, or the store's error: a batch that fails
// its guard is answered only then (store.Batch.Answered), and this one's
// two guards cannot both hold. It writes nothing.
func (a *Admin) replicated(ctx context.Context, p store.Partition) error {
	var b store.Batch
	b.Settles = true
	key := schema.SequenceKey()
	b.RequireAbsent(key)
	b.RequireEquals(key, store.Value{0xff})
	_, err := a.apply(ctx, p, b)
	return err
}

// holds reports whether the row at key holds v, byte for byte.
func (a *Admin) holds(ctx context.Context, p store.Partition, key store.Key, v store.Value) (bool, error) {
	got, found, err := a.Store.Get(ctx, p, key)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	return found && bytes.Equal(got, v), nil
}

// putOf is the value b puts at key; nil when it puts none.
func putOf(b *store.Batch, key store.Key) store.Value {
	var v store.Value
	for _, w := range b.Writes {
		if w.Kind == store.Put && w.Key == key {
			v = w.Value
		}
	}
	return v
}

// newTag is a random tag that is a positive int64, so it fits a row's
// time field.
func newTag() (int64, error) {
	var raw [8]byte
	for {
		if _, err := rand.Read(raw[:]); err != nil {
			return 0, fmt.Errorf("random tag: %w", err)
		}
		if t := int64(binary.BigEndian.Uint64(raw[:]) >> 1); t != 0 {
			return t, nil
		}
	}
}
