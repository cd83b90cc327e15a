package faults

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// TestAFailingEndpointIsDisabledAndRecoversOnTwoProcesses runs two relay
// processes with RELAY_DISABLE_AFTER=3s against an endpoint that refuses
// everything: it is disabled as failing, its rows kept, and the operator
// endpoint of the namespace (kinds relay.*) receives, verified, one
// endpoint.failing and exactly one endpoint.disabled. Enabled again with
// its receiver fixed, it delivers its whole backlog and the operator hears
// endpoint.recovered.
func TestAFailingEndpointIsDisabledAndRecoversOnTwoProcesses(t *testing.T) {
	t.Parallel()
	s := newSuite(t)
	s.extraEnv = []string{"RELAY_DISABLE_AFTER=3s"}
	a, b := s.startRelay("a"), s.startRelay("b")
	const ns, n = "health", 20
	notify := make(chan struct{}, 1)
	var down atomic.Bool
	down.Store(true)
	hook := newReceiver(t, "hook", notify, func(string, int) relaytest.Answer {
		if down.Load() {
			return relaytest.Answer{Status: http.StatusServiceUnavailable}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	})
	ops := newReceiver(t, "ops", notify, relaytest.OK)
	a.must(http.StatusCreated, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/ops", map[string]any{
		"url": ops.URL, "scheme": "standard-webhooks", "secret": ops.Secret, "kinds": []string{"relay.*"},
	})
	a.endpoint(ns, "hook", hook, 1)
	p := newProducer(s, 10, a, b)
	ids := rids(ns, n)
	p.post(ns, ids, 2)
	if p.total() != n {
		t.Fatalf("%d of %d outcomes accepted: %s", p.total(), n, p.answers())
	}

	view := func() map[string]any {
		return b.must(http.StatusOK, http.MethodGet, "/v1/namespaces/"+ns+"/endpoints/hook", nil)
	}
	events := func(typ string) int {
		c := 0
		for _, at := range ops.Arrivals() {
			if at.Type == typ && at.Status == http.StatusNoContent {
				c++
			}
		}
		return c
	}
	await := func(what string, within time.Duration, done func() bool) {
		t.Helper()
		relaytest.Eventually(t, within, notify, func() error {
			if !done() {
				return fmt.Errorf("%s: not within %v; the operator received %v", what, within, ops.Arrivals())
			}
			return nil
		})
	}
	// Calls at about 0, 1.1, 3.3 s: the one past 3 s disables.
	await("disabled as failing", 30*time.Second, func() bool {
		return view()["enabled"] == false && events("endpoint.disabled") == 1
	})
	v := view()
	if v["disabled_reason"] != "failing" || v["disabled_at"] == nil {
		t.Errorf("disabled endpoint shows %v", v)
	}
	if bl, _ := v["backlog"].(map[string]any); bl["rows"] != float64(n) {
		t.Errorf("backlog %v, want all %d rows kept", v["backlog"], n)
	}
	if hook.Deliveries() != 0 {
		t.Errorf("%d deliveries to a receiver that refused all", hook.Deliveries())
	}

	// Fixed, and enabled again by its operator.
	down.Store(false)
	a.must(http.StatusOK, http.MethodPut, "/v1/namespaces/"+ns+"/endpoints/hook", map[string]any{
		"url": hook.URL, "scheme": "standard-webhooks", "secret": hook.Secret, "enabled": true,
	})
	await("backlog delivered and recovery told", 30*time.Second, func() bool {
		return hook.Missing(ids) == 0 && events("endpoint.recovered") == 1
	})
	for typ, want := range map[string]int{"endpoint.failing": 1, "endpoint.disabled": 1, "endpoint.recovered": 1, "endpoint.gone": 0} {
		if got := events(typ); got != want {
			t.Errorf("the operator received %d %s, want %d", got, typ, want)
		}
	}
	for _, rc := range []*relaytest.Receiver{hook, ops} {
		if errs := rc.Rejections(); len(errs) > 0 {
			t.Fatalf("%s: a webhook failed verification: %v", rc.Name, errs[0])
		}
	}
	if v := view(); v["failing"] != nil || v["enabled"] != true {
		t.Errorf("recovered endpoint shows %v", v)
	}
}
