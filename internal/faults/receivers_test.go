package faults

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// TestMisbehavingReceivers delivers one namespace's outcomes to seven
// endpoints at once, each with a receiver that misbehaves in its own way.
func TestMisbehavingReceivers(t *testing.T) {
	s, r, notify := newCase(t)
	const ns, n = "receivers", 32

	// Refusing each outcome twice, the stream fails throughout its first
	// rounds and backs off as a dead one would: 1, 2, 4, 8 s for its two
	// pages. Each more refusal doubles the wait twice over; three would
	// take the waits alone past two minutes.
	failFirstTwo := func(_ string, attempt int) relaytest.Answer {
		if attempt < 2 {
			return relaytest.Answer{Status: http.StatusInternalServerError}
		}
		return relaytest.Answer{Status: http.StatusOK}
	}
	var randMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	flaky := func(string, int) relaytest.Answer {
		randMu.Lock()
		defer randMu.Unlock()
		if rng.IntN(100) < 30 {
			return relaytest.Answer{Status: http.StatusInternalServerError}
		}
		return relaytest.Answer{Status: http.StatusOK}
	}
	// once answers its first request with a, every later one with 204.
	once := func(a relaytest.Answer) relaytest.Script {
		var mu sync.Mutex
		first := true
		return func(string, int) relaytest.Answer {
			mu.Lock()
			defer mu.Unlock()
			if first {
				first = false
				return a
			}
			return relaytest.Answer{Status: http.StatusNoContent}
		}
	}
	throttled := relaytest.Answer{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"2"}}}
	slow := func(string, int) relaytest.Answer {
		return relaytest.Answer{Status: http.StatusOK, Delay: 200 * time.Millisecond}
	}

	type ep struct {
		id          string
		sc          relaytest.Script
		maxInFlight int
	}
	eps := []ep{
		{"fail2", failFirstTwo, 16},
		{"flaky", flaky, 4},
		{"hang", once(relaytest.Answer{Hang: true}), 1},
		{"throttle", once(throttled), 1},
		{"gone", once(relaytest.Answer{Status: http.StatusGone}), 1},
		{"slow", slow, 1},
		{"fast", relaytest.OK, 1},
	}
	rcs := map[string]*relaytest.Receiver{}
	var targets []target
	for _, e := range eps {
		rc := newReceiver(t, e.id, notify, e.sc)
		r.endpoint(ns, e.id, rc, e.maxInFlight)
		rcs[e.id] = rc
		targets = append(targets, target{ns: ns, rc: rc})
	}

	start := time.Now()
	p := newProducer(s, 1, r)
	p.post(ns, rids(ns, n), 4)

	// 410: the endpoint is disabled and its rows kept until it is enabled.
	view := awaitEndpoint(t, r, ns, "gone", func(v map[string]any) bool { return v["enabled"] == false })
	if bl, _ := view["backlog"].(map[string]any); bl["rows"] != float64(n) {
		t.Fatalf("gone endpoint's backlog %v, want its %d rows kept", bl, n)
	}
	if view["disabled_reason"] == "" || view["disabled_reason"] == nil {
		t.Errorf("a disabled endpoint should say why: %v", view)
	}
	r.must(http.StatusOK, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/gone", map[string]any{
		"url": rcs["gone"].URL, "scheme": "standard-webhooks", "secret": rcs["gone"].Secret, "max_in_flight": 1, "enabled": true,
	})

	settle(t, p, notify, targets...)
	_, dups := report(t, "misbehaving receivers", p, time.Since(start), targets...)
	boundDuplicates(t, dups, p.total()*len(targets))
	checkAnswers(t, p, false)

	// 429 with Retry-After: 2 — the next attempt is not earlier.
	th := rcs["throttle"]
	var arrivals []time.Time
	for _, a := range th.Arrivals() {
		arrivals = append(arrivals, a.At)
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	if gap := arrivals[1].Sub(arrivals[0]); gap < 2*time.Second {
		t.Errorf("after a 429 with Retry-After: 2 the next attempt came %v later", gap)
	} else {
		t.Logf("after the 429 the next attempt came %.2fs later", gap.Seconds())
	}

	// The fast endpoint is not held back by the slow one beside it.
	fast, slowLat := latencies(p, rcs["fast"]), latencies(p, rcs["slow"])
	t.Logf("accept to delivery: fast p50 %v p99 %v; slow (200 ms receiver) p50 %v p99 %v",
		pct(fast, 50), pct(fast, 99), pct(slowLat, 50), pct(slowLat, 99))
	if pct(fast, 100) >= pct(slowLat, 50) {
		t.Errorf("the fast endpoint's last delivery (%v) came after half the slow endpoint's (%v)", pct(fast, 100), pct(slowLat, 50))
	}
}

// awaitEndpoint polls an endpoint's view until cond holds.
func awaitEndpoint(t testing.TB, r *relayProc, ns, id string, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	var v map[string]any
	relaytest.Eventually(t, settleWithin, nil, func() error {
		v = r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+ns+"/endpoints/"+id, nil)
		if !cond(v) {
			return fmt.Errorf("endpoint %s/%s never reached the state wanted: %v", ns, id, v)
		}
		return nil
	})
	return v
}

// latencies are, per accepted id the receiver had delivered, the time from
// its 202 to its first delivery, sorted.
func latencies(p *producer, rc *relaytest.Receiver) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for rid, at := range rc.FirstDelivered() {
		if acc, ok := p.acceptedAt[rid]; ok {
			out = append(out, at.Sub(acc))
		}
	}
	slices.Sort(out)
	return out
}

// pct is the q-th percentile of sorted durations.
func pct(sorted []time.Duration, q int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, (len(sorted)-1)*q/100)].Round(100 * time.Microsecond)
}
