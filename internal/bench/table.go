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
	"unicode/utf8"
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
	// Endpoints is -endpoints: each phase ran once per count, with that
	// many endpoints in each namespace. Empty without it.
	Endpoints []int
	Phases    []phaseResult
}

// phaseResult is one row.
type phaseResult struct {
	Name string
	// Endpoints is the endpoints of each of the phase's namespaces under
	// -endpoints; 0 without it, where each has one.
	Endpoints int
	// Refused says why the phase did not run: relay refused to give its
	// namespaces that many endpoints. Empty when it ran.
	Refused  string
	Outcomes int
	Errors   int
	// ErrorKinds counts the failed outcomes by cause.
	ErrorKinds map[string]int
	// Delivered counts webhooks that reached the receiver, one per
	// outcome and endpoint; -1 for a phase that delivers nothing.
	Delivered int
	// Duplicates counts arrivals of the phase's webhooks after their
	// first, until the run ended, so a late one is counted too.
	Duplicates int
	Elapsed    time.Duration
	// Rate is outcomes per second: accepted (single, list), delivered to
	// every endpoint (e2e).
	Rate float64
	// WebhookRate is webhooks delivered per second; negative for a phase
	// that delivers nothing.
	WebhookRate float64
	// Commands is Redis commands per accepted outcome; negative when
	// unknown.
	Commands float64
	// Bytes is the growth of the Redis memory of the run's keys over the
	// phase per accepted outcome; negative when unknown. See keyBytes.
	Bytes float64
	// Paused says the phase's endpoints were registered disabled, so that
	// a running driver delivered nothing during an ingest phase.
	Paused bool
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

// failures counts the outcomes that failed and the webhooks of accepted
// outcomes that did not arrive.
func (r benchResult) failures() int {
	n := 0
	for _, p := range r.Phases {
		n += p.Errors
		if want := p.webhooks(); p.Delivered >= 0 && p.Delivered < want {
			n += want - p.Delivered
		}
	}
	return n
}

// webhooks is how many webhooks the phase's accepted outcomes make.
func (p phaseResult) webhooks() int { return (p.Outcomes - p.Errors) * max(p.Endpoints, 1) }

// label names the phase in the lines under the table.
func (p phaseResult) label() string {
	if p.Endpoints == 0 {
		return p.Name
	}
	return fmt.Sprintf("%s at %d endpoints", p.Name, p.Endpoints)
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
	if len(r.Endpoints) > 0 {
		fmt.Fprintf(&b, " endpoints=%s", joinInts(r.Endpoints))
	}
	if r.Runs > 1 {
		fmt.Fprintf(&b, "; median of %d runs, each column alone", r.Runs)
	}
	b.WriteString("; the receiver does not verify signatures\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	if len(r.Endpoints) > 0 {
		fanoutRows(tw, r)
	} else {
		phaseRows(tw, r)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Phases) > 0 {
		if len(r.Endpoints) > 0 {
			b.WriteString(fanoutLegend(r))
		}
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
			fmt.Fprintf(&b, "errors in %s: %s\n", p.label(), strings.Join(parts, "; "))
		}
		if p.Stalled != "" && r.Runs <= 1 {
			what := "accepted outcomes"
			if p.Endpoints > 0 {
				what = "webhooks of accepted outcomes"
			}
			fmt.Fprintf(&b, "%s: %d %s not delivered: %s\n", p.label(), p.webhooks()-p.Delivered, what, p.Stalled)
		}
	}
	if r.BadWebhooks > 0 {
		fmt.Fprintf(&b, "the receiver got %d webhooks without a data.reservation_id\n", r.BadWebhooks)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// phaseRows writes the table of a run without -endpoints.
func phaseRows(tw io.Writer, r benchResult) {
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
}

// fanoutColumns head the table of a run with -endpoints, one row per phase
// and count; no cell below them holds a space, but a refused row's last.
var fanoutColumns = []string{"phase", "endpoints", "outcomes", "errors", "seconds", "outcomes/s", "webhooks", "duplicates", "webhooks/s",
	"redis cmds/outcome", "redis bytes/outcome", "relay cpu µs", "bench process cpu µs", "redis cpu µs", "backlog peak"}

// fanoutRows writes the table of a run with -endpoints. A refused row
// says so where its figures would be.
func fanoutRows(w io.Writer, r benchResult) {
	rows := [][]string{fanoutColumns}
	for _, p := range r.Phases {
		if p.Refused != "" {
			rows = append(rows, []string{p.Name, strconv.Itoa(p.Endpoints), p.Refused})
			continue
		}
		webhooks, dups, webhookRate, peak := "-", "-", "-", "-"
		if p.Delivered >= 0 {
			webhooks, dups = strconv.Itoa(p.Delivered), strconv.Itoa(p.Duplicates)
		}
		if p.WebhookRate >= 0 {
			webhookRate = fmt.Sprintf("%.0f", p.WebhookRate)
		}
		if p.BacklogPeak >= 0 {
			peak = strconv.Itoa(p.BacklogPeak)
		}
		rows = append(rows, []string{p.Name, strconv.Itoa(p.Endpoints), strconv.Itoa(p.Outcomes), strconv.Itoa(p.Errors),
			fmt.Sprintf("%.2f", p.Elapsed.Seconds()), fmt.Sprintf("%.0f", p.Rate), webhooks, dups, webhookRate,
			commands(p.Commands), figure(p.Bytes), micros(p.RelayCPU), micros(p.SelfCPU), micros(p.RedisCPU), peak})
	}
	alignRight(w, rows)
}

// alignRight writes rows as tabwriter's AlignRight does, each cell right
// in its column, but for a row shorter than the first: its last cell is
// text that runs on from the column before, and widens no column.
// tabwriter ends its columns at such a row, and misaligns the rows below.
func alignRight(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		cells := row
		if len(row) < len(width) {
			cells = row[:len(row)-1]
		}
		for i, c := range cells {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, row := range rows {
		for i, c := range row {
			if len(row) < len(width) && i == len(row)-1 {
				b.WriteString("  " + c)
				break
			}
			b.WriteString(strings.Repeat(" ", 2+width[i]-utf8.RuneCountInString(c)))
			b.WriteString(c)
		}
		b.WriteString("\n")
	}
	_, _ = io.WriteString(w, b.String())
}

// fanoutLegend says what the columns of a run with -endpoints count.
func fanoutLegend(r benchResult) string {
	var b strings.Builder
	b.WriteString("outcomes/s: accepted per second (single, list); delivered to every endpoint per second (e2e)\n")
	b.WriteString("webhooks: first arrivals, one per outcome and endpoint; webhooks/s: those per second\n")
	b.WriteString("backlog peak: most webhooks of accepted outcomes not yet delivered\n")
	switch {
	case r.Redis == "embedded":
		b.WriteString("redis bytes/outcome: - for the embedded miniredis\n")
	case r.Target != "in-process":
		b.WriteString("redis bytes/outcome: - with -target, whose key prefix the bench does not know\n")
	default:
		b.WriteString("redis bytes/outcome: growth over the phase of MEMORY USAGE summed over the run's keys, per accepted outcome; ingest only, before any stream delivers\n")
	}
	paused := slices.ContainsFunc(r.Phases, func(p phaseResult) bool { return p.Paused && p.Delivered < 0 })
	if paused {
		b.WriteString("ingest endpoints: disabled, as the relay's driver runs and would deliver them; deleted once measured\n")
	} else {
		b.WriteString("ingest endpoints: enabled, before the relay's driver starts; deleted once measured\n")
	}
	return b.String()
}

// commands is Redis commands per outcome to two places, where lists of
// 100 take about a tenth of one; "-" when unknown.
func commands(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

// figure is a per-outcome figure, or "-" when unknown.
func figure(v float64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
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
