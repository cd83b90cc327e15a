package outbox

import (
	"encoding/binary"

	"github.com/hookrelay/relay/internal/store"
)

// MaxCursorBytes bounds the resume cursor a delivery timer carries.
const MaxCursorBytes = 4096

// MaxThrottleReason bounds a throttle's reason ("429", "timeout", ...).
const MaxThrottleReason = 16

// DeliveryState is the state of a stream's delivery timer: how many fires in
// a row failed (the backoff exponent), where the next fire resumes its scan
// of pending rows, the stream's token bucket under its endpoint's
// rate_limit and its adaptive throttle. Only the fire holding the timer's
// lease writes it, so the bucket and the throttle are the whole cluster's,
// kept without a round trip of their own.
type DeliveryState struct {
	Attempt uint32
	// Cursor is nil to start at the head of the stream.
	Cursor *store.Cursor
	// Bucket is nil for a full bucket: a stream without a rate_limit, or
	// a state written before rate limits existed.
	Bucket *TokenBucket
	// Throttle is nil when the stream runs at its endpoint's configured
	// limits.
	Throttle *Throttle
}

// TokenBucket is a stream's tokens, in thousandths of a call, as of AtMs.
type TokenBucket struct {
	MilliTokens uint32
	AtMs        int64
	// Paced: the fire that wrote it ran out of tokens with rows left, and
	// the timer is due when the next tokens are. Ingest leaves such a timer
	// where it is, as it leaves one backing off.
	Paced bool
}

// Throttle is a stream's effective limits, lowered below its endpoint's
// configured ones after the endpoint refused calls (429, 502, 503, 504, a
// timeout) and raised again as calls succeed.
type Throttle struct {
	MaxInFlight uint8
	// RateMilli is the effective rate in thousandths of a call per
	// second; 0 for an endpoint without a rate_limit.
	RateMilli uint32
	// CeilingMilli is the effective rate when the endpoint last refused:
	// the rate is raised more slowly once near it.
	CeilingMilli uint32
	// Reason is what last lowered the limits: the status, or "timeout".
	Reason string
	// SinceMs is when the stream was first throttled, DecreasedMs when the
	// limits were last lowered and RaisedMs when last adjusted either way.
	SinceMs, DecreasedMs, RaisedMs int64
}

// Paced reports whether the stream waits for tokens, not for ingest.
func (s DeliveryState) Paced() bool { return s.Bucket != nil && s.Bucket.Paced }

const (
	stateExtV1     = 0x01
	flagBucket     = 1 << 0
	flagPaced      = 1 << 1
	flagThrottle   = 1 << 2
	bucketBytes    = 4 + 8
	throttleFixed  = 1 + 4 + 4 + 8 + 8 + 8 + 1
	stateKnownMask = flagBucket | flagPaced | flagThrottle
)

// EncodeDeliveryState is attempt u32, cursor length u16, cursor bytes (at
// most 4096), then, only when there is a bucket or a throttle, an extension:
// 0x01, a flags byte (1 bucket, 2 paced, 4 throttle), the bucket (milli
// tokens u32, at ms i64) and the throttle (max in flight u8, rate and
// ceiling u32, since, decreased and raised ms i64, reason length u8 and
// bytes). It has no version byte: an empty state is a fresh timer, and a
// state without the extension reads as before, a full bucket and no
// throttle.
func EncodeDeliveryState(s DeliveryState) ([]byte, error) {
	var cur []byte
	if s.Cursor != nil {
		cur = s.Cursor.Bytes()
	}
	if len(cur) > MaxCursorBytes {
		return nil, invalidf("delivery timer: cursor of %d bytes exceeds %d", len(cur), MaxCursorBytes)
	}
	if s.Throttle != nil && len(s.Throttle.Reason) > MaxThrottleReason {
		return nil, invalidf("delivery timer: throttle reason exceeds %d bytes", MaxThrottleReason)
	}
	v := make([]byte, 0, 6+len(cur))
	v = binary.BigEndian.AppendUint32(v, s.Attempt)
	v = binary.BigEndian.AppendUint16(v, uint16(len(cur)))
	v = append(v, cur...)
	if s.Bucket == nil && s.Throttle == nil {
		return v, nil
	}
	var flags byte
	if s.Bucket != nil {
		flags |= flagBucket
		if s.Bucket.Paced {
			flags |= flagPaced
		}
	}
	if s.Throttle != nil {
		flags |= flagThrottle
	}
	v = append(v, stateExtV1, flags)
	if b := s.Bucket; b != nil {
		v = binary.BigEndian.AppendUint32(v, b.MilliTokens)
		v = binary.BigEndian.AppendUint64(v, uint64(b.AtMs))
	}
	if t := s.Throttle; t != nil {
		v = append(v, t.MaxInFlight)
		v = binary.BigEndian.AppendUint32(v, t.RateMilli)
		v = binary.BigEndian.AppendUint32(v, t.CeilingMilli)
		v = binary.BigEndian.AppendUint64(v, uint64(t.SinceMs))
		v = binary.BigEndian.AppendUint64(v, uint64(t.DecreasedMs))
		v = binary.BigEndian.AppendUint64(v, uint64(t.RaisedMs))
		v = append(v, byte(len(t.Reason)))
		v = append(v, t.Reason...)
	}
	return v, nil
}

// DecodeDeliveryState decodes a delivery timer's state. An empty state (a
// timer ingest just created) is attempt 0 at the head of the stream, with a
// full bucket.
func DecodeDeliveryState(state []byte) (DeliveryState, error) {
	if len(state) == 0 {
		return DeliveryState{}, nil
	}
	if len(state) < 6 {
		return DeliveryState{}, corruptf("delivery timer: short state")
	}
	n := int(binary.BigEndian.Uint16(state[4:6]))
	if n > MaxCursorBytes || len(state) < 6+n {
		return DeliveryState{}, corruptf("delivery timer: bad cursor length")
	}
	s := DeliveryState{Attempt: binary.BigEndian.Uint32(state[:4])}
	if n > 0 {
		s.Cursor = store.NewCursor(append([]byte(nil), state[6:6+n]...))
	}
	ext := state[6+n:]
	if len(ext) == 0 {
		return s, nil
	}
	if len(ext) < 2 || ext[0] != stateExtV1 || ext[1]&^stateKnownMask != 0 || ext[1] == 0 ||
		(ext[1]&flagPaced != 0 && ext[1]&flagBucket == 0) {
		return DeliveryState{}, corruptf("delivery timer: bad extension")
	}
	flags := ext[1]
	ext = ext[2:]
	if flags&flagBucket != 0 {
		if len(ext) < bucketBytes {
			return DeliveryState{}, corruptf("delivery timer: short bucket")
		}
		s.Bucket = &TokenBucket{
			MilliTokens: binary.BigEndian.Uint32(ext[:4]),
			AtMs:        int64(binary.BigEndian.Uint64(ext[4:12])),
			Paced:       flags&flagPaced != 0,
		}
		ext = ext[bucketBytes:]
	}
	if flags&flagThrottle != 0 {
		if len(ext) < throttleFixed {
			return DeliveryState{}, corruptf("delivery timer: short throttle")
		}
		t := &Throttle{
			MaxInFlight:  ext[0],
			RateMilli:    binary.BigEndian.Uint32(ext[1:5]),
			CeilingMilli: binary.BigEndian.Uint32(ext[5:9]),
			SinceMs:      int64(binary.BigEndian.Uint64(ext[9:17])),
			DecreasedMs:  int64(binary.BigEndian.Uint64(ext[17:25])),
			RaisedMs:     int64(binary.BigEndian.Uint64(ext[25:33])),
		}
		rl := int(ext[33])
		ext = ext[throttleFixed:]
		if rl > MaxThrottleReason || len(ext) < rl {
			return DeliveryState{}, corruptf("delivery timer: bad throttle reason")
		}
		t.Reason = string(ext[:rl])
		ext = ext[rl:]
		s.Throttle = t
	}
	if len(ext) != 0 {
		return DeliveryState{}, corruptf("delivery timer: trailing data")
	}
	return s, nil
}
