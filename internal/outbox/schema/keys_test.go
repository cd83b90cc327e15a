package schema_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

func TestKeyBuildersRefuseBadIDs(t *testing.T) {
	badEndpoints := []string{"", "A", "-a", "_a", "a/b", "a.b", strings.Repeat("a", 64), "é"}
	for _, ep := range badEndpoints {
		if _, err := schema.AttemptKey(ep, "r1"); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("AttemptKey(%q): %v", ep, err)
		}
		if _, err := schema.BacklogKey(ep); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("BacklogKey(%q): %v", ep, err)
		}
		if _, _, err := schema.PendingRange(ep); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("PendingRange(%q): %v", ep, err)
		}
	}
	badRIDs := []string{"", "a/b", "a b", "é", strings.Repeat("r", 129), "a\x00"}
	for _, rid := range badRIDs {
		if _, err := schema.SeenKey(rid); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("SeenKey(%q): %v", rid, err)
		}
		if _, err := schema.PendingKey("ep", 1, rid); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("PendingKey(%q): %v", rid, err)
		}
	}
	for _, ok := range []string{"a", "0-_", strings.Repeat("a", 63)} {
		if err := schema.ValidateEndpointID(ok); err != nil {
			t.Errorf("endpoint %q: %v", ok, err)
		}
	}
	for _, ok := range []string{"r", "s:local", "A.b_c:d-e", strings.Repeat("r", 128)} {
		if err := schema.ValidateReservationID(ok); err != nil {
			t.Errorf("rid %q: %v", ok, err)
		}
	}
	if !schema.IsSynthetic("s:x") || schema.IsSynthetic("x:s") {
		t.Error("IsSynthetic")
	}
}

func TestEveryClassParsesBackToItsKey(t *testing.T) {
	must := func(k store.Key, err error) store.Key {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	cases := []struct {
		key  store.Key
		want schema.ParsedKey
	}{
		// A sequence whose bytes hold '/' still parses: the endpoint ends at the first '/'.
		{must(schema.PendingKey("billing", 0x2f2f2f2f2f2f2f2f, "s:x")), schema.ParsedKey{Class: schema.ClassPending, Endpoint: "billing", Seq: 0x2f2f2f2f2f2f2f2f, RID: "s:x"}},
		{must(schema.BacklogKey("billing")), schema.ParsedKey{Class: schema.ClassBacklog, Endpoint: "billing"}},
		{schema.SequenceKey(), schema.ParsedKey{Class: schema.ClassSequence}},
		{must(schema.EndpointKey("billing")), schema.ParsedKey{Class: schema.ClassEndpoint, Endpoint: "billing"}},
		{must(schema.AttemptKey("billing", "r")), schema.ParsedKey{Class: schema.ClassAttempt, Endpoint: "billing", RID: "r"}},
		{must(schema.SeenKey("r")), schema.ParsedKey{Class: schema.ClassSeen, RID: "r"}},
		{must(schema.DeliveryTimerKey(42, "billing")), schema.ParsedKey{Class: schema.ClassTimer, DueAtMs: 42, TimerKind: timers.KindOutcomeDelivery, Reference: "billing"}},
	}
	for _, c := range cases {
		got, ok := schema.Parse(c.key)
		if !ok || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.key, got, ok, c.want)
			continue
		}
		if got.Key() != c.key {
			t.Errorf("Key() = %q, want %q", got.Key(), c.key)
		}
	}
}

func TestParseRefusesMalformedKeys(t *testing.T) {
	for _, k := range []string{"", "x", "q1", "rbilling", "rbilling/", "r/x", "pbilling/1234567", "pbilling/12345678", "bBAD", "s", "sa/b", "t123", "a-x/r"} {
		if pk, ok := schema.Parse(store.Key(k)); ok {
			t.Errorf("Parse(%q) accepted as %+v", k, pk)
		}
	}
}

func TestRangesHoldExactlyTheirRows(t *testing.T) {
	start, end, err := schema.PendingRange("ab")
	if err != nil {
		t.Fatal(err)
	}
	in := func(k store.Key) bool { return k >= start && k < end }
	own, _ := schema.PendingKey("ab", ^uint64(0), "zzz")
	first, _ := schema.PendingKey("ab", 0, "A")
	other, _ := schema.PendingKey("ab-c", 0, "r")
	prefix, _ := schema.PendingKey("a", 5, "r")
	attempt, _ := schema.AttemptKey("ab", "r")
	if !in(own) || !in(first) || in(other) || in(prefix) || in(attempt) {
		t.Errorf("pending range [%q, %q) membership wrong", start, end)
	}
	// Pending rows sort by sequence.
	lo, _ := schema.PendingKey("ab", 255, "z")
	hi, _ := schema.PendingKey("ab", 256, "a")
	if lo >= hi {
		t.Error("pending keys do not sort by sequence")
	}
	s, e := schema.SeenRange()
	seen, _ := schema.SeenKey("r")
	if seen < s || seen >= e {
		t.Error("seen key outside SeenRange")
	}
	ts, te := schema.ClassRange(schema.ClassTimer)
	trs, tre := timers.Range()
	if ts != trs || te != tre {
		t.Error("timer class range differs from timers.Range")
	}
	es, ee := schema.EndpointRange()
	ek, _ := schema.EndpointKey("zz")
	if ek < es || ek >= ee {
		t.Error("endpoint key outside EndpointRange")
	}
}
