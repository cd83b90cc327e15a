package schema

import (
	"encoding/binary"
	"fmt"

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
// lease writes it, so the token bucket and the throttle are the whole cluster's,
// kept without a round trip of their own.
type DeliveryState struct {
	// FailedFires counts the stream's fires in a row that failed (a call
	// failed and nothing was delivered, or the backlog held the stream):
	// the backoff's exponent. A fire that delivers sets it to 0, or to 1
	// when the endpoint asked it to wait (Retry-After).
	FailedFires uint32
	// Cursor is nil to start at the head of the stream.
	Cursor *store.Cursor
	// Tokens is nil for a full token bucket: a stream without a rate_limit, or
	// a state written before rate limits existed.
	Tokens *TokenBucket
	// Throttle is nil when the stream runs at its endpoint's configured
	// limits.
	Throttle *Throttle
	// Health is nil for a stream that has not failed, nor emitted an
	// event, since its timer was created.
	Health *Health
}

// Health is how a stream's endpoint has been doing, for its auto-disable
// and operator events, and the events its fires decided on but have not
// yet appended. An event is appended by the fire after the one that
// decided it, whose completion records it here in the same batch as what
// it is about (a disable, say): the event cannot be lost, and appended
// twice it is a duplicate of itself (EventID).
type Health struct {
	// FailingSinceMs is the first failed call since the endpoint last
	// delivered; 0 while healthy.
	FailingSinceMs int64
	// NotifiedMs is when the stream last emitted endpoint.failing,
	// endpoint.disabled or endpoint.gone; 0 never.
	NotifiedMs int64
	// LastStatus and LastError are the last failed call's.
	LastStatus int
	LastError  string
	// Pending are the events to append, each with its time.
	Pending []PendingEvent
	// ResumeMs is when the fire that appends the events reschedules the
	// timer to, the due time the deciding fire chose; 0 (or
	// timers.NeverMs) to go on with the fire at once.
	ResumeMs int64
}

// PendingEvent is an event decided on and not yet appended.
type PendingEvent struct {
	Event Event
	AtMs  int64
}

// MaxPendingEvents bounds a stream's pending events; a fire decides on at
// most two (endpoint.failing and endpoint.disabled never together).
const MaxPendingEvents = 4

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
func (s DeliveryState) Paced() bool { return s.Tokens != nil && s.Tokens.Paced }

const (
	stateExtV1     = 0x01
	flagTokens     = 1 << 0
	flagPaced      = 1 << 1
	flagThrottle   = 1 << 2
	flagHealth     = 1 << 3
	tokensBytes    = 4 + 8
	throttleFixed  = 1 + 4 + 4 + 8 + 8 + 8 + 1
	healthFixed    = 8 + 8 + 8 + 2 + 1
	stateKnownMask = flagTokens | flagPaced | flagThrottle | flagHealth
)

// EncodeDeliveryState is failed fires u32, cursor length u16, cursor bytes (at
// most 4096), then, only when there is a token bucket, a throttle or a health, an
// extension: 0x01, a flags byte (1 token bucket, 2 paced, 4 throttle, 8 health),
// the token bucket (milli tokens u32, at ms i64), the throttle (max in flight u8,
// rate and ceiling u32, since, decreased and raised ms i64, reason length
// u8 and bytes) and the health (failing since, notified and resume ms i64,
// last status u16, last error length u8 and bytes, then a count u8 of
// pending events, each at ms i64, length u8, and 0x01 and its record
// body as appendEvent writes it). It has no version byte: an empty state is a fresh timer, and a
// state without the extension reads as before, a full token bucket and no
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
	if err := s.Health.validate(); err != nil {
		return nil, err
	}
	v := make([]byte, 0, 6+len(cur))
	v = binary.BigEndian.AppendUint32(v, s.FailedFires)
	v = binary.BigEndian.AppendUint16(v, uint16(len(cur)))
	v = append(v, cur...)
	if s.Tokens == nil && s.Throttle == nil && s.Health == nil {
		return v, nil
	}
	var flags byte
	if s.Tokens != nil {
		flags |= flagTokens
		if s.Tokens.Paced {
			flags |= flagPaced
		}
	}
	if s.Throttle != nil {
		flags |= flagThrottle
	}
	if s.Health != nil {
		flags |= flagHealth
	}
	v = append(v, stateExtV1, flags)
	if b := s.Tokens; b != nil {
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
	if h := s.Health; h != nil {
		v = binary.BigEndian.AppendUint64(v, uint64(h.FailingSinceMs))
		v = binary.BigEndian.AppendUint64(v, uint64(h.NotifiedMs))
		v = binary.BigEndian.AppendUint64(v, uint64(h.ResumeMs))
		v = binary.BigEndian.AppendUint16(v, uint16(h.LastStatus))
		v = append(v, byte(len(h.LastError)))
		v = append(v, h.LastError...)
		v = append(v, byte(len(h.Pending)))
		for _, p := range h.Pending {
			body := appendEvent([]byte{codecV1}, &p.Event)
			v = binary.BigEndian.AppendUint64(v, uint64(p.AtMs))
			v = append(v, byte(len(body)))
			v = append(v, body...)
		}
	}
	return v, nil
}

func (h *Health) validate() error {
	if h == nil {
		return nil
	}
	switch {
	case h.FailingSinceMs < 0 || h.NotifiedMs < 0 || h.ResumeMs < 0:
		return invalidf("delivery timer: negative health time")
	case h.LastStatus < 0 || h.LastStatus > 599:
		return invalidf("delivery timer: bad last status")
	case len(h.LastError) > MaxEventErrorBytes:
		return invalidf("delivery timer: last error exceeds %d bytes", MaxEventErrorBytes)
	case len(h.Pending) > MaxPendingEvents:
		return invalidf("delivery timer: more than %d pending events", MaxPendingEvents)
	}
	for _, p := range h.Pending {
		if p.AtMs <= 0 {
			return invalidf("delivery timer: pending event without a time")
		}
		if err := p.Event.validate(); err != nil {
			return fmt.Errorf("delivery timer: %w", err)
		}
	}
	return nil
}

// DecodeDeliveryState decodes a delivery timer's state. An empty state (a
// timer ingest just created) counts no failed fire and starts at the head
// of the stream, with a full token bucket.
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
	s := DeliveryState{FailedFires: binary.BigEndian.Uint32(state[:4])}
	if n > 0 {
		s.Cursor = store.NewCursor(append([]byte(nil), state[6:6+n]...))
	}
	ext := state[6+n:]
	if len(ext) == 0 {
		return s, nil
	}
	if len(ext) < 2 || ext[0] != stateExtV1 || ext[1]&^stateKnownMask != 0 || ext[1] == 0 ||
		(ext[1]&flagPaced != 0 && ext[1]&flagTokens == 0) {
		return DeliveryState{}, corruptf("delivery timer: bad extension")
	}
	flags := ext[1]
	ext = ext[2:]
	if flags&flagTokens != 0 {
		if len(ext) < tokensBytes {
			return DeliveryState{}, corruptf("delivery timer: short token bucket")
		}
		s.Tokens = &TokenBucket{
			MilliTokens: binary.BigEndian.Uint32(ext[:4]),
			AtMs:        int64(binary.BigEndian.Uint64(ext[4:12])),
			Paced:       flags&flagPaced != 0,
		}
		ext = ext[tokensBytes:]
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
	if flags&flagHealth != 0 {
		h, rest, err := decodeHealth(ext)
		if err != nil {
			return DeliveryState{}, err
		}
		s.Health, ext = h, rest
	}
	if len(ext) != 0 {
		return DeliveryState{}, corruptf("delivery timer: trailing data")
	}
	return s, nil
}

func decodeHealth(ext []byte) (*Health, []byte, error) {
	if len(ext) < healthFixed {
		return nil, nil, corruptf("delivery timer: short health")
	}
	h := &Health{
		FailingSinceMs: int64(binary.BigEndian.Uint64(ext[0:8])),
		NotifiedMs:     int64(binary.BigEndian.Uint64(ext[8:16])),
		ResumeMs:       int64(binary.BigEndian.Uint64(ext[16:24])),
		LastStatus:     int(binary.BigEndian.Uint16(ext[24:26])),
	}
	el := int(ext[26])
	ext = ext[healthFixed:]
	if len(ext) < el+1 {
		return nil, nil, corruptf("delivery timer: short health")
	}
	h.LastError = string(ext[:el])
	n := int(ext[el])
	ext = ext[el+1:]
	if n > MaxPendingEvents {
		return nil, nil, corruptf("delivery timer: %d pending events", n)
	}
	for range n {
		if len(ext) < 9 || len(ext) < 9+int(ext[8]) {
			return nil, nil, corruptf("delivery timer: short pending event")
		}
		at, bl := int64(binary.BigEndian.Uint64(ext[:8])), int(ext[8])
		r := newReader("pending event", ext[9:9+bl])
		e := readEvent(r)
		if err := r.end(); err != nil {
			return nil, nil, err
		}
		h.Pending = append(h.Pending, PendingEvent{Event: *e, AtMs: at})
		ext = ext[9+bl:]
	}
	if err := h.validate(); err != nil {
		return nil, nil, corruptf("%v", err)
	}
	return h, ext, nil
}
