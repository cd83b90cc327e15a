package outbox

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hookrelay/relay/internal/store"
)

// Every value codec of this package but the delivery timer state starts
// with a version byte; version 1 is the only one.
// Fixed-width integers are big-endian; variable ones are minimal uvarints.
const codecV1 = 0x01

// reader decodes one value. The first failure sticks: later reads return
// zero values, and err says what went wrong first.
type reader struct {
	what string
	b    []byte
	err  error
}

func newReader(what string, v []byte) *reader {
	r := &reader{what: what, b: v}
	if len(v) == 0 {
		r.fail("empty value")
		return r
	}
	if v[0] != codecV1 {
		r.fail("unknown version %d", v[0])
		return r
	}
	r.b = v[1:]
	return r
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s", store.ErrCorrupt, r.what, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("truncated")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() byte {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func (r *reader) u32() uint32 {
	b := r.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (r *reader) u64() uint64 {
	b := r.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// ms reads a fixed-width non-negative Unix millisecond.
func (r *reader) ms() int64 {
	v := r.u64()
	if v > math.MaxInt64 {
		r.fail("time out of range")
		return 0
	}
	return int64(v)
}

// uvarint reads a minimal uvarint: a longer encoding of the same number is
// refused, so every accepted value re-encodes to the same bytes.
func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	if n > 1 && r.b[n-1] == 0 {
		r.fail("non-minimal varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// str reads a uvarint length and that many bytes, at most max.
func (r *reader) str(max int) string {
	n := r.uvarint()
	if r.err == nil && n > uint64(max) {
		r.fail("string of %d bytes exceeds %d", n, max)
		return ""
	}
	return string(r.take(n))
}

// end fails on trailing bytes and returns the first error.
func (r *reader) end() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// Backlog counts a stream's unacknowledged rows and the bytes of their
// records. Rows decide when delivery is done; bytes are a gauge.
type Backlog struct {
	Rows  uint64
	Bytes uint64
}

const backlogLen = 1 + 8 + 8

// backlogHeader precedes a backlog row's two counters: the row is the layout
// store.Add adds to, so acknowledgements can reduce it without reading it.
var backlogHeader = store.Value{codecV1}

// EncodeBacklog is version 1, rows u64, bytes u64.
func EncodeBacklog(b Backlog) store.Value {
	v := make([]byte, 0, backlogLen)
	v = append(v, codecV1)
	v = binary.BigEndian.AppendUint64(v, b.Rows)
	return binary.BigEndian.AppendUint64(v, b.Bytes)
}

// DecodeBacklog decodes a backlog row.
func DecodeBacklog(v store.Value) (Backlog, error) {
	r := newReader("backlog", v)
	b := Backlog{Rows: r.u64(), Bytes: r.u64()}
	if err := r.end(); err != nil {
		return Backlog{}, err
	}
	return b, nil
}

// backlogOf decodes a backlog as read; an absent row is the empty backlog.
func backlogOf(v store.Value, found bool) (Backlog, error) {
	if !found {
		return Backlog{}, nil
	}
	return DecodeBacklog(v)
}

// EncodeSequence is version 1, next sequence number u64.
func EncodeSequence(next uint64) store.Value {
	v := make([]byte, 0, 9)
	v = append(v, codecV1)
	return binary.BigEndian.AppendUint64(v, next)
}

// DecodeSequence decodes the sequence row: the next sequence number to
// assign. An absent row means 0.
func DecodeSequence(v store.Value) (uint64, error) {
	r := newReader("sequence", v)
	next := r.u64()
	if err := r.end(); err != nil {
		return 0, err
	}
	return next, nil
}

// Seen is the idempotency row of an accepted reservation id.
type Seen struct {
	// Digest is the BLAKE3 of the accepted outcome's record encoding.
	Digest [32]byte
	// AcceptedMs is when it was accepted; the row counts until AcceptedMs
	// plus the idempotency window.
	AcceptedMs int64
	// Writer is a random tag of the Append call that wrote the row, so that
	// call recognises its own write after a lost reply, and no other call
	// that happened to accept the same outcome in the same millisecond does.
	Writer [8]byte
}

// EncodeSeen is version 1, digest (32), accepted ms u64, writer (8).
func EncodeSeen(s Seen) (store.Value, error) {
	if s.AcceptedMs < 0 {
		return nil, invalidf("seen: accepted time must not be negative")
	}
	v := make([]byte, 0, 1+32+8+8)
	v = append(v, codecV1)
	v = append(v, s.Digest[:]...)
	v = binary.BigEndian.AppendUint64(v, uint64(s.AcceptedMs))
	return append(v, s.Writer[:]...), nil
}

// DecodeSeen decodes an idempotency row.
func DecodeSeen(v store.Value) (Seen, error) {
	r := newReader("seen", v)
	var s Seen
	copy(s.Digest[:], r.take(32))
	s.AcceptedMs = r.ms()
	copy(s.Writer[:], r.take(8))
	if err := r.end(); err != nil {
		return Seen{}, err
	}
	return s, nil
}

// Attempt is a stream row's last failed delivery attempt, for operators.
type Attempt struct {
	// AtMs is when the attempt ended.
	AtMs int64
	// Status is the HTTP status the endpoint answered, 0 when none.
	Status int
	// ErrorClass is a short token such as "timeout", "connect" or "status".
	ErrorClass string
	// Count is the number of failed attempts of the row, at least 1.
	Count uint32
}

// MaxErrorClassBytes bounds Attempt.ErrorClass.
const MaxErrorClassBytes = 32

// Validate reports an attempt no row may hold.
func (a Attempt) Validate() error {
	switch {
	case a.AtMs < 0:
		return invalidf("attempt: time must not be negative")
	case a.Status != 0 && (a.Status < 100 || a.Status > 599):
		return invalidf("attempt: status must be 0 or an HTTP status")
	case !validToken(a.ErrorClass, MaxErrorClassBytes):
		return invalidf("attempt: error class must be a token of at most %d bytes", MaxErrorClassBytes)
	case a.Count == 0:
		return invalidf("attempt: count must be at least 1")
	}
	return nil
}

// EncodeAttempt is version 1, at ms u64, status u16, count u32, error class
// (uvarint length and bytes).
func EncodeAttempt(a Attempt) (store.Value, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	v := make([]byte, 0, 1+8+2+4+1+len(a.ErrorClass))
	v = append(v, codecV1)
	v = binary.BigEndian.AppendUint64(v, uint64(a.AtMs))
	v = binary.BigEndian.AppendUint16(v, uint16(a.Status))
	v = binary.BigEndian.AppendUint32(v, a.Count)
	return appendStr(v, a.ErrorClass), nil
}

// DecodeAttempt decodes an attempt row.
func DecodeAttempt(v store.Value) (Attempt, error) {
	r := newReader("attempt", v)
	a := Attempt{AtMs: r.ms(), Status: int(r.u16()), Count: r.u32(), ErrorClass: r.str(MaxErrorClassBytes)}
	if err := r.end(); err != nil {
		return Attempt{}, err
	}
	if err := a.Validate(); err != nil {
		return Attempt{}, corruptf("%v", err)
	}
	return a, nil
}
