package outbox

import (
	"strings"
	"time"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// MaxOccurredAhead is how far past the ingesting relay's clock an
// outcome's occurred_unix_ms may lie. Clocks kept by NTP differ by far
// less; an outcome further ahead comes from a confused clock or a time in
// the wrong unit (microseconds, nanoseconds), and is refused rather than
// delivered with a date that has not happened. The past is not bounded
// beyond Validate's rule: a producer retrying an old outcome after an
// outage, however long, must have it accepted, and a 400 would make it drop
// the outcome.
const MaxOccurredAhead = 5 * time.Minute

// MaxOccurredUnixMs is the last millisecond RFC 3339 can write,
// 9999-12-31T23:59:59.999Z: the webhook's timestamp must be one, whatever
// the ingesting clock says.
const MaxOccurredUnixMs = 253402300799999

// LatestOccurredUnixMs is the last occurred_unix_ms ValidateIngest accepts
// at now.
func LatestOccurredUnixMs(now time.Time) int64 {
	return min(now.Add(MaxOccurredAhead).UnixMilli(), MaxOccurredUnixMs)
}

// ValidateIngest reports the first rule an outcome a producer sends breaks:
// those of its Validate, then the rules only ingest applies, now being the
// ingesting clock's time: its reservation id is not a synthetic one, and it
// occurred no later than LatestOccurredUnixMs(now). Synthetic rows stay
// relay's own: Append takes them. Rows already stored keep Validate's rules
// alone, so that they still decode and deliver.
func ValidateIngest(o schema.Outcome, now time.Time) error {
	if o.Event != nil {
		// Operator events are relay's word about endpoints: one a producer
		// could send would be a forged alert.
		return invalidf("event is relay's own: an outcome cannot carry one")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	if err := ValidateClientReservationID(o.ReservationID); err != nil {
		return err
	}
	if strings.HasPrefix(o.ReservationID, schema.EventPrefix) {
		// Operator events' ids (schema.EventID): an outcome taking one first
		// would have the event answered conflict, and never sent.
		return invalidf("reservation_id must not start with %q: relay keeps that prefix for its operator events", schema.EventPrefix)
	}
	if o.OccurredUnixMs > LatestOccurredUnixMs(now) {
		// No figure the producer could have sent appears here: a problem
		// never repeats a payload value.
		return invalidf("occurred_unix_ms must be Unix time in milliseconds, no later than %g minutes past relay's clock (nor past the year 9999)",
			MaxOccurredAhead.Minutes())
	}
	return nil
}

// ValidateClientReservationID is schema.ValidateReservationID for an id a
// client sends or names: one starting with schema.SyntheticPrefix names a
// row relay acknowledges without a call, so an outcome a producer sent
// under it would be answered accepted and never delivered.
func ValidateClientReservationID(rid string) error {
	if err := schema.ValidateReservationID(rid); err != nil {
		return err
	}
	if schema.IsSynthetic(rid) {
		return invalidf("reservation_id must not start with %q: relay keeps that prefix for outcomes it acknowledges without sending", schema.SyntheticPrefix)
	}
	return nil
}
