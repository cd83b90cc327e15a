package schema

import (
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// Kind is what an outcome reports; endpoints filter on it.
type Kind string

// Outcome kinds, as named in the webhook type "outcome.<kind>".
const (
	KindCommitted  Kind = "committed"
	KindAborted    Kind = "aborted"
	KindExpired    Kind = "expired"
	KindReadServed Kind = "read_served"
)

// Kinds lists every kind in a stable order.
func Kinds() []Kind { return []Kind{KindCommitted, KindAborted, KindExpired, KindReadServed} }

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	switch k {
	case KindCommitted, KindAborted, KindExpired, KindReadServed:
		return true
	}
	return false
}

// Limits of an outcome. They bound its record in the log row and the webhook
// body built from it.
const (
	MaxRepositoryBytes = 256
	MaxRefs            = 64
	MaxRefNameBytes    = 256
	MaxReasonBytes     = 64
	MaxDetailBytes     = 512
	// HexIDLen is the length of a 32-byte id in lowercase hex: a ref's new
	// target and a served object.
	HexIDLen = 64
)

// Outcome is the terminal result of one reservation, the unit that is
// delivered. Exactly one of Committed, Aborted, Expired and ReadServed is set.
// Its JSON is the webhook's data object (less relay's audience), and the API
// decodes requests into it.
type Outcome struct {
	// ReservationID is the outcome's id and idempotency key in its namespace.
	ReservationID string `json:"reservation_id"`
	// Repository is printable UTF-8 of 1 to 256 bytes.
	Repository string `json:"repository,omitempty"`
	// OccurredUnixMs is when the reservation ended, positive.
	OccurredUnixMs int64       `json:"occurred_unix_ms"`
	Committed      *Committed  `json:"committed,omitempty"`
	Aborted        *Aborted    `json:"aborted,omitempty"`
	Expired        *Expired    `json:"expired,omitempty"`
	ReadServed     *ReadServed `json:"read_served,omitempty"`
	// Event is an operator event relay appended itself (event.go): a
	// producer cannot send one.
	Event *Event `json:"event,omitempty"`
	// Trace is the span the outcome was accepted under, which its attempts
	// join. It goes from ingest to the log row and back to delivery apart
	// from the record: the same outcome sent again under another trace is
	// still the same outcome.
	Trace TraceParent `json:"-"`
}

// Committed: the reservation's writes were stored.
type Committed struct {
	BytesStored uint64 `json:"bytes_stored"`
	NewToRepo   uint64 `json:"new_to_repo"`
	NewToStore  uint64 `json:"new_to_store"`
	// Refs are the refs the commit moved, at most 64.
	Refs []Ref `json:"refs"`
}

// MarshalJSON writes no refs as [] rather than null, as the webhook schema
// says.
func (c Committed) MarshalJSON() ([]byte, error) {
	type plain Committed
	if c.Refs == nil {
		c.Refs = []Ref{}
	}
	return json.Marshal(plain(c))
}

// Ref is one ref a commit moved.
type Ref struct {
	// Name is printable UTF-8 of 1 to 256 bytes.
	Name string `json:"name"`
	// New is the ref's new target, 64 lowercase hex; empty iff Deleted.
	New     string `json:"new"`
	Deleted bool   `json:"deleted"`
}

// Aborted: the reservation was abandoned.
type Aborted struct {
	// Reason is a short machine-readable token: 1 to 64 bytes of a-z, 0-9,
	// '_', '.' and '-', starting with a letter or digit.
	Reason string `json:"reason"`
	// Detail is human-readable UTF-8 of at most 512 bytes.
	Detail string `json:"detail"`
}

// Expired: the reservation timed out. It carries no fields.
type Expired struct{}

// ReadServed: an object was read.
type ReadServed struct {
	// Object is the object's 32-byte id in 64 lowercase hex.
	Object      string `json:"object"`
	BytesServed uint64 `json:"bytes_served"`
}

// Kind is the kind of the outcome's set variant, "" when none is set.
func (o Outcome) Kind() Kind {
	switch {
	case o.Committed != nil:
		return KindCommitted
	case o.Aborted != nil:
		return KindAborted
	case o.Expired != nil:
		return KindExpired
	case o.ReadServed != nil:
		return KindReadServed
	case o.Event != nil:
		return o.Event.Type.Kind()
	}
	return ""
}

// Validate reports the first rule the outcome breaks, as an error matching
// ErrInvalid whose text is fit for the producer: it names the field, never
// echoes its value.
func (o Outcome) Validate() error {
	if err := ValidateReservationID(o.ReservationID); err != nil {
		return err
	}
	if o.Event != nil {
		if o.Repository != "" || o.Committed != nil || o.Aborted != nil || o.Expired != nil || o.ReadServed != nil {
			return invalidf("an event carries no repository and no outcome")
		}
		if o.OccurredUnixMs <= 0 {
			return invalidf("occurred_unix_ms must be a positive Unix time in milliseconds")
		}
		return o.Event.validate()
	}
	switch {
	case o.Repository == "":
		return invalidf("repository must not be empty")
	case len(o.Repository) > MaxRepositoryBytes:
		return invalidf("repository must be at most %d bytes", MaxRepositoryBytes)
	case !printable(o.Repository):
		return invalidf("repository must be printable UTF-8")
	case o.OccurredUnixMs <= 0:
		return invalidf("occurred_unix_ms must be a positive Unix time in milliseconds")
	}
	set := 0
	for _, isSet := range []bool{o.Committed != nil, o.Aborted != nil, o.Expired != nil, o.ReadServed != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return invalidf("exactly one of committed, aborted, expired and read_served must be set")
	}
	switch {
	case o.Committed != nil:
		return o.Committed.validate()
	case o.Aborted != nil:
		return o.Aborted.validate()
	case o.ReadServed != nil:
		if !lowerHexID(o.ReadServed.Object) {
			return invalidf("read_served.object must be %d lowercase hex characters", HexIDLen)
		}
	}
	return nil
}

func (c *Committed) validate() error {
	if len(c.Refs) > MaxRefs {
		return invalidf("committed.refs must hold at most %d refs", MaxRefs)
	}
	for i, r := range c.Refs {
		switch {
		case r.Name == "":
			return invalidf("committed.refs[%d].name must not be empty", i)
		case len(r.Name) > MaxRefNameBytes:
			return invalidf("committed.refs[%d].name must be at most %d bytes", i, MaxRefNameBytes)
		case !printable(r.Name):
			return invalidf("committed.refs[%d].name must be printable UTF-8", i)
		case r.Deleted && r.New != "":
			return invalidf("committed.refs[%d].new must be empty when deleted is true", i)
		case !r.Deleted && !lowerHexID(r.New):
			return invalidf("committed.refs[%d].new must be %d lowercase hex characters unless deleted is true", i, HexIDLen)
		}
	}
	return nil
}

func (a *Aborted) validate() error {
	if !validReason(a.Reason) {
		return invalidf("aborted.reason must be 1 to %d characters of a-z, 0-9, '_', '.' and '-', starting with a letter or digit", MaxReasonBytes)
	}
	switch {
	case len(a.Detail) > MaxDetailBytes:
		return invalidf("aborted.detail must be at most %d bytes", MaxDetailBytes)
	case !utf8.ValidString(a.Detail):
		return invalidf("aborted.detail must be valid UTF-8")
	}
	return nil
}

// printable: valid UTF-8 of printable runes (ASCII space included).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func lowerHexID(s string) bool {
	if len(s) != HexIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validToken: [a-z0-9][a-z0-9_.-]* of at most max bytes.
func validToken(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func validReason(s string) bool { return validToken(s, MaxReasonBytes) }
