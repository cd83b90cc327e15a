package bench

import (
	"slices"
	"time"
)

// medianResult is the runs' medians, column by column: the figure
// operators quote, since one run on a shared machine is noise. A figure
// unknown in any run is unknown; the runs' own tables hold their errors
// and stalls. Every run has the same phases, in the same order.
func medianResult(runs []benchResult) benchResult {
	r := runs[0]
	r.Runs, r.Prefix = len(runs), ""
	r.BadWebhooks = int64(medianOf(runs, func(x benchResult) float64 { return float64(x.BadWebhooks) }))
	r.Phases = make([]phaseResult, len(runs[0].Phases))
	for i := range r.Phases {
		phases := make([]phaseResult, len(runs))
		for j, x := range runs {
			phases[j] = x.Phases[i]
		}
		num := func(f func(phaseResult) float64) float64 { return medianOf(phases, f) }
		count := func(f func(phaseResult) int) int {
			return int(num(func(p phaseResult) float64 { return float64(f(p)) }))
		}
		dur := func(f func(phaseResult) time.Duration) time.Duration {
			return time.Duration(num(func(p phaseResult) float64 { return float64(f(p)) }))
		}
		p := phases[0]
		r.Phases[i] = phaseResult{
			Name:        p.Name,
			Endpoints:   p.Endpoints,
			Refused:     p.Refused,
			Paused:      p.Paused,
			Outcomes:    count(func(p phaseResult) int { return p.Outcomes }),
			Errors:      count(func(p phaseResult) int { return p.Errors }),
			Delivered:   count(func(p phaseResult) int { return p.Delivered }),
			Duplicates:  count(func(p phaseResult) int { return p.Duplicates }),
			Elapsed:     dur(func(p phaseResult) time.Duration { return p.Elapsed }),
			Rate:        num(func(p phaseResult) float64 { return p.Rate }),
			WebhookRate: num(func(p phaseResult) float64 { return p.WebhookRate }),
			Commands:    num(func(p phaseResult) float64 { return p.Commands }),
			Bytes:       num(func(p phaseResult) float64 { return p.Bytes }),
			SelfCPU:     num(func(p phaseResult) float64 { return p.SelfCPU }),
			RelayCPU:    num(func(p phaseResult) float64 { return p.RelayCPU }),
			RedisCPU:    num(func(p phaseResult) float64 { return p.RedisCPU }),
			BacklogPeak: count(func(p phaseResult) int { return p.BacklogPeak }),
			HasLatency:  p.HasLatency,
			P50:         dur(func(p phaseResult) time.Duration { return p.P50 }),
			P99:         dur(func(p phaseResult) time.Duration { return p.P99 }),
			Max:         dur(func(p phaseResult) time.Duration { return p.Max }),
			SendLag:     dur(func(p phaseResult) time.Duration { return p.SendLag }),
		}
	}
	return r
}

// medianOf is the median of f over xs, the mean of the middle two for an
// even count; -1, unknown, when any is negative.
func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		if v[i] = f(x); v[i] < 0 {
			return -1
		}
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}
