package faults

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// TestADeadEndpointBacksOff gives an endpoint that answers 500 to everything
// 200 outcomes at once. Each fire fails a row that never failed before, and
// still the waits between its calls double from 1 s, as the stream keeps
// failing: at that schedule its first minute holds 6 calls, where a wait
// kept at the first step would make one a second.
//
// The binary's clock is the host's, so the case watches the first five calls
// (about 15 s) rather than a whole minute: each wait at least twice the one
// before is what bounds the calls of any longer span. The minute itself is
// counted, on a clock of its own, in the delivery package's tests.
func TestADeadEndpointBacksOff(t *testing.T) {
	s, r, notify := newCase(t)
	const ns, id, n, calls = "dead", "dead", 200, 5
	rc := newReceiver(t, id, notify, func(string, int) relaytest.Answer { return relaytest.Answer{Status: http.StatusInternalServerError} })
	// Registered disabled, so every row is waiting when the first call comes.
	put := func(status int, enabled bool) {
		r.must(status, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/"+id, map[string]any{
			"url": rc.URL, "scheme": "standard-webhooks", "secret": rc.Secret, "max_in_flight": 1, "enabled": enabled,
		})
	}
	put(http.StatusCreated, false)
	p := newProducer(s, 100, r)
	p.post(ns, rids(ns, n), 2)
	if p.total() != n {
		t.Fatalf("%d of %d outcomes accepted: %s", p.total(), n, p.answers())
	}
	put(http.StatusOK, true)

	relaytest.Eventually(t, settleWithin, notify, func() error {
		if got := len(arrivals(rc)); got < calls {
			return fmt.Errorf("%d calls after %v, want %d", got, settleWithin, calls)
		}
		return nil
	})
	at := arrivals(rc)
	var line strings.Builder
	for _, a := range at {
		fmt.Fprintf(&line, " %.2f", a.Sub(at[0]).Seconds())
	}
	report := fmt.Sprintf("faults: %-22s %d rows waiting, calls at%s s", "dead endpoint", n, line.String())
	t.Log(report)
	fmt.Println(report)
	// A wait starts when a call ends, after it arrived, and the relay
	// dates it in whole milliseconds.
	const slack = 10 * time.Millisecond
	for i := 1; i < len(at); i++ {
		want := time.Second << (i - 1)
		if gap := at[i].Sub(at[i-1]); gap < want-slack {
			t.Fatalf("calls at%s s: wait %d was %v, want at least %v", line.String(), i, gap, want)
		}
	}
	for rid, k := range rc.Attempts() {
		if k != 1 {
			t.Errorf("%s called %d times, want each call to a row that had not failed before", rid, k)
		}
	}
	view := r.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+ns+"/endpoints/"+id, nil)
	if bl, _ := view["backlog"].(map[string]any); bl["rows"] != float64(n) {
		t.Fatalf("backlog %v, want every row kept", bl)
	}
}

// arrivals are the times of every request the receiver verified, sorted.
func arrivals(rc *relaytest.Receiver) []time.Time {
	var out []time.Time
	for _, a := range rc.Arrivals() {
		out = append(out, a.At)
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}
