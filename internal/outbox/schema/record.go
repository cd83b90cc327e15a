package schema

import (
	"encoding/binary"
	"encoding/hex"
	"math"

	"github.com/hookrelay/relay/internal/digest"
	"github.com/hookrelay/relay/internal/store"
)

// Record layout, version 1. The reservation id is not stored: the row's key
// carries it. Lengths and counters are minimal uvarints, hex ids are stored
// as their 32 bytes, so a record is usually smaller than the JSON it came as.
//
//	0x01 | kind (1) | repository (len, bytes) | occurred ms (uvarint) | body
//
//	committed   bytes_stored, new_to_repo, new_to_store (uvarints),
//	            ref count (uvarint), per ref: name (len, bytes),
//	            0x00 | new (32)   or   0x01 (deleted)
//	aborted     reason (len, bytes), detail (len, bytes)
//	expired     nothing
//	read_served object (32), bytes_served (uvarint)
//	event       see appendEvent; the repository is empty
const (
	recordCommitted  = 1
	recordAborted    = 2
	recordExpired    = 3
	recordReadServed = 4
	recordEvent      = 5

	refNew     = 0
	refDeleted = 1
)

// EncodeRecord is the canonical record of a valid outcome: equal outcomes
// (reservation id aside) encode to equal bytes. An invalid outcome is an
// error matching ErrInvalid.
func EncodeRecord(o *Outcome) (store.Value, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return encodeRecord(o), nil
}

// encodeRecord encodes an outcome known to be valid.
func encodeRecord(o *Outcome) store.Value {
	v := make([]byte, 0, recordSizeHint(o))
	v = append(v, codecV1)
	switch {
	case o.Committed != nil:
		v = append(v, recordCommitted)
	case o.Aborted != nil:
		v = append(v, recordAborted)
	case o.Expired != nil:
		v = append(v, recordExpired)
	case o.Event != nil:
		v = append(v, recordEvent)
	default:
		v = append(v, recordReadServed)
	}
	v = appendStr(v, o.Repository)
	v = binary.AppendUvarint(v, uint64(o.OccurredUnixMs))
	switch {
	case o.Committed != nil:
		c := o.Committed
		v = binary.AppendUvarint(v, c.BytesStored)
		v = binary.AppendUvarint(v, c.NewToRepo)
		v = binary.AppendUvarint(v, c.NewToStore)
		v = binary.AppendUvarint(v, uint64(len(c.Refs)))
		for _, ref := range c.Refs {
			v = appendStr(v, ref.Name)
			if ref.Deleted {
				v = append(v, refDeleted)
				continue
			}
			v = append(v, refNew)
			v, _ = hex.AppendDecode(v, []byte(ref.New))
		}
	case o.Aborted != nil:
		v = appendStr(v, o.Aborted.Reason)
		v = appendStr(v, o.Aborted.Detail)
	case o.ReadServed != nil:
		v, _ = hex.AppendDecode(v, []byte(o.ReadServed.Object))
		v = binary.AppendUvarint(v, o.ReadServed.BytesServed)
	case o.Event != nil:
		v = appendEvent(v, o.Event)
	}
	return v
}

func recordSizeHint(o *Outcome) int {
	n := 16 + len(o.Repository)
	switch {
	case o.Committed != nil:
		n += 32
		for _, ref := range o.Committed.Refs {
			n += 4 + len(ref.Name) + 32
		}
	case o.Aborted != nil:
		n += 4 + len(o.Aborted.Reason) + len(o.Aborted.Detail)
	case o.ReadServed != nil:
		n += 42
	case o.Event != nil:
		n += 32 + len(o.Event.Endpoint) + len(o.Event.Reason) + len(o.Event.LastError)
	}
	return n
}

// DecodeRecord decodes the outcome record of reservation rid. A value that is
// malformed, not canonical or not a valid outcome is an error wrapping
// store.ErrCorrupt.
func DecodeRecord(rid string, v store.Value) (Outcome, error) {
	r := newReader("outcome record", v)
	kind := r.u8()
	o := Outcome{ReservationID: rid, Repository: r.str(MaxRepositoryBytes)}
	occurred := r.uvarint()
	if occurred > math.MaxInt64 {
		r.fail("occurred time out of range")
	}
	o.OccurredUnixMs = int64(occurred)
	switch kind {
	case recordCommitted:
		c := &Committed{BytesStored: r.uvarint(), NewToRepo: r.uvarint(), NewToStore: r.uvarint()}
		n := r.uvarint()
		if n > MaxRefs {
			r.fail("%d refs exceed %d", n, MaxRefs)
		}
		for i := uint64(0); i < n && r.err == nil; i++ {
			ref := Ref{Name: r.str(MaxRefNameBytes)}
			switch r.u8() {
			case refNew:
				ref.New = hex.EncodeToString(r.take(32))
			case refDeleted:
				ref.Deleted = true
			default:
				r.fail("unknown ref flag")
			}
			c.Refs = append(c.Refs, ref)
		}
		o.Committed = c
	case recordAborted:
		o.Aborted = &Aborted{Reason: r.str(MaxReasonBytes), Detail: r.str(MaxDetailBytes)}
	case recordExpired:
		o.Expired = &Expired{}
	case recordReadServed:
		o.ReadServed = &ReadServed{Object: hex.EncodeToString(r.take(32)), BytesServed: r.uvarint()}
	case recordEvent:
		o.Event = readEvent(r)
	default:
		r.fail("unknown kind %d", kind)
	}
	if err := r.end(); err != nil {
		return Outcome{}, err
	}
	if err := o.Validate(); err != nil {
		return Outcome{}, corruptf("outcome record: %v", err)
	}
	return o, nil
}

// Digest is the BLAKE3 of the outcome's record encoding: two submissions
// under one reservation id are the same outcome iff their digests are equal.
func Digest(o *Outcome) ([32]byte, error) {
	rec, err := EncodeRecord(o)
	if err != nil {
		return [32]byte{}, err
	}
	return digest.Sum256(rec), nil
}
