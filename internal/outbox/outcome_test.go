package outbox_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

// A producer's outcome under a synthetic id would be answered accepted and
// then acknowledged without a call: ingest and replay refuse such ids, while
// Append, relay's own entry, keeps taking them.
func TestSyntheticReservationIDsAreRelaysOwn(t *testing.T) {
	for _, rid := range []string{"s:", "s:local", "s:" + strings.Repeat("x", 126)} {
		o := committed(rid)
		if err := o.Validate(); err != nil {
			t.Errorf("Validate(%q): %v, a stored synthetic row must stay valid", rid, err)
		}
		if err := outbox.ValidateIngest(o, time.UnixMilli(t0)); !errors.Is(err, outbox.ErrInvalid) || !strings.Contains(err.Error(), `reservation_id must not start with "s:"`) {
			t.Errorf("ValidateIngest(%q) = %v", rid, err)
		}
		if err := outbox.ValidateClientReservationID(rid); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("ValidateClientReservationID(%q) = %v", rid, err)
		}
	}
	for _, rid := range []string{"s", "s-1", "S:x", "xs:1", ":s:", "r-s:"} {
		o := committed(rid)
		if err := outbox.ValidateIngest(o, time.UnixMilli(t0)); err != nil {
			t.Errorf("ValidateIngest(%q): %v", rid, err)
		}
	}

	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		if st := e.Append(committed("s:local")); st[0].Code != outbox.Accepted {
			t.Fatalf("Append of a synthetic outcome: %+v", st)
		}
		if _, found := e.record("billing", "s:local"); !found {
			t.Fatal("no record of the synthetic outcome")
		}
		before := e.all()
		if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "s:local"); !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("replay of a synthetic row: %v", err)
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused replay changed the partition")
		}
	})
}

// occurred_unix_ms is bounded ahead of the ingesting clock, never behind
// it: a producer retrying after an outage has its old outcome taken, a
// clock that is confused or a time in the wrong unit is refused, and
// whatever is taken is a time RFC 3339 can write.
func TestIngestBoundsOccurredTimeAheadOfTheClock(t *testing.T) {
	at := func(now, occurred int64) error {
		o := committed("r-1")
		o.OccurredUnixMs = occurred
		return outbox.ValidateIngest(o, time.UnixMilli(now))
	}
	ahead := outbox.MaxOccurredAhead.Milliseconds()
	for _, c := range []struct {
		name          string
		now, occurred int64
		ok            bool
	}{
		{"now", t0, t0, true},
		{"the last accepted, ahead of the clock", t0, t0 + ahead, true},
		{"the first refused, ahead of the clock", t0, t0 + ahead + 1, false},
		{"a year after an outage", t0 + 365*24*3600*1000, t0, true},
		{"the first millisecond", t0, 1, true},
		{"microseconds", t0, t0 * 1000, false},
		{"nanoseconds", t0, t0 * 1_000_000, false},
		{"year 10000", t0, outbox.MaxOccurredUnixMs + 1, false},
		{"the largest int64", t0, 1<<63 - 1, false},
		{"the last RFC 3339 millisecond, at a clock just before it", outbox.MaxOccurredUnixMs - 1000, outbox.MaxOccurredUnixMs, true},
		{"the first millisecond past RFC 3339, at that clock", outbox.MaxOccurredUnixMs - 1000, outbox.MaxOccurredUnixMs + 1, false},
		{"past RFC 3339 at a clock past it", outbox.MaxOccurredUnixMs + ahead, outbox.MaxOccurredUnixMs + 1, false},
	} {
		err := at(c.now, c.occurred)
		if c.ok && err != nil {
			t.Errorf("%s: refused: %v", c.name, err)
		}
		if !c.ok && (!errors.Is(err, outbox.ErrInvalid) || !strings.HasPrefix(err.Error(), "occurred_unix_ms must be")) {
			t.Errorf("%s: %v, want occurred_unix_ms refused", c.name, err)
		}
	}
	if got := outbox.LatestOccurredUnixMs(time.UnixMilli(t0)); got != t0+ahead {
		t.Errorf("LatestOccurredUnixMs = %d, want %d", got, t0+ahead)
	}
	// Stored rows keep the looser rule, so that a row taken before the
	// bound still decodes and delivers.
	old := committed("r-1")
	old.OccurredUnixMs = t0 * 1000
	if err := old.Validate(); err != nil {
		t.Errorf("Validate refuses a stored far-future row: %v", err)
	}

	// The last accepted time is one the webhook writes in RFC 3339; the
	// first refused one is not.
	for ms, rfc := range map[int64]bool{outbox.MaxOccurredUnixMs: true, outbox.MaxOccurredUnixMs + 1: false} {
		o := committed("r-1")
		o.OccurredUnixMs = ms
		body, err := outbox.EncodeWebhook(&o, "acme", "https://relay.example.com")
		if err != nil {
			t.Fatal(err)
		}
		var w struct{ Timestamp string }
		if err := json.Unmarshal(body, &w); err != nil {
			t.Fatal(err)
		}
		_, err = time.Parse(time.RFC3339Nano, w.Timestamp)
		if (err == nil) != rfc || (rfc && w.Timestamp != "9999-12-31T23:59:59.999Z") {
			t.Errorf("occurred %d writes timestamp %q (RFC 3339: %v)", ms, w.Timestamp, err)
		}
	}
}
