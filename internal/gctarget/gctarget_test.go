package gctarget_test

import (
	"testing"

	"github.com/hookrelay/relay/internal/gctarget"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func limit(n int64, ok bool) func() (int64, bool) {
	return func() (int64, bool) { return n, ok }
}

// The operator's GOGC and GOMEMLIMIT are left alone, even when empty or
// off; only what is unset is taken, the soft limit only under a cgroup
// limit.
func TestDecideTakesOnlyWhatTheOperatorLeftUnset(t *testing.T) {
	gib := int64(1 << 30)
	soft := int64(float64(gib) * gctarget.LimitFraction)
	for _, c := range []struct {
		name  string
		vars  map[string]string
		limit func() (int64, bool)
		want  gctarget.Targets
	}{
		{"nothing set, no cgroup limit", nil, limit(0, false), gctarget.Targets{Percent: gctarget.DefaultPercent}},
		{"nothing set, 1 GiB limit", nil, limit(1<<30, true), gctarget.Targets{Percent: gctarget.DefaultPercent, Limit: soft}},
		{"GOGC set", map[string]string{"GOGC": "100"}, limit(0, false), gctarget.Targets{}},
		{"GOGC off", map[string]string{"GOGC": "off"}, limit(1<<30, true), gctarget.Targets{Limit: soft}},
		{"GOMEMLIMIT set", map[string]string{"GOMEMLIMIT": "512MiB"}, limit(1<<30, true), gctarget.Targets{Percent: gctarget.DefaultPercent}},
		{"both set, even empty", map[string]string{"GOGC": "", "GOMEMLIMIT": ""}, limit(1<<30, true), gctarget.Targets{}},
	} {
		if got := gctarget.Decide(env(c.vars), c.limit); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// A cgroup file names a limit in bytes, or none: "max" (v2) or a number
// near 2^63 (v1). Anything else is no limit, never a tiny one.
func TestParseMemoryMaxKnowsNoLimitFromALimit(t *testing.T) {
	for in, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0,
		"9223372036854771712\n": 0,
		"":                      0,
		"-1":                    0,
		"0":                     0,
		"12k":                   0,
	} {
		got, ok := gctarget.ParseMemoryMax(in)
		if got != want || ok != (want > 0) {
			t.Errorf("ParseMemoryMax(%q) = %d, %v; want %d", in, got, ok, want)
		}
	}
}
