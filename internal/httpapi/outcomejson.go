package httpapi

import (
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// The outcomes body is read on every ingest, and the general strict path
// (checkStrictTop, then encoding/json) cost about 12 µs a request, a sixth
// of relay's CPU per single POST. decodeOutcomesBody reads the bodies
// producers send in one pass with no reflection, and takes only what it
// can read exactly as that path would: every key known and sent once in
// its own spelling, strings without escapes in valid UTF-8 with no
// control byte, integers without fraction, exponent or sign where the
// field is unsigned. Anything else, valid or not, it declines, and the
// general path reads the body and words any problem, so the two can never
// answer differently (FuzzOutcomesBodyFastPath holds it to that).

// outcomesBody is the body of POST .../outcomes: one outcome, or a list.
type outcomesBody struct {
	schema.Outcome
	Outcomes []schema.Outcome `json:"outcomes"`
}

// decodeOutcomesBody reads body as the general path would when it can,
// returning what that path would and the count of top-level keys; ok is
// false where it declines.
func decodeOutcomesBody(body []byte, v *outcomesBody) (topKeys int, ok bool) {
	d := outcomeDecoder{data: body, ok: true}
	if !d.object(func(key []byte) (uint16, bool) {
		topKeys++
		if string(key) == "outcomes" {
			return 1 << 15, d.outcomes(&v.Outcomes)
		}
		return d.outcomeMember(key, &v.Outcome)
	}) {
		return 0, false
	}
	d.space()
	return topKeys, d.pos == len(d.data)
}

// outcomeDecoder is a cursor over a body; ok turns false, for good, at
// the first thing it declines.
type outcomeDecoder struct {
	data []byte
	pos  int
	ok   bool
}

func (d *outcomeDecoder) space() { d.pos = skipJSONSpace(d.data, d.pos) }

// open consumes c, the start of a container, after space.
func (d *outcomeDecoder) open(c byte) bool {
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == c {
		d.pos++
		return true
	}
	d.ok = false
	return false
}

// empty reads an empty object.
func (d *outcomeDecoder) empty() bool {
	if d.open('{') && d.close('}') {
		return true
	}
	d.ok = false
	return false
}

// close consumes end, if it comes next, for an empty container.
func (d *outcomeDecoder) close(end byte) bool {
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == end {
		d.pos++
		return true
	}
	return false
}

// next consumes the ',' before another member, reporting true, or the end
// of the container, reporting false; anything else declines.
func (d *outcomeDecoder) next(end byte) bool {
	if !d.ok {
		return false
	}
	d.space()
	if d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ',':
			d.pos++
			return true
		case end:
			d.pos++
			return false
		}
	}
	d.ok = false
	return false
}

// object reads an object, handing member each key with its value next;
// member reads the value and names the key by a bit of its own, or
// declines. A key sent twice declines the object.
func (d *outcomeDecoder) object(member func(key []byte) (bit uint16, ok bool)) bool {
	if !d.open('{') {
		return false
	}
	var seen uint16
	for more := !d.close('}'); more; more = d.next('}') {
		key, ok := d.key()
		if !ok {
			return false
		}
		bit, ok := member(key)
		if !ok || seen&bit != 0 {
			d.ok = false
			return false
		}
		seen |= bit
	}
	return d.ok
}

// key reads a member's key and its colon. Callers switch on
// string(key), which Go compares without allocating.
func (d *outcomeDecoder) key() ([]byte, bool) {
	raw, ok := d.raw()
	if !ok {
		return nil, false
	}
	d.space()
	if d.pos >= len(d.data) || d.data[d.pos] != ':' {
		d.ok = false
		return nil, false
	}
	d.pos++
	return raw, true
}

// raw reads a string and returns the bytes between its quotes, declining
// one with an escape, a control byte or invalid UTF-8.
func (d *outcomeDecoder) raw() ([]byte, bool) {
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '"' {
		start, ascii := d.pos+1, true
		for i := start; i < len(d.data); i++ {
			c := d.data[i]
			if c == '"' {
				if s := d.data[start:i]; ascii || utf8.Valid(s) {
					d.pos = i + 1
					return s, true
				}
				break
			}
			if c == '\\' || c < 0x20 {
				break
			}
			ascii = ascii && c < utf8.RuneSelf
		}
	}
	d.ok = false
	return nil, false
}

func (d *outcomeDecoder) str(v *string) bool {
	raw, ok := d.raw()
	if ok {
		*v = string(raw)
	}
	return ok
}

// digits reads an unsigned integer without leading zero, declining one
// that overflows max.
func (d *outcomeDecoder) digits(max uint64) (uint64, bool) {
	start := d.pos
	var n uint64
	for d.pos < len(d.data) && '0' <= d.data[d.pos] && d.data[d.pos] <= '9' {
		digit := uint64(d.data[d.pos] - '0')
		if n > (max-digit)/10 {
			d.ok = false
			return 0, false
		}
		n = n*10 + digit
		d.pos++
	}
	// A fraction or exponent left after the digits is declined by what
	// reads on, which takes only a ',' or the container's end.
	if d.pos == start || d.data[start] == '0' && d.pos-start > 1 {
		d.ok = false
		return 0, false
	}
	return n, true
}

func (d *outcomeDecoder) uint(v *uint64) bool {
	d.space()
	n, ok := d.digits(1<<64 - 1)
	if ok {
		*v = n
	}
	return ok
}

// int reads an int64; a negative one is declined, as is "-0": no field
// of an outcome may be negative, and the general path words the problem.
func (d *outcomeDecoder) int(v *int64) bool {
	d.space()
	n, ok := d.digits(1<<63 - 1)
	if ok {
		*v = int64(n)
	}
	return ok
}

func (d *outcomeDecoder) bool(v *bool) bool {
	d.space()
	for _, lit := range [...]string{"true", "false"} {
		if len(d.data)-d.pos >= len(lit) && string(d.data[d.pos:d.pos+len(lit)]) == lit {
			d.pos += len(lit)
			*v = lit == "true"
			return true
		}
	}
	d.ok = false
	return false
}

// outcomes reads a list's array.
func (d *outcomeDecoder) outcomes(v *[]schema.Outcome) bool {
	if !d.open('[') {
		return false
	}
	out := make([]schema.Outcome, 0, 1)
	for more := !d.close(']'); more; more = d.next(']') {
		out = append(out, schema.Outcome{})
		if !d.outcome(&out[len(out)-1]) {
			return false
		}
	}
	*v = out
	return d.ok
}

// outcome reads one outcome object.
func (d *outcomeDecoder) outcome(o *schema.Outcome) bool {
	return d.object(func(key []byte) (uint16, bool) { return d.outcomeMember(key, o) })
}

// outcomeMember reads the value of an outcome's member key into o.
func (d *outcomeDecoder) outcomeMember(key []byte, o *schema.Outcome) (uint16, bool) {
	switch string(key) {
	case "reservation_id":
		return 1 << 0, d.str(&o.ReservationID)
	case "repository":
		return 1 << 1, d.str(&o.Repository)
	case "occurred_unix_ms":
		return 1 << 2, d.int(&o.OccurredUnixMs)
	case "committed":
		o.Committed = new(schema.Committed)
		return 1 << 3, d.committed(o.Committed)
	case "aborted":
		o.Aborted = new(schema.Aborted)
		return 1 << 4, d.aborted(o.Aborted)
	case "expired":
		o.Expired = new(schema.Expired)
		return 1 << 5, d.empty()
	case "read_served":
		o.ReadServed = new(schema.ReadServed)
		return 1 << 6, d.readServed(o.ReadServed)
	}
	return 0, false
}

func (d *outcomeDecoder) committed(c *schema.Committed) bool {
	return d.object(func(key []byte) (uint16, bool) {
		switch string(key) {
		case "bytes_stored":
			return 1 << 0, d.uint(&c.BytesStored)
		case "new_to_repo":
			return 1 << 1, d.uint(&c.NewToRepo)
		case "new_to_store":
			return 1 << 2, d.uint(&c.NewToStore)
		case "refs":
			return 1 << 3, d.refs(&c.Refs)
		}
		return 0, false
	})
}

func (d *outcomeDecoder) refs(v *[]schema.Ref) bool {
	if !d.open('[') {
		return false
	}
	out := []schema.Ref{}
	for more := !d.close(']'); more; more = d.next(']') {
		out = append(out, schema.Ref{})
		if !d.ref(&out[len(out)-1]) {
			return false
		}
	}
	*v = out
	return d.ok
}

func (d *outcomeDecoder) ref(r *schema.Ref) bool {
	return d.object(func(key []byte) (uint16, bool) {
		switch string(key) {
		case "name":
			return 1 << 0, d.str(&r.Name)
		case "new":
			return 1 << 1, d.str(&r.New)
		case "deleted":
			return 1 << 2, d.bool(&r.Deleted)
		}
		return 0, false
	})
}

func (d *outcomeDecoder) aborted(a *schema.Aborted) bool {
	return d.object(func(key []byte) (uint16, bool) {
		switch string(key) {
		case "reason":
			return 1 << 0, d.str(&a.Reason)
		case "detail":
			return 1 << 1, d.str(&a.Detail)
		}
		return 0, false
	})
}

func (d *outcomeDecoder) readServed(r *schema.ReadServed) bool {
	return d.object(func(key []byte) (uint16, bool) {
		switch string(key) {
		case "object":
			return 1 << 0, d.str(&r.Object)
		case "bytes_served":
			return 1 << 1, d.uint(&r.BytesServed)
		}
		return 0, false
	})
}
