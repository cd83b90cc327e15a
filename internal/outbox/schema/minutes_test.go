package schema_test

import (
	"errors"
	"testing"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// minute is a minute row's length in milliseconds.
const minute = int64(60_000)

func TestMinuteRowsRoundTrip(t *testing.T) {
	m := schema.Minute{Delivered: 1 << 40, Failed: 7}
	got, err := schema.DecodeMinute(schema.EncodeMinute(m))
	if err != nil || got != m {
		t.Fatalf("%+v %v", got, err)
	}
	for _, v := range []store.Value{nil, {1}, append(schema.EncodeMinute(m), 0), {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := schema.DecodeMinute(v); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%x: %v", v, err)
		}
	}
	k, _ := schema.MinuteKey("billing", t0)
	pk, ok := schema.Parse(k)
	if !ok || pk.Class != schema.ClassMinute || pk.Endpoint != "billing" || int64(pk.Minute)*minute != t0 || pk.Key() != k {
		t.Fatalf("parse %q: %+v %v", k, pk, ok)
	}
	if _, err := schema.MinuteKey("billing", -1); err == nil {
		t.Error("a time before 1970 has a minute")
	}
}
