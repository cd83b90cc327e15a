package delivery

import (
	"strconv"

	"github.com/hookrelay/relay/internal/outbox/schema"
)

// A stream's rate limit and adaptive throttle, kept in its delivery timer's
// state (schema.DeliveryState): only the fire holding the timer's lease
// writes it, and every fire reads it with the timer, so the limit is the
// whole cluster's at no cost of its own in round trips.
//
// Rates are in thousandths of a call per second ("milli"), tokens in
// thousandths of a call.
const (
	// minThrottledRate is the floor a throttle halves the rate down to,
	// 1 call per second.
	minThrottledRate = 1000
	// paceSlices: a stream out of tokens is due again when the tokens for
	// a tenth of a second's calls are (at least 1, at most a page), not at
	// every single token: at 50/s that is 10 fires a second of 5 calls
	// rather than 50 fires of 1, and the rate is the same.
	paceSlices = 10
	// ceilingWindowMs: decreases within this of the last one belong to
	// the same refusal, and do not lower the ceiling the rate was refused
	// at.
	ceilingWindowMs = 1000
	// ceilingMemoryMs: a ceiling older than this is forgotten, and the
	// rate climbs at the fast step again.
	ceilingMemoryMs = 30_000
	// paceMs is the time between a paced stream's fires (1 s /
	// paceSlices), the most one raise counts at a rate of 10/s or more
	// (at a lower rate, one token's time): the wait after a refusal, a
	// backoff or a Retry-After, is not success, and a stream that waited a
	// second is not raised a second's worth at once.
	paceMs = 1000 / paceSlices
)

// limits is what one fire may do: how many calls at once, and how many
// calls in all under the stream's tokens.
type limits struct {
	// cfgWidth and cfgRate are the endpoint's configured max_in_flight and
	// rate_limit (0 unlimited); width and rate the effective ones.
	cfgWidth, width int
	cfgRate, rate   int64
	// tokens are the token bucket's at atMs, refilled to the fire's start.
	tokens, atMs int64
	// throttle is the state's throttle, clamped to the configuration; nil
	// when the stream runs at it.
	throttle *schema.Throttle
}

// capacity is a token bucket's size at rate: one second's calls, at least one.
// A stream idle for a second may so send a second's calls at once, and
// over any window T it makes at most rate*T + rate calls. A throttled
// stream's endpoint has refused calls, bursts most likely: its token bucket holds
// a pace slice's calls, so a wait (a backoff, a Retry-After) does not end
// in a second's calls at once.
func capacity(rate int64, throttled bool) int64 {
	if throttled {
		return max(1000, rate/paceSlices)
	}
	return max(1000, rate)
}

// startLimits refills the stream's token bucket to nowMs, the fire's start, and
// clamps its throttle to the endpoint's configuration as the fire read it.
func startLimits(st schema.DeliveryState, ep *schema.Endpoint, nowMs int64) limits {
	l := limits{cfgWidth: min(max(ep.MaxInFlight, 1), schema.MaxMaxInFlight)}
	if ep.RateLimit > 0 {
		l.cfgRate = int64(min(ep.RateLimit, schema.MaxRateLimit)) * 1000
	}
	l.width, l.rate = l.cfgWidth, l.cfgRate
	if t := st.Throttle; t != nil {
		c := *t
		c.MaxInFlight = uint8(min(max(int(c.MaxInFlight), 1), l.cfgWidth))
		if l.cfgRate == 0 {
			c.RateMilli, c.CeilingMilli = 0, 0
		} else {
			c.RateMilli = uint32(min(max(int64(c.RateMilli), min(minThrottledRate, l.cfgRate)), l.cfgRate))
		}
		if int(c.MaxInFlight) < l.cfgWidth || int64(c.RateMilli) < l.cfgRate {
			l.throttle = &c
			l.width = int(c.MaxInFlight)
			if c.RateMilli > 0 {
				l.rate = int64(c.RateMilli)
			}
		}
	}
	if l.rate == 0 {
		return l
	}
	full := capacity(l.rate, l.throttle != nil)
	l.tokens, l.atMs = full, nowMs
	if b := st.Tokens; b != nil {
		// Bounded so the product cannot overflow; an hour refills any
		// token bucket.
		elapsed := min(max(nowMs-b.AtMs, 0), 3_600_000)
		l.tokens = min(int64(b.MilliTokens)+elapsed*l.rate/1000, full)
		// A clock behind the last writer's does not date the token bucket back:
		// its tokens count from the later time.
		l.atMs = max(nowMs, b.AtMs)
	}
	return l
}

// allowance is how many calls the fire may launch; -1 for no limit.
func (l *limits) allowance() int {
	if l.rate == 0 {
		return -1
	}
	return int(l.tokens / 1000)
}

// signal is why a call's answer asks relay to slow down, "" when it does
// not: 429, 502, 503 or 504, or no answer in time.
func signal(e *Error, timedOut bool) string {
	if timedOut || e.Class == ClassTimeout {
		return ClassTimeout
	}
	switch e.Status {
	case 429, 502, 503, 504:
		return strconv.Itoa(e.Status)
	}
	return ""
}

// adapt is the stream's throttle after the fire's calls: halved (at least
// one call at once, at least minThrottledRate) by a fire with a call that
// signalled, raised by a fire whose calls all succeeded (one more call at
// once; the rate by a step per second of success), nil once back at the
// configuration.
func (l *limits) adapt(run *calls, nowMs int64) *schema.Throttle {
	var th *schema.Throttle
	if l.throttle != nil {
		c := *l.throttle
		th = &c
	}
	if run.signal != "" {
		if th == nil {
			th = &schema.Throttle{MaxInFlight: uint8(l.cfgWidth), RateMilli: uint32(l.cfgRate), SinceMs: nowMs}
		}
		if th.DecreasedMs == 0 || nowMs-th.DecreasedMs >= ceilingWindowMs {
			// A new refusal: the rate it came at is where the endpoint's
			// limit lies. Further decreases in the same window are the same
			// refusal seen again, and would only lower the ceiling.
			th.CeilingMilli = th.RateMilli
		}
		th.MaxInFlight = max(th.MaxInFlight/2, 1)
		if l.cfgRate > 0 {
			th.RateMilli = uint32(max(int64(th.RateMilli)/2, min(minThrottledRate, l.cfgRate)))
		}
		th.Reason, th.DecreasedMs, th.RaisedMs = run.signal, nowMs, nowMs
		return th
	}
	if th == nil || run.launched == 0 || len(run.failed) > 0 {
		return th
	}
	th.MaxInFlight = uint8(min(int(th.MaxInFlight)+1, l.cfgWidth))
	if l.cfgRate > 0 {
		// A tenth of the configured rate per second of success, and a
		// thousandth once within 15 % of the rate last refused, so the
		// stream returns quickly to near the endpoint's limit and then
		// probes it slowly; a ceiling older than ceilingMemoryMs no longer
		// holds the rate back.
		step := max(l.cfgRate/10, 1000)
		near := int64(th.CeilingMilli) > 0 && int64(th.RateMilli)*100 >= int64(th.CeilingMilli)*85 &&
			nowMs-th.DecreasedMs < ceilingMemoryMs
		if near {
			step = max(l.cfgRate/1000, 100)
		}
		elapsed := min(max(nowMs-th.RaisedMs, 0), max(paceMs, 1_000_000/max(int64(th.RateMilli), 1)))
		th.RateMilli = uint32(min(int64(th.RateMilli)+step*elapsed/1000, l.cfgRate))
	}
	th.RaisedMs = nowMs
	if int(th.MaxInFlight) >= l.cfgWidth && (l.cfgRate == 0 || int64(th.RateMilli) >= l.cfgRate) {
		return nil
	}
	return th
}

// effectiveRate is the rate a throttle leaves the stream, 0 unlimited.
func (l *limits) effectiveRate(th *schema.Throttle) int64 {
	if th != nil && th.RateMilli > 0 {
		return int64(th.RateMilli)
	}
	return l.cfgRate
}

// tokensAfter is the token bucket once the fire's calls are paid for, under the
// throttle the fire leaves the stream (th), and when it is due again for
// its tokens: waitDue once the tokens for a slice of calls are in, fullDue
// once it is full. nil for a stream without a rate limit.
func (l *limits) tokensAfter(run *calls, th *schema.Throttle, rowsLeft bool, maxRows int) (b *schema.TokenBucket, waitDue, fullDue int64) {
	rate := l.effectiveRate(th)
	if rate == 0 || l.rate == 0 {
		return nil, 0, 0
	}
	full := capacity(rate, th != nil)
	left := min(max(l.tokens-int64(run.launched)*1000, 0), full)
	want := min(max(rate/1000/paceSlices, 1), int64(maxRows)) * 1000
	b = &schema.TokenBucket{MilliTokens: uint32(left), AtMs: l.atMs}
	// Out of tokens with rows left: waiting for tokens, not for ingest.
	b.Paced = rowsLeft && (run.paced || left < 1000)
	waitDue = l.atMs + ceilDiv(max(want-left, 0)*1000, rate)
	fullDue = l.atMs + ceilDiv((full-left)*1000, rate)
	return b, waitDue, fullDue
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }
