package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuTimes is the CPU time (user+sys) spent so far by what a phase is
// measured on; a negative field is unknown.
type cpuTimes struct {
	// self is this process: relay, load generator and receiver together
	// in-process, the load generator and receiver alone with -target.
	// Go cannot tell one goroutine's CPU from another's, so relay's own
	// share of it is only in -cpuprofile's side labels.
	self time.Duration
	// relay is the -target-pid process, relay alone.
	relay time.Duration
	// redis is the main processes of Redis, summed over a Cluster's
	// masters.
	redis time.Duration
}

// cpu reads every CPU time it can; what it cannot is unknown, not an
// error: a figure missing from one phase should not end the run.
func (b *bencher) cpu(ctx context.Context) cpuTimes {
	t := cpuTimes{self: -1, relay: -1, redis: -1}
	if d, err := selfCPU(); err == nil {
		t.self = d
	}
	if b.cfg.targetPID > 0 {
		if d, err := processCPU(b.cfg.targetPID); err == nil {
			t.relay = d
		}
	}
	if b.counter != nil {
		if d, err := redisCPU(ctx, b.counter); err == nil {
			t.redis = d
		}
	}
	return t
}

// cpuPerOutcome fills p's CPU columns from the times before and after it
// over its outcomes; a figure is unknown when either end is, or when the
// clock ran backwards (a restarted process, a reset Redis).
func cpuPerOutcome(p *phaseResult, before, after cpuTimes, outcomes int) {
	per := func(a, b time.Duration) float64 {
		if a < 0 || b < 0 || b < a || outcomes <= 0 {
			return -1
		}
		return float64(b-a) / float64(time.Microsecond) / float64(outcomes)
	}
	p.SelfCPU, p.RelayCPU, p.RedisCPU = per(before.self, after.self), per(before.relay, after.relay), per(before.redis, after.redis)
}

// userHZ is the unit of /proc/<pid>/stat's CPU times, USER_HZ, which Linux
// fixes at 100 for every process whatever the kernel's tick.
const userHZ = 100

// processCPU is the CPU time of process pid, every thread of it, from
// /proc/<pid>/stat: ten-millisecond steps.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("CPU of process %d: %w", pid, err)
	}
	d, err := parseProcStat(string(raw))
	if err != nil {
		return 0, fmt.Errorf("CPU of process %d: %w", pid, err)
	}
	return d, nil
}

// parseProcStat reads utime and stime, fields 14 and 15 of a
// /proc/<pid>/stat line. Field 2, the command name in parentheses, may
// itself hold spaces and parentheses, so fields are counted from the last
// ')'.
func parseProcStat(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, errors.New("stat line without a command name")
	}
	fields := strings.Fields(line[i+1:])
	// fields[0] is field 3, the state.
	const utime, stime = 14 - 3, 15 - 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("stat line of %d fields, want at least %d", len(fields)+2, stime+3)
	}
	var ticks uint64
	for _, f := range []string{fields[utime], fields[stime]} {
		v, err := strconv.ParseUint(f, 10, 63)
		if err != nil {
			return 0, fmt.Errorf("stat line: CPU field %q is not a count of ticks", f)
		}
		ticks += v
	}
	if ticks > math.MaxInt64/uint64(time.Second/userHZ) {
		return 0, errors.New("stat line: CPU ticks out of range")
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// redisCPU sums used_cpu_user and used_cpu_sys of INFO cpu: the Redis
// server process alone, its forks for RDB and AOF rewrites (the _children
// fields) left out. On a Cluster it sums the masters, as redisCommands
// does. Like the command counts it includes every client of that Redis.
func redisCPU(ctx context.Context, client redis.UniversalClient) (time.Duration, error) {
	return sumMasters(ctx, client, func(ctx context.Context, c *redis.Client) (time.Duration, error) {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %w", err)
		}
		return parseInfoCPU(info)
	})
}

// parseInfoCPU reads used_cpu_user and used_cpu_sys, seconds with a
// fraction, from the cpu section of INFO; both must be there.
func parseInfoCPU(info string) (time.Duration, error) {
	var total time.Duration
	seen := map[string]bool{}
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		if seen[name] {
			return 0, fmt.Errorf("INFO cpu: %s given twice", name)
		}
		seen[name] = true
		s, err := strconv.ParseFloat(value, 64)
		// A year of CPU bounds what a Duration can sum without overflow
		// and what a real server reports.
		if err != nil || !(s >= 0 && s < 365*24*3600) {
			return 0, fmt.Errorf("INFO cpu: unreadable %s", name)
		}
		// Redis prints microseconds; rounding to them keeps a float's
		// last bit out of the sum.
		total += time.Duration(math.Round(s*1e6)) * time.Microsecond
	}
	if len(seen) != 2 {
		return 0, errors.New("INFO cpu: no used_cpu_user and used_cpu_sys")
	}
	return total, nil
}
