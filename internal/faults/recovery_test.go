package faults

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
)

// TestKillNineDuringARecovery kills the relay with SIGKILL while a recovery
// of a time range is running. After the restart the job finishes, and every
// outcome of the range reaches the receiver again: none is lost, none
// queued twice by the job.
func TestKillNineDuringARecovery(t *testing.T) {
	s, r, notify := newCase(t)
	const ns, n = "recover", 5000
	rc := newReceiver(t, ns, notify, relaytest.OK)
	r.endpoint(ns, "hook", rc, 16)
	tg := target{ns: ns, rc: rc}
	p := newProducer(s, 100, r)
	since := time.Now().Add(-time.Second)
	ids := rids(ns, n)
	p.post(ns, ids, 4)
	settle(t, p, notify, tg)
	// Acknowledged too, not only received: a recovery queues delivered
	// rows, and a row still pending (its fire lingering) is its fire's.
	emptyOutbox(t, r, []target{tg})
	until := time.Now().Add(time.Second)

	path := "/v1/namespaces/" + ns + "/endpoints/hook/recover"
	job := r.must(http.StatusAccepted, http.MethodPost, path, map[string]any{
		"since": since.UTC().Format(time.RFC3339Nano), "until": until.UTC().Format(time.RFC3339Nano),
	})
	status := fmt.Sprintf("/v1/namespaces/%s/endpoints/hook/recoveries/%s", ns, job["id"])
	// Killed once the job has made progress, and before it is done.
	for {
		got := r.must(http.StatusOK, http.MethodGet, status, nil)
		if got["state"] != "running" {
			t.Fatalf("the job ended before the kill: %v", got)
		}
		if got["queued"].(float64) > 0 {
			break
		}
	}
	r.Kill()
	killed := time.Now()
	r.Restart()
	first := r.must(http.StatusOK, http.MethodGet, status, nil)
	t.Logf("after the restart the job had examined %v rows and queued %v of %d", first["examined"], first["queued"], n)
	if first["state"] != "running" {
		t.Fatalf("the job was done at the kill: %v", first)
	}

	// One bound for both waits.
	deadline := time.Now().Add(settleWithin)
	relaytest.Eventually(t, settleWithin, notify, func() error {
		got := r.must(http.StatusOK, http.MethodGet, status, nil)
		if got["state"] != "done" {
			return fmt.Errorf("the recovery never finished: %v", got)
		}
		if got["queued"] != float64(n) {
			t.Fatalf("job %v: want %d queued", got, n)
		}
		return nil
	})
	relaytest.Eventually(t, time.Until(deadline), notify, func() error {
		if delivered, dups := rc.Counts(ids); delivered != n || dups < n {
			return fmt.Errorf("after the recovery %d of %d outcomes reached the receiver again", dups, n)
		}
		return nil
	})
	t.Logf("faults: recovery, kill -9       %d outcomes recovered, job done %.2fs after the kill (lease 30s)", n, time.Since(killed).Seconds())
}
