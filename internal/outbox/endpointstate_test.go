package outbox_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

func (e *env) endpoint(id string) schema.Endpoint {
	e.T.Helper()
	v, found := e.Get(schema.ClassEndpoint.Key(id))
	if !found {
		e.T.Fatalf("endpoint %s not stored", id)
	}
	ep, err := schema.DecodeEndpoint(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return ep
}

// sameButEnabled reports what differs between two endpoint rows beyond the
// fields an enable or disable writes.
func sameButEnabled(a, b schema.Endpoint) bool {
	for _, e := range []*schema.Endpoint{&a, &b} {
		e.Enabled, e.DisabledReason, e.DisabledMs, e.UpdatedMs = false, "", 0, 0
	}
	return reflect.DeepEqual(a, b)
}

func TestEnableAndDisableChangeOnlyTheEnabledFlag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{
			Scheme: schema.SchemeStandardWebhooks, Enabled: true, MaxInFlight: 4, TimeoutMs: 2500, RateLimit: 20,
			Kinds:   []schema.Kind{schema.KindCommitted},
			Headers: map[string]schema.HeaderValue{"authorization": "Bearer hunter2", "x-tenant": "acme"},
		})
		before := e.endpoint("billing")
		e.Clk.Advance(time.Second)
		res, err := e.admin().SetEnabled(e.Ctx, e.P, "billing", false)
		if err != nil || !res.Changed {
			t.Fatalf("disable: %+v %v", res, err)
		}
		off := e.endpoint("billing")
		if off.Enabled || off.DisabledMs != e.NowMs() || off.UpdatedMs != e.NowMs() || !sameButEnabled(before, off) {
			t.Fatalf("disable changed more than the flag:\nbefore %+v\nafter  %+v", before, off)
		}
		if !reflect.DeepEqual(res.Endpoint, off) {
			t.Fatalf("disable answered %+v, stored %+v", res.Endpoint, off)
		}
		e.Clk.Advance(time.Second)
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		on := e.endpoint("billing")
		if !on.Enabled || on.DisabledMs != 0 || !sameButEnabled(before, on) {
			t.Fatalf("enable changed more than the flag:\nbefore %+v\nafter  %+v", before, on)
		}
		if !reflect.DeepEqual(on.Secrets, before.Secrets) || on.Headers["authorization"] != "Bearer hunter2" {
			t.Fatal("secrets or a secret header's value were not kept")
		}
	})
}

func TestEnablingAnEnabledEndpointOrDisablingADisabledOneWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("on", outbox.EndpointSpec{Enabled: true})
		e.putEndpoint("gone", schema.Endpoint{Enabled: false, DisabledReason: "gone", DisabledMs: t0 - 5, CreatedMs: t0 - 9, UpdatedMs: t0 - 5})
		e.appendN("r", 2)
		before := e.all()
		e.Clk.Advance(time.Minute)
		for id, enabled := range map[string]bool{"on": true, "gone": false} {
			res, err := e.admin().SetEnabled(e.Ctx, e.P, id, enabled)
			if err != nil || res.Changed || res.Endpoint.Enabled != enabled {
				t.Fatalf("%s: %+v %v", id, res, err)
			}
		}
		if res, _ := e.admin().SetEnabled(e.Ctx, e.P, "gone", false); res.Endpoint.DisabledReason != "gone" {
			t.Fatalf("disabling again must keep why it was disabled: %+v", res.Endpoint)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("an enable or disable that changes nothing wrote")
		}
	})
}

func TestEnablingAGoneEndpointClearsItsReasonAndDeliversItsRowsNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: false, DisabledReason: "gone", DisabledMs: t0, CreatedMs: t0, UpdatedMs: t0})
		e.appendN("r", 3)
		if _, ok := e.deliveryTimer("billing"); ok {
			t.Fatal("ingest gave a disabled endpoint a timer")
		}
		e.Clk.Advance(time.Minute)
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "billing", true); err != nil {
			t.Fatal(err)
		}
		if ep := e.endpoint("billing"); !ep.Enabled || ep.DisabledReason != "" {
			t.Fatalf("endpoint %+v, want enabled with no reason", ep)
		}
		if tm, ok := e.deliveryTimer("billing"); !ok || tm.DueAtMs != e.NowMs() {
			t.Fatalf("timer %+v (found %v), want one due now", tm, ok)
		}
	})
}

func TestEnableDisableAndRetryRefuseUnknownAndDeletingEndpointsWritingNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("leaving", schema.Endpoint{Enabled: false, DisabledReason: outbox.ReasonDeleting, DisabledMs: t0, CreatedMs: t0, UpdatedMs: t0})
		before := e.all()
		a := e.admin()
		for _, c := range []struct {
			id   string
			want error
		}{{"nobody", outbox.ErrNotFound}, {"leaving", outbox.ErrDeleting}, {"Bad Id", outbox.ErrInvalid}} {
			for _, enabled := range []bool{true, false} {
				if _, err := a.SetEnabled(e.Ctx, e.P, c.id, enabled); !errors.Is(err, c.want) {
					t.Errorf("set %s enabled %v: %v, want %v", c.id, enabled, err, c.want)
				}
			}
			if _, err := a.Retry(e.Ctx, e.P, c.id, true); !errors.Is(err, c.want) {
				t.Errorf("retry %s: %v, want %v", c.id, err, c.want)
			}
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused change wrote")
		}
	})
}

// A PUT and a disable of the same endpoint at once both land, in some
// order: the disable never writes back the row the PUT replaced, and the
// PUT, which says enabled, is last only when the disable saw the row before
// it.
func TestAConcurrentPutAndDisableLoseNeitherWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		const url = "https://hooks.example.com/billing"
		for i := range 50 {
			e.put("billing", outbox.EndpointSpec{URL: url, Enabled: true, TimeoutMs: 1000})
			start := make(chan struct{})
			var wg sync.WaitGroup
			var putErr, disableErr error
			var disabled outbox.Enabled
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				_, putErr = e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: url, Enabled: true, TimeoutMs: 2000 + i})
			}()
			go func() {
				defer wg.Done()
				<-start
				disabled, disableErr = e.admin().SetEnabled(e.Ctx, e.P, "billing", false)
			}()
			close(start)
			wg.Wait()
			if putErr != nil || disableErr != nil {
				t.Fatalf("round %d: put %v, disable %v", i, putErr, disableErr)
			}
			got := e.endpoint("billing")
			if got.TimeoutMs != 2000+i {
				t.Fatalf("round %d: timeout %d, want the PUT's %d: the disable lost it", i, got.TimeoutMs, 2000+i)
			}
			// The disable after the PUT saw its timeout; one before it did
			// not, and the PUT enabled the endpoint again.
			if after := disabled.Endpoint.TimeoutMs == 2000+i; got.Enabled == after {
				t.Fatalf("round %d: disable saw timeout %d, endpoint enabled %v: a write was lost", i, disabled.Endpoint.TimeoutMs, got.Enabled)
			}
		}
	})
}

// backingOff gives the stream a timer due in a minute after 5 failed
// fires, throttled, with its scan past its first row and a token bucket.
func backingOff(t *testing.T, e *env, id string) schema.DeliveryState {
	t.Helper()
	tm, ok := e.deliveryTimer(id)
	if !ok {
		t.Fatalf("%s has no timer", id)
	}
	st := schema.DeliveryState{
		FailedFires: 5,
		Cursor:      store.CursorAfter(schema.PendingKeyOf(id, 2, "")),
		Tokens:      &schema.TokenBucket{MilliTokens: 500, AtMs: e.NowMs()},
		Throttle:    &schema.Throttle{MaxInFlight: 1, Reason: "429", SinceMs: e.NowMs()},
		Health:      &schema.Health{FailingSinceMs: e.NowMs(), LastStatus: 503, ResumeMs: e.NowMs() + 60_000},
	}
	var b store.Batch
	tm.Replace(&b, e.NowMs()+60_000, encodeState(t, st))
	if res := e.Apply(b); !res.Committed {
		t.Fatal("could not back the stream off")
	}
	return st
}

func TestRetryMakesABackingOffStreamDueNowWithItsBackoffReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true, RateLimit: 5})
		e.appendN("r", 3)
		was := backingOff(t, e, "billing")
		e.Clk.Advance(time.Second)
		res, err := e.admin().Retry(e.Ctx, e.P, "billing", false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Rows != 3 || res.DueAtMs != e.NowMs() || res.Enabled {
			t.Fatalf("retry answered %+v, want 3 rows due now", res)
		}
		tm, _ := e.deliveryTimer("billing")
		st, err := schema.DecodeDeliveryState(tm.State)
		if err != nil {
			t.Fatal(err)
		}
		if tm.DueAtMs != e.NowMs() || tm.Lease != nil {
			t.Fatalf("timer due %d, want now %d", tm.DueAtMs, e.NowMs())
		}
		if st.FailedFires != 0 || st.Throttle != nil || st.Cursor != nil || st.Health.ResumeMs != 0 {
			t.Fatalf("state %+v: want no failed fires, no throttle, the scan from the head and no later resume", st)
		}
		if !reflect.DeepEqual(st.Tokens, was.Tokens) || st.Health.FailingSinceMs != was.Health.FailingSinceMs {
			t.Fatalf("state %+v: the token bucket and health must stay", st)
		}
	})
}

func TestRetryCreatesATimerForRowsWaitingWithoutOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.Delete(tm.Key)
		e.Apply(b)
		res, err := e.admin().Retry(e.Ctx, e.P, "billing", false)
		if err != nil || res.Rows != 2 {
			t.Fatalf("retry %+v %v", res, err)
		}
		if tm, ok := e.deliveryTimer("billing"); !ok || tm.DueAtMs != e.NowMs() {
			t.Fatalf("timer %+v (found %v), want one due now", tm, ok)
		}
	})
}

func TestRetryOfADisabledEndpointIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		backingOff(t, e, "billing")
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "billing", false); err != nil {
			t.Fatal(err)
		}
		before := e.all()
		if _, err := e.admin().Retry(e.Ctx, e.P, "billing", false); !errors.Is(err, outbox.ErrDisabled) {
			t.Fatalf("retry of a disabled endpoint: %v, want ErrDisabled", err)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("a refused retry wrote")
		}
	})
}

func TestRetryOfAStreamWithNothingPendingAnswersNoRowsAndWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		before := e.all()
		res, err := e.admin().Retry(e.Ctx, e.P, "billing", false)
		if err != nil || res.Rows != 0 || res.DueAtMs != timers.NeverMs {
			t.Fatalf("retry %+v %v, want no rows and no due time", res, err)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("a retry with nothing to try wrote")
		}
	})
}

func TestRetryOfAStreamAFireHoldsIsBusy(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 1)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.Delete(tm.Key)
		b.Put(timers.Key(e.NowMs()+30_000, timers.KindOutcomeDelivery, "billing"), leasedValue(e.NowMs(), nil))
		e.Apply(b)
		before := e.all()
		if _, err := e.admin().Retry(e.Ctx, e.P, "billing", false); !errors.Is(err, outbox.ErrBusy) {
			t.Fatalf("retry of a held stream: %v, want ErrBusy", err)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("a busy retry wrote")
		}
	})
}

// watched checks, after every batch it applies, that the endpoint is never
// stored enabled while its stream still backs off.
type watched struct {
	store.NamespaceStore
	t         *testing.T
	id        string
	nowMs     func() int64
	committed int
}

func (w *watched) Apply(ctx context.Context, p store.Partition, b store.Batch) (store.Result, error) {
	res, err := w.NamespaceStore.Apply(ctx, p, b)
	if err != nil || !res.Committed {
		return res, err
	}
	w.committed++
	v, _, err := w.NamespaceStore.Get(ctx, p, schema.ClassEndpoint.Key(w.id))
	if err != nil {
		return res, err
	}
	ep, err := schema.DecodeEndpoint(v)
	if err != nil || !ep.Enabled {
		return res, err
	}
	all, err := timers.All(ctx, w.NamespaceStore, p)
	if err != nil {
		return res, err
	}
	for _, tm := range all {
		if tm.Kind != timers.KindOutcomeDelivery || tm.Reference != w.id {
			continue
		}
		st, err := schema.DecodeDeliveryState(tm.State)
		if err != nil || st.FailedFires != 0 || st.Throttle != nil || tm.DueAtMs > w.nowMs() {
			w.t.Errorf("after batch %d the endpoint is enabled but its stream backs off: due %d, state %+v", w.committed, tm.DueAtMs, st)
		}
	}
	return res, nil
}

func TestRetryWithEnableEnablesAndDeliversInOneAtomicStep(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 4)
		backingOff(t, e, "billing")
		if _, err := e.admin().SetEnabled(e.Ctx, e.P, "billing", false); err != nil {
			t.Fatal(err)
		}
		e.Clk.Advance(time.Second)
		w := &watched{NamespaceStore: e.St, t: t, id: "billing", nowMs: e.NowMs}
		a := &outbox.Admin{Store: w, Clock: e.Clk}
		res, err := a.Retry(e.Ctx, e.P, "billing", true)
		if err != nil || !res.Enabled || res.Rows != 4 || res.DueAtMs != e.NowMs() {
			t.Fatalf("enable and deliver: %+v %v", res, err)
		}
		if w.committed != 1 {
			t.Fatalf("%d batches committed, want the one", w.committed)
		}
		if ep := e.endpoint("billing"); !ep.Enabled {
			t.Fatal("not enabled")
		}
		tm, _ := e.deliveryTimer("billing")
		if tm.DueAtMs != e.NowMs() {
			t.Fatalf("timer due %d, want now", tm.DueAtMs)
		}
		// Again on the enabled endpoint: a retry, with no enable to do.
		res, err = a.Retry(e.Ctx, e.P, "billing", true)
		if err != nil || res.Enabled || res.Rows != 4 {
			t.Fatalf("second enable and deliver: %+v %v", res, err)
		}
	})
}

func TestARecoveryPreviewCountsWhatTheRecoveryQueuesAndWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, MaxInFlight: 1})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true, Kinds: []schema.Kind{schema.KindAborted}})
		for i := range 60 {
			e.Append(committed(ridN(i)))
			e.Clk.Advance(time.Second)
		}
		for range 3 {
			ackRetained(t, e, "billing", 20, outbox.Done{AtMs: e.NowMs()})
		}
		if _, err := e.history().Resend(e.Ctx, e.P, "billing", ridN(30)); err != nil {
			t.Fatal(err)
		}
		e.appendN("late", 3) // pending, after the range
		a := e.history()
		since, until := t0+10_000, t0+50_000
		before := e.all()
		got, err := a.PreviewRecovery(e.Ctx, e.P, "billing", since, until)
		if err != nil {
			t.Fatal(err)
		}
		if want := (outbox.RecoveryPreview{Delivered: 39, Pending: 1, Examined: got.Examined}); got != want || got.Examined < 40 {
			t.Fatalf("preview %+v, want %+v", got, want)
		}
		if other, err := a.PreviewRecovery(e.Ctx, e.P, "audit", since, until); err != nil || other.Delivered != 0 || other.Pending != 0 {
			t.Fatalf("an endpoint the range never went to: %+v %v", other, err)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatal("a preview wrote")
		}
		job, err := a.Recover(e.Ctx, e.P, "billing", since, until)
		if err != nil {
			t.Fatal(err)
		}
		runRecovery(t, e, "billing")
		done, err := a.Recovery(e.Ctx, e.P, "billing", job.ID)
		if err != nil || done.Queued != got.Delivered {
			t.Fatalf("recovery queued %d, the preview said %d (%v)", done.Queued, got.Delivered, err)
		}
	})
}

func TestARecoveryPreviewStopsAtItsBoundSayingSo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		for i := range 30 {
			e.Append(committed(ridN(i)))
		}
		ackRetained(t, e, "billing", 30, outbox.Done{AtMs: e.NowMs()})
		a := e.history()
		a.PreviewRows = 12
		got, err := a.PreviewRecovery(e.Ctx, e.P, "billing", t0, t0+1000)
		if err != nil {
			t.Fatal(err)
		}
		if want := (outbox.RecoveryPreview{Delivered: 12, Examined: 12, Partial: true}); got != want {
			t.Fatalf("preview %+v, want %+v", got, want)
		}
		a.PreviewRows = 30
		if got, _ := a.PreviewRecovery(e.Ctx, e.P, "billing", t0, t0+1000); got != (outbox.RecoveryPreview{Delivered: 30, Examined: 30}) {
			t.Fatalf("preview %+v, want all 30, whole", got)
		}
	})
}

func TestARecoveryPreviewRefusesBadInput(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		a := e.history()
		e.Clk.Advance(48 * time.Hour)
		now := e.NowMs()
		for name, c := range map[string]struct {
			id           string
			since, until int64
			want         error
		}{
			"unordered":       {"billing", now - 10, now - 20, outbox.ErrInvalid},
			"empty":           {"billing", now - 10, now - 10, outbox.ErrInvalid},
			"before retained": {"billing", now - 25*time.Hour.Milliseconds(), now, outbox.ErrInvalid},
			"unknown":         {"nobody", now - 10, now, outbox.ErrNotFound},
			"bad id":          {"Bad Id", now - 10, now, outbox.ErrInvalid},
		} {
			if _, err := a.PreviewRecovery(e.Ctx, e.P, c.id, c.since, c.until); !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", name, err, c.want)
			}
		}
	})
}

// An endpoint deleted and registered again under its id did not deliver
// what the earlier one did: the log's entries under the id are not its own.
func TestARecoveryPreviewCountsOnlyOutcomesOfTheEndpointAsItIsNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		for i := range 5 {
			e.Append(committed(ridN(i)))
		}
		ackRetained(t, e, "billing", 5, outbox.Done{AtMs: e.NowMs()})
		e.putEndpoint("billing", schema.Endpoint{Enabled: true, CreatedMs: t0, UpdatedMs: t0, CreatedSeq: e.sequence() + 1})
		got, err := e.history().PreviewRecovery(e.Ctx, e.P, "billing", t0, t0+1000)
		if err != nil || got != (outbox.RecoveryPreview{Examined: 5}) {
			t.Fatalf("preview %+v %v, want 5 examined and none counted", got, err)
		}
	})
}
