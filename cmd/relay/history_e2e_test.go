package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/relaytest"
	"github.com/hookrelay/relay/relayclient"
)

// historyFlow delivers 100 outcomes to a verifying receiver at max_in_flight
// 1, one refused three times first, and then reads that outcome's story,
// resends another, and recovers the second half by its acceptance times, all
// through the Go client.
func historyFlow(t *testing.T, p *relaytest.Relay, token string) {
	t.Helper()
	ctx := t.Context()
	c, err := relayclient.New(p.URL, relayclient.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	const ns, ep, refused = "acme", "billing", "h-007"
	notify := make(chan struct{}, 1)
	rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "billing", Notify: notify, Script: func(rid string, n int) relaytest.Answer {
		if rid == refused && n < 3 {
			return relaytest.Answer{Status: http.StatusServiceUnavailable}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	if _, err := c.PutEndpoint(ctx, ns, ep, relayclient.EndpointConfig{URL: rc.URL, Scheme: relayclient.SchemeStandardWebhooks, Secret: rc.Secret, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 100)
	outcomes := make([]relayclient.Outcome, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprintf("h-%03d", i)
		outcomes[i] = relayclient.Outcome{ReservationID: ids[i], Repository: "acme/widgets", OccurredUnixMs: time.Now().UnixMilli(), Expired: &relayclient.Expired{}}
	}
	wait := func(what string, done func() bool) {
		t.Helper()
		relaytest.Eventually(t, settle, notify, func() error {
			if done() {
				return nil
			}
			if errs := rc.Rejections(); len(errs) > 0 {
				t.Fatalf("a webhook failed verification: %v", errs[0])
			}
			return fmt.Errorf("%s within %s", what, settle)
		})
	}
	delivered := func(rids []string, times int) func() bool {
		return func() bool {
			counts := map[string]int{}
			for _, a := range rc.Arrivals() {
				if a.Status == http.StatusNoContent {
					counts[a.RID]++
				}
			}
			for _, rid := range rids {
				if counts[rid] < times {
					return false
				}
			}
			return true
		}
	}

	// The first half, the refused one hurried past its backoff each time.
	if _, err := c.IngestAll(ctx, ns, outcomes[:50]); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= 3; n++ {
		wait(fmt.Sprintf("refusal %d of %s", n, refused), func() bool { return rc.Attempts()[refused] >= n })
		wait("a replay of "+refused, func() bool {
			_, err := c.Replay(ctx, ns, ep, refused)
			var pr *relayclient.Problem
			return err == nil || (errors.As(err, &pr) && pr.Type == relayclient.TypeNotPending)
		})
	}
	wait("the first half delivered", delivered(ids[:50], 1))
	// The second half is accepted after mid, a whole millisecond after the
	// first half's answers.
	mid := time.Now().Truncate(time.Millisecond).Add(time.Millisecond)
	for time.Now().Before(mid) {
	}
	if _, err := c.IngestAll(ctx, ns, outcomes[50:]); err != nil {
		t.Fatal(err)
	}
	wait("the second half delivered", delivered(ids[50:], 1))

	// The refused outcome's story: three refusals, then the delivery, once
	// the fire that delivered it completed (a lingering fire completes up
	// to half a second after its calls).
	var story relayclient.OutcomeStory
	wait("the refused outcome's delivery recorded", func() bool {
		var err error
		if story, err = c.Outcome(ctx, ns, refused); err != nil {
			t.Fatal(err)
		}
		return len(story.Endpoints) == 1 && story.Endpoints[0].State == relayclient.OutcomeDelivered
	})
	if len(story.Endpoints) != 1 {
		t.Fatalf("story %+v", story)
	}
	on := story.Endpoints[0]
	if on.State != relayclient.OutcomeDelivered || on.DeliveredAt == nil || on.AttemptCount != 4 || len(on.Attempts) != 4 {
		t.Fatalf("on %s: %+v", ep, on)
	}
	for i, a := range on.Attempts {
		want, class := http.StatusServiceUnavailable, "status"
		if i == 3 {
			want, class = http.StatusNoContent, ""
		}
		if a.Status != want || a.Error != class {
			t.Errorf("attempt %d: %+v, want %d %q", i, a, want, class)
		}
	}

	// A resend: the same webhook id, a new valid signature.
	const again = "h-020"
	// Standard Webhooks signs id.timestamp.body, the timestamp in whole
	// seconds: a resend in the second of the first delivery would carry
	// the same signature. The binary's clock is the wall clock, so wait
	// for the next second.
	<-time.After(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	if _, err := c.Resend(ctx, ns, ep, again); err != nil {
		t.Fatal(err)
	}
	wait("the resend", delivered([]string{again}, 2))
	var sent []relaytest.Arrival
	for _, a := range rc.Arrivals() {
		if a.RID == again {
			sent = append(sent, a)
		}
	}
	if sent[0].MessageID == "" || sent[1].MessageID != sent[0].MessageID || sent[1].Signature == sent[0].Signature {
		t.Errorf("resend arrived as %+v after %+v: want the same webhook-id and a new signature", sent[1], sent[0])
	}

	// A recovery of a 30-minute range holding the second half.
	from := len(rc.Arrivals())
	job, err := c.Recover(ctx, ns, ep, mid, mid.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wait("the recovery done", func() bool {
		r, err := c.Recovery(ctx, ns, ep, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		job = r
		return r.State == relayclient.RecoveryDone
	})
	if job.Queued != 50 {
		t.Errorf("job %+v: want the 50 outcomes of the range queued", job)
	}
	wait("the recovered outcomes delivered", delivered(ids[50:], 2))
	var order []string
	for _, a := range rc.Arrivals()[from:] {
		order = append(order, a.RID)
	}
	if !slices.Equal(order, ids[50:]) {
		t.Errorf("after the recovery the receiver had %v, want exactly %v in order", order, ids[50:])
	}
}

func TestHistoryResendAndRecoveryWithTheEmbeddedStore(t *testing.T) {
	p, token := startRelay(t, []string{"RELAY_REDIS_URL="}, true)
	historyFlow(t, p, token)
	p.Stop()
}

func TestHistoryResendAndRecoveryOnRealRedis(t *testing.T) {
	p, creds := startOnRealRedis(t, "", "e2e")
	historyFlow(t, p, creds.Token)
	p.Stop()
}
