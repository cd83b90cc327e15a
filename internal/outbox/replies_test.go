package outbox_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// forEachLostReply runs f on every backend twice: lost returns an Admin
// whose first batch commits though its store then says otherwise, its
// reply lost (an error) or its resent run refused by the guard the first
// run falsified (not committed).
func forEachLostReply(t *testing.T, f func(t *testing.T, e *env, lost func() *outbox.Admin)) {
	for _, c := range []struct {
		name string
		err  error
	}{{"lost reply", errors.New("reply lost")}, {"resent run refused", nil}} {
		t.Run(c.name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, e *env) {
				f(t, e, func() *outbox.Admin {
					a := e.history()
					a.Store = &lostReplyStore{NamespaceStore: e.St, err: c.err}
					return a
				})
			})
		})
	}
}

// raced returns an Admin whose first batch has another writer's change,
// made by first, land before it.
func raced(e *env, first func()) *outbox.Admin {
	a := e.history()
	a.Store = &scripted{NamespaceStore: e.St, step: func(n int, apply func() (store.Result, error)) (store.Result, error) {
		if n == 1 {
			first()
		}
		return apply()
	}}
	return a
}

// An endpoint created by a batch whose reply was lost is answered created,
// with the secret relay generated for it: the only time it is shown.
func TestAnEndpointCreatedUnheardIsAnsweredCreatedWithItsSecret(t *testing.T) {
	forEachLostReply(t, func(t *testing.T, e *env, lost func() *outbox.Admin) {
		spec := outbox.EndpointSpec{URL: "https://hooks.example.com/billing", Scheme: schema.SchemeStandardWebhooks, Enabled: true}
		res, err := lost().PutEndpoint(e.Ctx, e.P, "billing", spec)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := e.admin().Endpoint(e.Ctx, e.P, "billing")
		if err != nil {
			t.Fatal(err)
		}
		if !res.Created || res.Generated == "" || !reflect.DeepEqual(stored.Endpoint.Secrets, []schema.Secret{res.Generated}) {
			t.Fatalf("created %v, generated %v, stored secrets %d: want created with the stored secret shown",
				res.Created, res.Generated != "", len(stored.Endpoint.Secrets))
		}
	})
}

// A key rotation whose reply was lost rotates once: the key it replaced
// still signs beside the new one.
func TestAKeyRotationUnheardRotatesOnce(t *testing.T) {
	forEachLostReply(t, func(t *testing.T, e *env, lost func() *outbox.Admin) {
		spec := outbox.EndpointSpec{URL: "https://hooks.example.com/billing", Scheme: schema.SchemeStandardWebhooksV1a, Enabled: true}
		first := e.put("billing", spec)
		spec.RotateKey = true
		res, err := lost().PutEndpoint(e.Ctx, e.P, "billing", spec)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := e.admin().Endpoint(e.Ctx, e.P, "billing")
		if err != nil {
			t.Fatal(err)
		}
		keys := stored.Endpoint.SigningKeys
		if len(keys) != 2 || keys[1] != first.Endpoint.SigningKeys[0] || !reflect.DeepEqual(res.Endpoint.SigningKeys, keys) {
			t.Fatalf("after one rotation: %d keys, the replaced one kept %v, answered as stored %v",
				len(keys), len(keys) == 2 && keys[1] == first.Endpoint.SigningKeys[0], reflect.DeepEqual(res.Endpoint.SigningKeys, keys))
		}
	})
}

// Another call's creation landing first is not taken for this one's: this
// one then updates what it found, and generates no secret.
func TestAnEndpointCreatedByAnotherIsNotAnsweredCreated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spec := outbox.EndpointSpec{URL: "https://hooks.example.com/billing", Scheme: schema.SchemeStandardWebhooks, Enabled: true}
		var other outbox.PutResult
		a := raced(e, func() { other = e.put("billing", spec) })
		res, err := a.PutEndpoint(e.Ctx, e.P, "billing", spec)
		if err != nil {
			t.Fatal(err)
		}
		if res.Created || res.Generated != "" || !reflect.DeepEqual(res.Endpoint.Secrets, []schema.Secret{other.Generated}) {
			t.Fatalf("created %v, generated %v: want the other call's endpoint updated, its secret kept", res.Created, res.Generated != "")
		}
	})
}

// A resend whose reply was lost is answered resent, and queued the outcome
// once.
func TestAResendUnheardIsAnsweredResent(t *testing.T) {
	forEachLostReply(t, func(t *testing.T, e *env, lost func() *outbox.Admin) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
		got, err := lost().Resend(e.Ctx, e.P, "billing", "r-1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != 0 || got.DueAtMs != e.NowMs() {
			t.Errorf("resent %+v", got)
		}
		if b, _ := e.backlog("billing"); b.Rows != 1 {
			t.Errorf("backlog %+v, want the outcome queued once", b)
		}
		if c := countersOf(t, e, "billing"); c.Delivered != 0 {
			t.Errorf("counters %+v, want its delivery given back once", c)
		}
	})
}

// Another call's resend landing first is not taken for this one's: the
// outcome is pending again by the other's hand.
func TestAResendByAnotherIsNotAnsweredResent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
		a := raced(e, func() {
			if _, err := e.history().Resend(e.Ctx, e.P, "billing", "r-1"); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := a.Resend(e.Ctx, e.P, "billing", "r-1"); !errors.Is(err, outbox.ErrStillPending) {
			t.Fatalf("resend after another's: %v, want still pending", err)
		}
	})
}

// A recovery whose reply was lost is answered with its job, which runs.
func TestARecoveryUnheardIsAnsweredWithItsJob(t *testing.T) {
	forEachLostReply(t, func(t *testing.T, e *env, lost func() *outbox.Admin) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
		job, err := lost().Recover(e.Ctx, e.P, "billing", t0, e.NowMs()+1)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.history().Recovery(e.Ctx, e.P, "billing", job.ID)
		if err != nil || got.State != schema.RecoveryRunning {
			t.Fatalf("job %s: %+v %v, want it running", job.ID, got, err)
		}
	})
}

// Another call's recovery landing first is not taken for this one's.
func TestARecoveryByAnotherIsNotAnsweredAsThisOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
		a := raced(e, func() {
			if _, err := e.history().Recover(e.Ctx, e.P, "billing", t0, e.NowMs()+1); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := a.Recover(e.Ctx, e.P, "billing", t0, e.NowMs()+1); !errors.Is(err, outbox.ErrRecoveryRunning) {
			t.Fatalf("recovery after another's: %v, want running", err)
		}
	})
}

// An erasure whose reply was lost is answered erased, with where it
// dropped the outcome, and dropped it once.
func TestAnErasureUnheardIsAnsweredErased(t *testing.T) {
	forEachLostReply(t, func(t *testing.T, e *env, lost func() *outbox.Admin) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.putEndpoint("audit", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		ackRetained(t, e, "billing", 1, outbox.Done{AtMs: e.NowMs(), Status: 200})
		got, err := lost().Erase(e.Ctx, e.P, "r-1")
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Dropped, []string{"audit"}) {
			t.Errorf("dropped %v, want [audit]", got.Dropped)
		}
		if c := countersOf(t, e, "audit"); c.Dropped != 1 {
			t.Errorf("audit counters %+v, want one dropped", c)
		}
		if _, err := e.history().Outcome(e.Ctx, e.P, "r-1"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Errorf("erased outcome read: %v", err)
		}
	})
}

// Another call's erasure landing first is not taken for this one's.
func TestAnErasureByAnotherIsNotAnsweredErased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: true})
		e.Append(committed("r-1"))
		a := raced(e, func() {
			if _, err := e.history().Erase(e.Ctx, e.P, "r-1"); err != nil {
				t.Fatal(err)
			}
		})
		if _, err := a.Erase(e.Ctx, e.P, "r-1"); !errors.Is(err, outbox.ErrOutcomeNotFound) {
			t.Fatalf("erasure after another's: %v, want no outcome", err)
		}
	})
}
