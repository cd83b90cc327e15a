package schema_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

func failedAt(ms int64) schema.Attempt {
	return schema.Attempt{AtMs: ms, DurationMs: 40, Status: 503, ErrorClass: "status", Excerpt: "busy"}
}

func TestAnEleventhAttemptDropsTheOldest(t *testing.T) {
	var h schema.Attempts
	for i := range schema.MaxAttempts + 1 {
		h = h.With(failedAt(t0 + int64(i)))
		v, err := schema.EncodeAttempts(h)
		if err != nil {
			t.Fatal(err)
		}
		if h, err = schema.DecodeAttempts(v); err != nil {
			t.Fatal(err)
		}
	}
	if len(h.Last) != schema.MaxAttempts || h.Total != schema.MaxAttempts+1 {
		t.Fatalf("%d attempts kept of %d", len(h.Last), h.Total)
	}
	for i, a := range h.Last {
		if a.AtMs != t0+1+int64(i) {
			t.Fatalf("attempt %d at +%d ms: the oldest must go, the newest stay last", i, a.AtMs-t0)
		}
	}
}

func TestWithLeavesTheHistoryItExtendsAsItWas(t *testing.T) {
	var h schema.Attempts
	for i := range schema.MaxAttempts {
		h = h.With(failedAt(t0 + int64(i)))
	}
	before := append([]schema.Attempt(nil), h.Last...)
	_ = h.With(failedAt(t0 + 99))
	_ = h.With(failedAt(t0 + 98))
	for i := range before {
		if h.Last[i] != before[i] {
			t.Fatalf("attempt %d changed to %+v", i, h.Last[i])
		}
	}
}

func TestTheTotalKeepsCountingPastTheAttemptsKept(t *testing.T) {
	var h schema.Attempts
	for i := range 37 {
		h = h.With(failedAt(t0 + int64(i)))
	}
	if h.Total != 37 || len(h.Last) != schema.MaxAttempts {
		t.Fatalf("total %d, %d kept; want 37 and %d", h.Total, len(h.Last), schema.MaxAttempts)
	}
	full := schema.Attempts{Total: math.MaxUint32, Last: []schema.Attempt{failedAt(t0)}}
	if got := full.With(failedAt(t0 + 1)); got.Total != math.MaxUint32 {
		t.Fatalf("total wrapped to %d", got.Total)
	}
}

func TestAnAttemptRowHoldsADeliveredAttempt(t *testing.T) {
	h := schema.Attempts{}.With(failedAt(t0)).With(schema.Attempt{AtMs: t0 + 5, DurationMs: 3, Status: 204})
	v, err := schema.EncodeAttempts(h)
	if err != nil {
		t.Fatal(err)
	}
	got, err := schema.DecodeAttempts(v)
	if last, _ := got.Latest(); err != nil || !last.Delivered() || last.Status != 204 || got.Total != 2 {
		t.Fatalf("%+v, %v", got, err)
	}
	// Without a class an attempt must have delivered, and with one it
	// failed: a 500 with no class, or a class on nothing, is refused.
	for _, bad := range []schema.Attempt{{AtMs: t0, Status: 500}, {AtMs: t0}, {AtMs: t0, Status: 200, ErrorClass: "status"}} {
		if _, err := schema.EncodeAttempts(schema.Attempts{Total: 1, Last: []schema.Attempt{bad}}); !errors.Is(err, schema.ErrInvalid) {
			t.Errorf("%+v encoded: %v", bad, err)
		}
	}
}

func TestTheAttemptRowDecoderIsStrict(t *testing.T) {
	one := failedAt(t0)
	valid, err := schema.EncodeAttempts(schema.Attempts{Total: 2, Last: []schema.Attempt{one, one}})
	if err != nil {
		t.Fatal(err)
	}
	// 0x02 total(4) n(1) at(8) dur(4) status(2) len(1) "status" len(1) "busy" ...
	const classLen = 1 + 4 + 1 + 8 + 4 + 2
	if valid[classLen] != 6 {
		t.Fatalf("layout changed: % x", valid[:classLen+1])
	}
	set := func(i int, b byte) []byte { v := bytes.Clone(valid); v[i] = b; return v }
	excerptAt := classLen + 1 + 6 + 1
	over := strings.Repeat("a", schema.MaxExcerptBytes+1)
	long, _ := schema.EncodeAttempts(schema.Attempts{Total: 1, Last: []schema.Attempt{{AtMs: t0, Status: 500, ErrorClass: "status"}}})
	long = append(append(long[:len(long)-1], 0x81, 0x02), over...) // excerpt length 257
	for name, v := range map[string][]byte{
		"no attempt held":      set(5, 0),
		"eleven attempts held": set(5, schema.MaxAttempts+1),
		"total below held":     set(4, 1),
		"non-minimal length": append(append(bytes.Clone(valid[:classLen]), 0x86, 0x00),
			valid[classLen+1:]...),
		"status 42":            append(append(bytes.Clone(valid[:classLen-2]), 0, 42), valid[classLen:]...),
		"failed with a 2xx":    append(append(bytes.Clone(valid[:classLen-2]), 0, 200), valid[classLen:]...),
		"control in excerpt":   set(excerptAt, 0x07),
		"invalid UTF-8":        set(excerptAt, 0xff),
		"newline in excerpt":   set(excerptAt, '\n'),
		"excerpt of 257 bytes": long,
		"one attempt short":    set(5, 3),
		"one attempt over":     set(5, 1),
	} {
		if _, err := schema.DecodeAttempts(v); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestAnExcerptIsCappedAt256BytesWithoutSplittingACharacter(t *testing.T) {
	// 85 three-byte characters are 255 bytes: the 86th does not fit whole.
	raw := []byte(strings.Repeat("€", 200))
	x := schema.Excerpt(raw)
	if len(x) != 255 || !utf8.ValidString(x) || x != strings.Repeat("€", 85) {
		t.Fatalf("excerpt of %d bytes: %q", len(x), x)
	}
	ascii := strings.Repeat("a", 1000)
	if x := schema.Excerpt([]byte(ascii)); x != ascii[:schema.MaxExcerptBytes] {
		t.Fatalf("ascii excerpt of %d bytes", len(x))
	}
	// A read capped in bytes cuts a character at its end: dropped, not
	// replaced.
	if x := schema.Excerpt([]byte("ok €")[:5]); x != "ok " {
		t.Fatalf("cut character: %q", x)
	}
	// Replacements count at their own 3 bytes.
	if x := schema.Excerpt(bytes.Repeat([]byte{0}, 1000)); len(x) != 255 || x != strings.Repeat("\uFFFD", 85) {
		t.Fatalf("replaced excerpt of %d bytes", len(x))
	}
}

func TestAnExcerptReplacesControlBytesAndInvalidUTF8(t *testing.T) {
	raw := []byte("a\x00b\x1b[31mc\x7fd\xffe\xc3(f\u202eg\u2028h\u00a0i\tj\r\nk \u00e9\u4e16\uFFFD")
	want := "a\uFFFDb\uFFFD[31mc\uFFFDd\uFFFDe\uFFFD(f\uFFFDg\uFFFDh\uFFFDi j  k \u00e9\u4e16\uFFFD"
	if x := schema.Excerpt(raw); x != want {
		t.Fatalf("excerpt\n %q\nwant\n %q", x, want)
	}
}

func TestAFullAttemptRowStaysWithinItsBound(t *testing.T) {
	worst := schema.Attempt{
		AtMs: math.MaxInt64, DurationMs: math.MaxUint32, Status: 599,
		ErrorClass: strings.Repeat("x", schema.MaxErrorClassBytes),
		Excerpt:    strings.Repeat("y", schema.MaxExcerptBytes),
	}
	var h schema.Attempts
	for range 2 * schema.MaxAttempts {
		h = h.With(worst)
	}
	v, err := schema.EncodeAttempts(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != schema.MaxAttemptsRowBytes {
		t.Fatalf("a full row is %d bytes, the bound says %d", len(v), schema.MaxAttemptsRowBytes)
	}
	if schema.MaxAttemptsRowBytes > 3200 {
		t.Fatalf("the bound grew to %d bytes", schema.MaxAttemptsRowBytes)
	}
}
