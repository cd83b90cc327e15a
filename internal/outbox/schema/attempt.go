package schema

import (
	"encoding/binary"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/store"
)

// Bounds of an attempt row. At most 10 attempts of at most
// maxAttemptBytes (305) each keep a row within MaxAttemptsRowBytes (3,056)
// however hostile the endpoint.
const (
	// MaxAttempts is how many attempts a row keeps, the newest; older ones
	// are dropped and only counted.
	MaxAttempts = 10
	// MaxErrorClassBytes bounds Attempt.ErrorClass.
	MaxErrorClassBytes = 32
	// MaxExcerptBytes bounds Attempt.Excerpt.
	MaxExcerptBytes = 256
	// maxAttemptBytes is one encoded attempt at its largest: at ms (8),
	// duration ms (4), status (2), the class and the excerpt with their
	// one- and two-byte uvarint lengths.
	maxAttemptBytes = 8 + 4 + 2 + 1 + MaxErrorClassBytes + 2 + MaxExcerptBytes
	// MaxAttemptsRowBytes is an attempt row at its largest: version (1),
	// total (4), attempts held (1) and MaxAttempts attempts.
	MaxAttemptsRowBytes = 1 + 4 + 1 + MaxAttempts*maxAttemptBytes
)

const attemptsV2 = 0x02

// Attempt is one delivery attempt of a stream row, for operators.
type Attempt struct {
	// AtMs is when the attempt ended.
	AtMs int64
	// DurationMs is how long the call took, by the caller's clock.
	DurationMs uint32
	// Status is the HTTP status the endpoint answered, 0 when none.
	Status int
	// ErrorClass is a short token such as "timeout", "connect" or
	// "status"; empty only for an attempt that delivered (a 2xx status).
	ErrorClass string
	// Excerpt is the start of the endpoint's answer body: printable UTF-8
	// of at most MaxExcerptBytes, as Excerpt makes it; empty when none.
	Excerpt string
}

// Delivered reports whether the endpoint took the row in this attempt.
func (a Attempt) Delivered() bool { return a.ErrorClass == "" }

// Validate reports an attempt no row may hold.
func (a Attempt) Validate() error {
	switch {
	case a.AtMs < 0:
		return invalidf("attempt: time must not be negative")
	case a.Status != 0 && (a.Status < 100 || a.Status > 599):
		return invalidf("attempt: status must be 0 or an HTTP status")
	case a.ErrorClass == "" && (a.Status < 200 || a.Status > 299):
		return invalidf("attempt: an attempt without an error class must have a 2xx status")
	case a.ErrorClass != "" && a.Status >= 200 && a.Status <= 299:
		return invalidf("attempt: an attempt answered 2xx delivered and has no error class")
	case a.ErrorClass != "" && !validToken(a.ErrorClass, MaxErrorClassBytes):
		return invalidf("attempt: error class must be a token of at most %d bytes", MaxErrorClassBytes)
	case !validExcerpt(a.Excerpt):
		return invalidf("attempt: excerpt must be printable UTF-8 of at most %d bytes", MaxExcerptBytes)
	}
	return nil
}

// Attempts is a stream row's attempt row: its last MaxAttempts attempts,
// oldest first, and how many it had in all.
type Attempts struct {
	// Total counts every attempt recorded on the row, those dropped
	// included; it stops at 2^32-1.
	Total uint32
	// Last holds the newest attempts, at most MaxAttempts, newest last.
	Last []Attempt
}

// Latest is the newest attempt, false when there is none.
func (h Attempts) Latest() (Attempt, bool) {
	if len(h.Last) == 0 {
		return Attempt{}, false
	}
	return h.Last[len(h.Last)-1], true
}

// With is h with a recorded after its attempts, the oldest dropped past
// MaxAttempts. It never shares h's array, so h stays as it was.
func (h Attempts) With(a Attempt) Attempts {
	keep := h.Last[max(0, len(h.Last)-(MaxAttempts-1)):]
	last := make([]Attempt, 0, len(keep)+1)
	last = append(append(last, keep...), a)
	total := h.Total
	if total < uint32(len(h.Last)) {
		total = uint32(len(h.Last)) // a count behind its own attempts
	}
	if total < math.MaxUint32 {
		total++
	}
	return Attempts{Total: total, Last: last}
}

// Validate reports an attempt row no store may hold.
func (h Attempts) Validate() error {
	switch {
	case len(h.Last) == 0:
		return invalidf("attempts: no attempt")
	case len(h.Last) > MaxAttempts:
		return invalidf("attempts: more than %d", MaxAttempts)
	case uint64(h.Total) < uint64(len(h.Last)):
		return invalidf("attempts: total below the attempts held")
	}
	for _, a := range h.Last {
		if err := a.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// EncodeAttempts is version 2: total u32, attempts held u8 (1 to
// MaxAttempts), then per attempt, oldest first, at ms u64, duration ms
// u32, status u16, error class and excerpt (each a uvarint length and
// bytes).
func EncodeAttempts(h Attempts) (store.Value, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	n := 1 + 4 + 1
	for _, a := range h.Last {
		n += 8 + 4 + 2 + 2 + len(a.ErrorClass) + 2 + len(a.Excerpt)
	}
	v := make([]byte, 0, n)
	v = append(v, attemptsV2)
	v = binary.BigEndian.AppendUint32(v, h.Total)
	v = append(v, byte(len(h.Last)))
	for _, a := range h.Last {
		v = binary.BigEndian.AppendUint64(v, uint64(a.AtMs))
		v = binary.BigEndian.AppendUint32(v, a.DurationMs)
		v = binary.BigEndian.AppendUint16(v, uint16(a.Status))
		v = appendStr(v, a.ErrorClass)
		v = appendStr(v, a.Excerpt)
	}
	return v, nil
}

// DecodeAttempts decodes an attempt row.
func DecodeAttempts(v store.Value) (Attempts, error) {
	var h Attempts
	r := &reader{what: "attempt", b: v}
	switch {
	case len(v) == 0:
		r.fail("empty value")
	case v[0] != attemptsV2:
		r.fail("unknown version %d", v[0])
	default:
		r.b = v[1:]
	}
	h.Total = r.u32()
	n := int(r.u8())
	if r.err == nil && (n == 0 || n > MaxAttempts) {
		r.fail("%d attempts held", n)
	}
	for i := 0; i < n && r.err == nil; i++ {
		h.Last = append(h.Last, Attempt{
			AtMs: r.ms(), DurationMs: r.u32(), Status: int(r.u16()),
			ErrorClass: r.str(MaxErrorClassBytes), Excerpt: r.str(MaxExcerptBytes),
		})
	}
	if err := r.end(); err != nil {
		return Attempts{}, err
	}
	if err := h.Validate(); err != nil {
		return Attempts{}, corruptf("%v", err)
	}
	return h, nil
}

// Excerpt makes the start of an endpoint's answer body, which relay does
// not control, fit to store and to show in JSON: at most MaxExcerptBytes of
// valid UTF-8, with tabs and line breaks turned into spaces and every
// other byte or character that is not printable (control bytes, invalid
// UTF-8, format characters such as bidirectional overrides) replaced by
// U+FFFD. It never splits a character, and drops a sequence cut short at
// the end of raw, which is where a read capped in bytes cuts.
func Excerpt(raw []byte) string {
	var b strings.Builder
	for len(raw) > 0 {
		r, n := utf8.DecodeRune(raw)
		switch {
		case r == utf8.RuneError && n <= 1:
			if !utf8.FullRune(raw) {
				return b.String()
			}
		case r == '\t' || r == '\n' || r == '\r':
			r = ' '
		case !unicode.IsPrint(r):
			r = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(r) > MaxExcerptBytes {
			break
		}
		b.WriteRune(r)
		raw = raw[n:]
	}
	return b.String()
}

// validExcerpt reports whether s is what Excerpt makes: printable UTF-8 of
// at most MaxExcerptBytes.
func validExcerpt(s string) bool {
	if len(s) > MaxExcerptBytes {
		return false
	}
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return false // an invalid byte, not the replacement character
		}
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
