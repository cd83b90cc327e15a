package gctarget

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

const (
	// DefaultPercent is the GC percent taken when GOGC is unset.
	DefaultPercent = 400
	// LimitFraction of a cgroup memory limit is the soft memory limit
	// taken when GOMEMLIMIT is unset.
	LimitFraction = 0.9
)

// Targets is what Apply set; zero fields were left to the runtime (the
// operator's GOGC or GOMEMLIMIT, or no limit found).
type Targets struct {
	Percent int
	Limit   int64
}

// Decide is the targets for a process whose environment lookup is getenv
// and whose cgroup memory limit memoryMax reads (false when none).
func Decide(getenv func(string) (string, bool), memoryMax func() (int64, bool)) Targets {
	var t Targets
	if _, set := getenv("GOGC"); !set {
		t.Percent = DefaultPercent
	}
	if _, set := getenv("GOMEMLIMIT"); !set {
		if max, ok := memoryMax(); ok {
			t.Limit = int64(float64(max) * LimitFraction)
		}
	}
	return t
}

// Apply sets the targets Decide gives for this process, and returns them.
func Apply() Targets {
	t := Decide(os.LookupEnv, cgroupMemoryMax)
	if t.Percent > 0 {
		debug.SetGCPercent(t.Percent)
	}
	if t.Limit > 0 {
		debug.SetMemoryLimit(t.Limit)
	}
	return t
}

// cgroupMemoryMax reads the memory limit of the process's cgroup: v2's
// memory.max, else v1's memory.limit_in_bytes.
func cgroupMemoryMax() (int64, bool) {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if b, err := os.ReadFile(path); err == nil {
			return ParseMemoryMax(string(b))
		}
	}
	return 0, false
}

// unlimitedV1 is at or above what cgroup v1 reports for no limit (the
// largest page-aligned int64).
const unlimitedV1 = 1 << 62

// ParseMemoryMax reads a cgroup memory limit file: a byte count, or "max"
// (v2) or a number near 2^63 (v1) for none.
func ParseMemoryMax(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= unlimitedV1 {
		return 0, false
	}
	return n, true
}
