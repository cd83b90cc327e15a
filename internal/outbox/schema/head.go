package schema

import (
	"encoding/binary"

	"github.com/hookrelay/relay/internal/store"
)

// A stream's head row ('h' endpoint) holds the sequence number from which
// its queue is read from the log: outbox's queue.go says how.

// HeadKey is the key of a stream's head row.
func HeadKey(endpoint string) (store.Key, error) {
	if err := ValidateEndpointID(endpoint); err != nil {
		return "", err
	}
	return ClassHead.Key(endpoint), nil
}

// Head is a stream's head row as read: the sequence number from which its
// queue is read from the log, when Found.
type Head struct {
	Seq   uint64
	Found bool
}

// EncodeHead is version 1, then the head's sequence number (8).
func EncodeHead(seq uint64) store.Value {
	return binary.BigEndian.AppendUint64([]byte{codecV1}, seq)
}

// DecodeHead decodes a head row.
func DecodeHead(v store.Value) (uint64, error) {
	r := newReader("head", v)
	seq := r.u64()
	if err := r.end(); err != nil {
		return 0, err
	}
	return seq, nil
}

// HeadOf is the head a read row holds.
func HeadOf(row store.Row) (Head, error) {
	if !row.Found {
		return Head{}, nil
	}
	seq, err := DecodeHead(row.Value)
	if err != nil {
		return Head{}, err
	}
	return Head{Seq: seq, Found: true}, nil
}
