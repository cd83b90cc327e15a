package schema

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/hookrelay/relay/internal/store"
)

// Every value codec of this package but the delivery timer state starts
// with a version byte: codecV1, but for the attempt row (attempt.go,
// version 2), the seen row (3 or 4, by its fields) and the sweep state (2
// when its cursor is unordered). Fixed-width integers are big-endian;
// variable ones are minimal uvarints.
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

// BacklogOf decodes a backlog as read; an absent row is the empty backlog.
func BacklogOf(v store.Value, found bool) (Backlog, error) {
	if !found {
		return Backlog{}, nil
	}
	return DecodeBacklog(v)
}

// AddBacklog is the write that adds rows and bytes to the backlog of
// endpoint, an id already checked, as the row is when its batch applies
// (store.Add). With gauge the byte count stops at 0 rather than refusing
// the batch (store.AddSaturating): it is only a gauge, and a drift in it
// must never hold a stream. The row count always refuses to pass 0.
func AddBacklog(endpoint string, rows, bytes int64, gauge bool) store.Write {
	w := store.Write{Kind: store.Add, Key: ClassBacklog.Key(endpoint), Value: backlogHeader, Deltas: []int64{rows, bytes}}
	if gauge {
		w.Saturating = backlogBytesSaturate
	}
	return w
}

// backlogBytesSaturate marks the backlog's byte count, its second counter,
// as one that stops at 0.
const backlogBytesSaturate = 1 << 1

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
	// Digest is the BLAKE3 of the accepted outcome's record encoding, of
	// which the row keeps the first SeenDigestBytes; the rest is zero once
	// decoded.
	Digest [32]byte
	// AcceptedMs is when it was accepted; the row counts until AcceptedMs
	// plus the idempotency window.
	AcceptedMs int64
	// Writer is a random tag of the call that wrote the row (the Append
	// that accepted the outcome, or the Erase that took its seq), so that
	// call recognises its own write after a lost reply, and no other call
	// that happened to write the same row in the same millisecond does.
	Writer [8]byte
	// Logged: Seq is the outcome's log row. A row whose outcome was erased
	// has none.
	Logged bool
	Seq    uint64
}

// Seen row versions: 3 with the sequence of the outcome's log row, 4
// without.
const (
	seenV3 = 0x03
	seenV4 = 0x04
)

// SeenDigestBytes is how much of its digest a seen row keeps. It tells a
// resent outcome from another under the same reservation id: 128 bits
// leave no second outcome to find that would pass as the first, and they
// bring the row to a 48-byte allocation on Redis, not 64.
const SeenDigestBytes = 16

// Matches reports whether d is the digest the row keeps.
func (s Seen) Matches(d [32]byte) bool {
	return [SeenDigestBytes]byte(s.Digest[:SeenDigestBytes]) == [SeenDigestBytes]byte(d[:SeenDigestBytes])
}

// EncodeSeen is the version its fields call for (see the constants), then
// SeenDigestBytes of the digest, accepted ms u64, writer (8) and, when
// Logged, the seq u64.
func EncodeSeen(s Seen) (store.Value, error) {
	if s.AcceptedMs < 0 {
		return nil, invalidf("seen: accepted time must not be negative")
	}
	v := make([]byte, 0, 1+SeenDigestBytes+8+8+8)
	if s.Logged {
		v = append(v, seenV3)
	} else {
		v = append(v, seenV4)
	}
	v = append(v, s.Digest[:SeenDigestBytes]...)
	v = binary.BigEndian.AppendUint64(v, uint64(s.AcceptedMs))
	v = append(v, s.Writer[:]...)
	if s.Logged {
		v = binary.BigEndian.AppendUint64(v, s.Seq)
	}
	return v, nil
}

// DecodeSeen decodes an idempotency row.
func DecodeSeen(v store.Value) (Seen, error) {
	r := &reader{what: "seen", b: v}
	var s Seen
	switch {
	case len(v) > 0 && v[0] == seenV3:
		r.b, s.Logged = v[1:], true
	case len(v) > 0 && v[0] == seenV4:
		r.b = v[1:]
	case len(v) == 0:
		r.fail("empty value")
	default:
		r.fail("unknown version %d", v[0])
	}
	copy(s.Digest[:], r.take(SeenDigestBytes))
	s.AcceptedMs = r.ms()
	copy(s.Writer[:], r.take(8))
	if s.Logged {
		s.Seq = r.u64()
	}
	if err := r.end(); err != nil {
		return Seen{}, err
	}
	return s, nil
}
