package bench

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// benchResult is everything the table shows.
type benchResult struct {
	Target string // "in-process", or the URL driven
	Redis  string // embedded, redis, cluster, or unknown
	// Prefix is the in-process relay's key prefix, deleted at the end.
	Prefix              string
	Streams             int
	Concurrency         int
	N                   int
	PerRequest          int
	Payload             int
	Scheme              string
	MaxInFlight         int
	Window              int
	Rate                int
	LatencyN            int
	GOMAXPROCS          int
	DeliveryConcurrency int // 0 when unknown (-target)
	// Runs is how many runs this is the median of; 0 or 1 for one run.
	Runs int
	// TargetPID is -target-pid, whose CPU is relay's; 0 when none.
	TargetPID int
	// BadWebhooks counts requests the receiver could find no reservation
	// id in.
	BadWebhooks int64
	Phases      []phaseResult
}

// phaseResult is one row.
type phaseResult struct {
	Name     string
	Outcomes int
	Errors   int
	// ErrorKinds counts the failed outcomes by cause.
	ErrorKinds map[string]int
	// Delivered counts outcomes that reached the receiver; -1 for a phase
	// that delivers nothing.
	Delivered int
	// Duplicates counts arrivals of the phase's outcomes after their
	// first, until the run ended, so a late one is counted too.
	Duplicates int
	Elapsed    time.Duration
	Rate       float64
	// Commands is Redis commands per accepted outcome; negative when
	// unknown.
	Commands float64
	// SelfCPU, RelayCPU and RedisCPU are microseconds of CPU (user+sys)
	// per outcome accepted (single, list) or delivered (e2e, latency) of
	// this process, of the -target-pid relay and of Redis; negative when
	// unknown. See cpuTimes.
	SelfCPU  float64
	RelayCPU float64
	RedisCPU float64
	// BacklogPeak is the most outcomes accepted and not yet delivered;
	// -1 when not tracked.
	BacklogPeak int
	HasLatency  bool
	P50         time.Duration
	P99         time.Duration
	Max         time.Duration
	SendLag     time.Duration
	// Stalled says why waiting for deliveries ended early; empty when every
	// accepted outcome arrived.
	Stalled string
}

// failures counts the outcomes that failed or did not arrive.
func (r benchResult) failures() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Errors
		if p.Delivered >= 0 && p.Delivered < p.Outcomes-p.Errors {
			n += p.Outcomes - p.Errors - p.Delivered
		}
	}
	return n
}

// benchColumns head the table; no cell below them holds a space.
var benchColumns = []string{"phase", "outcomes", "errors", "delivered", "duplicates", "seconds", "rate/s",
	"redis cmds/outcome", "relay cpu µs", "bench process cpu µs", "redis cpu µs", "backlog peak", "p50", "p99", "max", "send lag"}

// printBench writes the settings line, the table, and one line per phase
// that had errors.
func printBench(w io.Writer, r benchResult) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "relay bench: %s redis=%s streams=%d concurrency=%d n=%d per_request=%d payload=%dB scheme=%s max_in_flight=%d window=%d rate=%d/s latency_n=%d GOMAXPROCS=%d",
		r.Target, r.Redis, r.Streams, r.Concurrency, r.N, r.PerRequest, r.Payload, r.Scheme, r.MaxInFlight, r.Window, r.Rate, r.LatencyN, r.GOMAXPROCS)
	if r.TargetPID > 0 {
		fmt.Fprintf(&b, " target_pid=%d", r.TargetPID)
	}
	if r.DeliveryConcurrency > 0 {
		fmt.Fprintf(&b, " delivery_concurrency=%d", r.DeliveryConcurrency)
	}
	if r.Runs > 1 {
		fmt.Fprintf(&b, "; median of %d runs, each column alone", r.Runs)
	}
	b.WriteString("; the receiver does not verify signatures\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, strings.Join(benchColumns, "\t")+"\t\n")
	for _, p := range r.Phases {
		delivered, dups, peak, cmds := "-", "-", "-", "-"
		if p.Delivered >= 0 {
			delivered, dups = strconv.Itoa(p.Delivered), strconv.Itoa(p.Duplicates)
		}
		if p.BacklogPeak >= 0 {
			peak = strconv.Itoa(p.BacklogPeak)
		}
		if p.Commands >= 0 {
			cmds = fmt.Sprintf("%.1f", p.Commands)
		}
		p50, p99, maxLat, lag := "-", "-", "-", "-"
		if p.HasLatency {
			p50, p99, maxLat, lag = millis(p.P50), millis(p.P99), millis(p.Max), millis(p.SendLag)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			p.Name, p.Outcomes, p.Errors, delivered, dups, p.Elapsed.Seconds(), p.Rate, cmds,
			micros(p.RelayCPU), micros(p.SelfCPU), micros(p.RedisCPU), peak, p50, p99, maxLat, lag)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Phases) > 0 {
		b.WriteString(cpuLegend(r))
	}
	for _, p := range r.Phases {
		if p.Errors > 0 && r.Runs <= 1 {
			kinds := make([]string, 0, len(p.ErrorKinds))
			for k := range p.ErrorKinds {
				kinds = append(kinds, k)
			}
			slices.SortFunc(kinds, func(a, b string) int {
				if c := p.ErrorKinds[b] - p.ErrorKinds[a]; c != 0 {
					return c
				}
				return strings.Compare(a, b)
			})
			parts := make([]string, len(kinds))
			for i, k := range kinds {
				parts[i] = fmt.Sprintf("%d × %s", p.ErrorKinds[k], k)
			}
			fmt.Fprintf(&b, "errors in %s: %s\n", p.Name, strings.Join(parts, "; "))
		}
		if p.Stalled != "" && r.Runs <= 1 {
			fmt.Fprintf(&b, "%s: %d accepted outcomes not delivered: %s\n", p.Name, p.Outcomes-p.Errors-p.Delivered, p.Stalled)
		}
	}
	if r.BadWebhooks > 0 {
		fmt.Fprintf(&b, "the receiver got %d webhooks without a data.reservation_id\n", r.BadWebhooks)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// cpuLegend says what the CPU columns count, which depends on where relay
// ran: a figure that holds the load generator is never called relay's.
func cpuLegend(r benchResult) string {
	var b strings.Builder
	b.WriteString("cpu µs: CPU time (user+sys) over the phase per outcome accepted (single, list) or delivered (e2e, latency)\n")
	switch {
	case r.Target == "in-process":
		b.WriteString("  relay: - in-process, where relay shares the bench process; -cpuprofile labels its share (side=relay)\n")
		b.WriteString("  bench process: relay, load generator and receiver together\n")
	case r.TargetPID > 0:
		fmt.Fprintf(&b, "  relay: process %d alone\n", r.TargetPID)
		b.WriteString("  bench process: load generator and receiver\n")
	default:
		b.WriteString("  relay: - without -target-pid\n")
		b.WriteString("  bench process: load generator and receiver\n")
	}
	switch r.Redis {
	case "embedded":
		b.WriteString("  redis: - for the embedded miniredis\n")
	case "unknown":
		b.WriteString("  redis: - without -redis\n")
	default:
		b.WriteString("  redis: used_cpu_user+used_cpu_sys of INFO cpu (forks excluded) summed over masters, every client's\n")
	}
	return b.String()
}

// micros is a CPU figure, or "-" when unknown.
func micros(us float64) string {
	if us < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", us)
}

func millis(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
