package outbox_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

func (e *env) admin() *outbox.Admin { return &outbox.Admin{Store: e.St, Clock: e.Clk} }

func (e *env) put(id string, spec outbox.EndpointSpec) outbox.PutResult {
	e.T.Helper()
	if spec.URL == "" {
		spec.URL = "https://hooks.example.com/" + id
	}
	res, err := e.admin().PutEndpoint(e.Ctx, e.P, id, spec)
	if err != nil {
		e.T.Fatalf("put endpoint %s: %v", id, err)
	}
	return res
}

func (e *env) appendN(prefix string, n int) {
	e.T.Helper()
	for i := range n {
		if st := e.Append(committed(fmt.Sprintf("%s-%03d", prefix, i))); st[0].Code != outbox.Accepted {
			e.T.Fatalf("append %d: %+v", i, st)
		}
	}
}

func TestPutEndpointGeneratesASecretOnceAndRotatesAGivenOne(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		spec := outbox.EndpointSpec{Scheme: schema.SchemeStandardWebhooks, Enabled: true}
		first := e.put("billing", spec)
		if !first.Created || first.Generated == "" || !reflect.DeepEqual(first.Endpoint.Secrets, []schema.Secret{first.Generated}) {
			t.Fatalf("first put: created %v, generated %v, secrets %d", first.Created, first.Generated != "", len(first.Endpoint.Secrets))
		}
		again := e.put("billing", spec)
		if again.Created || again.Generated != "" || !reflect.DeepEqual(again.Endpoint.Secrets, first.Endpoint.Secrets) {
			t.Fatalf("a put without a secret must keep the current one and generate none")
		}
		next, err := schema.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		spec.Secret = next
		rotated := e.put("billing", spec)
		if want := []schema.Secret{next, first.Generated}; rotated.Generated != "" || !reflect.DeepEqual(rotated.Endpoint.Secrets, want) {
			t.Fatalf("rotation: want the new secret first and the old one beside it")
		}
		got, err := e.admin().Endpoint(e.Ctx, e.P, "billing")
		if err != nil || !reflect.DeepEqual(got.Endpoint.Secrets, rotated.Endpoint.Secrets) {
			t.Fatalf("stored endpoint differs: %v", err)
		}
		if got.Endpoint.CreatedMs != t0 {
			t.Fatalf("created_ms %d, want %d", got.Endpoint.CreatedMs, t0)
		}
	})
}

func TestPutEndpointRefusesBadInputWritingNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		for i := range outbox.DefaultMaxEndpoints {
			e.put(fmt.Sprintf("ep%d", i), outbox.EndpointSpec{Enabled: true})
		}
		before := e.all()
		cases := map[string]outbox.EndpointSpec{
			"a secret for mkit-hook-v2": {URL: "https://h.example.com/", Secret: "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB"},
			"a malformed secret":        {URL: "https://h.example.com/", Scheme: schema.SchemeStandardWebhooks, Secret: "whsec_nope"},
			"an unknown kind":           {URL: "https://h.example.com/", Kinds: []schema.Kind{"bogus"}},
			"max_in_flight 17":          {URL: "https://h.example.com/", MaxInFlight: 17},
			"a URL with credentials":    {URL: "https://u:p@h.example.com/"},
		}
		for name, spec := range cases {
			if _, err := e.admin().PutEndpoint(e.Ctx, e.P, "ep0", spec); !errors.Is(err, outbox.ErrInvalid) {
				t.Errorf("%s: want ErrInvalid, got %v", name, err)
			}
		}
		if _, err := e.admin().PutEndpoint(e.Ctx, e.P, "one-too-many", outbox.EndpointSpec{URL: "https://h.example.com/"}); !errors.Is(err, outbox.ErrTooManyEndpoints) {
			t.Errorf("endpoint past the limit: want ErrTooManyEndpoints, got %v", err)
		}
		if _, err := e.admin().PutEndpoint(e.Ctx, e.P, "Bad Id", outbox.EndpointSpec{URL: "https://h.example.com/"}); !errors.Is(err, outbox.ErrInvalid) {
			t.Errorf("bad id: want ErrInvalid, got %v", err)
		}
		if after := e.all(); !reflect.DeepEqual(before, after) {
			t.Fatalf("refused puts changed the partition")
		}
	})
}

func TestEnablingAnEndpointRegisteredDisabledCreatesItsTimer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: false})
		e.appendN("r", 3)
		if _, ok := e.deliveryTimer("billing"); ok {
			t.Fatal("ingest must not create a timer for a disabled endpoint")
		}
		e.Clk.Set(t0 + 5000)
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		tm, ok := e.deliveryTimer("billing")
		if !ok || tm.DueAtMs != t0+5000 {
			t.Fatalf("enabled stream with rows: want a timer due now, got %+v (found %v)", tm, ok)
		}
	})
}

func TestEnablingAParkedStreamPullsItWithItsBackoffReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		tm.Replace(&b, timers.NeverMs, deliveryState(t, 6))
		e.Apply(b)
		e.put("billing", outbox.EndpointSpec{Enabled: false})
		e.Clk.Set(t0 + 9000)
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		tm, _ = e.deliveryTimer("billing")
		st, err := schema.DecodeDeliveryState(tm.State)
		if err != nil || tm.DueAtMs != t0+9000 || st.FailedFires != 0 {
			t.Fatalf("want due now with no failed fire, got due %d, state %+v, %v", tm.DueAtMs, st, err)
		}
	})
}

func TestDeleteEndpointRefusesWhileRowsArePending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		before := e.all()
		_, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", false)
		var be *outbox.BacklogError
		if !errors.As(err, &be) || be.Rows != 2 {
			t.Fatalf("want a BacklogError of 2 rows, got %v", err)
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused delete changed the partition")
		}
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "nobody", true); !errors.Is(err, outbox.ErrNotFound) {
			t.Fatalf("unknown endpoint: want ErrNotFound, got %v", err)
		}
	})
}

func TestForcedDeleteDropsEveryRowOfTheStreamAndNoOther(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.put("audit", outbox.EndpointSpec{Enabled: true})
		const n = 2*outbox.MaxAcksPerBatch + 4
		e.appendN("r", n)
		dropped, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", true)
		if err != nil || dropped != n {
			t.Fatalf("forced delete: dropped %d, %v; want %d", dropped, err, n)
		}
		for _, row := range e.all() {
			if pk, ok := schema.Parse(row.Key); ok && (pk.Endpoint == "billing" || pk.Reference == "billing") {
				t.Fatalf("row %q of the deleted stream is left", row.Key)
			}
		}
		if bl, _ := e.backlog("audit"); bl.Rows != n || len(e.pending("audit")) != n {
			t.Fatalf("the other stream lost rows: backlog %+v", bl)
		}
		// The id is free again, with an empty stream.
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("s", 1)
		if bl, _ := e.backlog("billing"); bl.Rows != 1 {
			t.Fatalf("re-registered endpoint: backlog %+v, want 1 row", bl)
		}
	})
}

func TestIngestGivesNoRowsToAnEndpointBeingDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.putEndpoint("billing", schema.Endpoint{Enabled: false, DisabledReason: outbox.ReasonDeleting})
		if st := e.Append(committed("r-1")); st[0].Code != outbox.NoEndpoint {
			t.Fatalf("want no_endpoint, got %+v", st)
		}
		if _, err := e.admin().PutEndpoint(e.Ctx, e.P, "billing", outbox.EndpointSpec{URL: "https://h.example.com/", Enabled: true}); !errors.Is(err, outbox.ErrDeleting) {
			t.Fatalf("put during a delete: want ErrDeleting, got %v", err)
		}
		// A repeated delete finishes it.
		if _, err := e.admin().DeleteEndpoint(e.Ctx, e.P, "billing", false); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPendingPagesThroughAStreamWithItsLastAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 5)
		ak, _ := schema.AttemptKey("billing", "r-001")
		av, err := schema.EncodeAttempts(schema.Attempts{Total: 2, Last: []schema.Attempt{
			{AtMs: t0, DurationMs: 7, Status: 500, ErrorClass: "status", Excerpt: "busy"},
			{AtMs: t0 + 1, DurationMs: 9, Status: 503, ErrorClass: "status"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		b.Put(ak, av)
		e.Apply(b)

		var rids []string
		var after []byte
		pages := 0
		for {
			page, err := e.admin().Pending(e.Ctx, e.P, "billing", after, 2)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			if page.Backlog.Rows != 5 || page.Timer == nil {
				t.Fatalf("page: backlog %+v, timer %v", page.Backlog, page.Timer)
			}
			for _, r := range page.Rows {
				rids = append(rids, r.RID)
				if r.Kind != schema.KindCommitted || r.Corrupt {
					t.Fatalf("row %s: kind %q corrupt %v", r.RID, r.Kind, r.Corrupt)
				}
				last, ok := r.Attempts.Latest()
				if ok != (r.RID == "r-001") || (ok && (last.Status != 503 || r.Attempts.Total != 2 || len(r.Attempts.Last) != 2 || r.Attempts.Last[0].Excerpt != "busy")) {
					t.Fatalf("row %s: attempts %+v", r.RID, r.Attempts)
				}
			}
			if page.Next == nil {
				break
			}
			after = page.Next
		}
		if want := []string{"r-000", "r-001", "r-002", "r-003", "r-004"}; !reflect.DeepEqual(rids, want) || pages != 3 {
			t.Fatalf("rids %v in %d pages, want %v in 3", rids, pages, want)
		}
		if _, err := e.admin().Pending(e.Ctx, e.P, "billing", []byte("e-elsewhere"), 2); !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("foreign cursor: want ErrInvalid, got %v", err)
		}
		if _, err := e.admin().Pending(e.Ctx, e.P, "billing", nil, outbox.MaxPendingPage+1); !errors.Is(err, outbox.ErrInvalid) {
			t.Fatalf("limit too large: want ErrInvalid, got %v", err)
		}
	})
}

func TestReplayPutsTheRowFirstDueNowWithTheBackoffReset(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 4)
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		tm.Replace(&b, t0+15*60_000, deliveryState(t, 9))
		e.Apply(b)

		e.Clk.Set(t0 + 100)
		got, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-002")
		if err != nil {
			t.Fatal(err)
		}
		tm, _ = e.deliveryTimer("billing")
		st, err := schema.DecodeDeliveryState(tm.State)
		if err != nil || tm.DueAtMs != t0+100 || got.DueAtMs != t0+100 || st.FailedFires != 0 || st.Cursor == nil {
			t.Fatalf("timer after replay: due %d, state %+v, %v", tm.DueAtMs, st, err)
		}
		page, err := outbox.ReadQueue(e.Ctx, e.St, e.P, "billing", outboxtest.Head(t, e.St, e.P, "billing"), st.Cursor, 1)
		if err != nil || len(page.Rows) != 1 {
			t.Fatalf("queue after cursor: %+v %v", page, err)
		}
		if q := page.Rows[0]; q.RID != "r-002" || q.Seq != got.Seq {
			t.Fatalf("the next fire starts at %s (seq %d), want r-002 (seq %d)", q.RID, q.Seq, got.Seq)
		}
	})
}

// A replay moves the stream's position and resets its backoff, nothing
// else: the endpoint's limits keep holding (the token bucket, the
// throttle), and its health keeps when it began failing and the operator
// event its last fire decided on and has not appended yet.
func TestReplayKeepsTheStreamsLimitsAndHealth(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true, RateLimit: 5})
		e.appendN("r", 4)
		failing := schema.Event{Type: schema.EventFailing, Endpoint: "billing", FailingSinceMs: t0 - 9_000, LastStatus: 503, LastError: "status"}
		before := schema.DeliveryState{
			FailedFires: 7,
			Cursor:      store.CursorAfter(store.Key("p-somewhere")),
			Tokens:      &schema.TokenBucket{MilliTokens: 1_500, AtMs: t0 - 200, Paced: true},
			Throttle: &schema.Throttle{MaxInFlight: 1, RateMilli: 2_500, CeilingMilli: 5_000, Reason: "429",
				SinceMs: t0 - 9_000, DecreasedMs: t0 - 1_000, RaisedMs: t0 - 500},
			Health: &schema.Health{FailingSinceMs: t0 - 9_000, LastStatus: 503, LastError: "status", ResumeMs: t0 + 64_000,
				Pending: []schema.PendingEvent{{Event: failing, AtMs: t0 - 100}}},
		}
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		tm.Replace(&b, t0+64_000, encodeState(t, before))
		e.Apply(b)

		e.Clk.Set(t0 + 100)
		got, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-002")
		if err != nil {
			t.Fatal(err)
		}
		tm, _ = e.deliveryTimer("billing")
		st, err := schema.DecodeDeliveryState(tm.State)
		if err != nil {
			t.Fatal(err)
		}
		if tm.DueAtMs != t0+100 || st.FailedFires != 0 {
			t.Errorf("timer due %d, failed fires %d: want due now with no backoff", tm.DueAtMs, st.FailedFires)
		}
		page, err := outbox.ReadQueue(e.Ctx, e.St, e.P, "billing", outboxtest.Head(t, e.St, e.P, "billing"), st.Cursor, 1)
		if err != nil || len(page.Rows) != 1 || page.Rows[0].RID != "r-002" || page.Rows[0].Seq != got.Seq {
			t.Errorf("the next fire starts at %+v (%v), want r-002", page.Rows, err)
		}
		if !reflect.DeepEqual(st.Tokens, before.Tokens) {
			t.Errorf("token bucket %+v, want %+v kept", st.Tokens, before.Tokens)
		}
		if !reflect.DeepEqual(st.Throttle, before.Throttle) {
			t.Errorf("throttle %+v, want %+v kept", st.Throttle, before.Throttle)
		}
		wantHealth := *before.Health
		wantHealth.ResumeMs = 0 // due now, not when the failing fire chose
		if !reflect.DeepEqual(st.Health, &wantHealth) {
			t.Errorf("health %+v, want %+v", st.Health, wantHealth)
		}
		view, err := e.admin().Endpoint(e.Ctx, e.P, "billing")
		if err != nil {
			t.Fatal(err)
		}
		if v := view.Timer; v == nil || v.DueAtMs != t0+100 || v.FailingSinceMs != t0-9_000 || v.Throttle == nil {
			t.Errorf("the endpoint's view after the replay: %+v", v)
		}
	})
}

func TestReplayRefusals(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		e.appendN("r", 2)
		before := e.all()
		for name, c := range map[string]struct {
			id, rid string
			want    error
		}{
			"unknown row":      {"billing", "r-999", outbox.ErrNotPending},
			"unknown endpoint": {"nobody", "r-000", outbox.ErrNotFound},
			"bad id":           {"billing", "bad id", outbox.ErrInvalid},
		} {
			if _, err := e.admin().Replay(e.Ctx, e.P, c.id, c.rid); !errors.Is(err, c.want) {
				t.Errorf("%s: want %v, got %v", name, c.want, err)
			}
		}
		if !reflect.DeepEqual(before, e.all()) {
			t.Fatal("a refused replay changed the partition")
		}

		// Held by a fire: busy, nothing written.
		tm, _ := e.deliveryTimer("billing")
		var b store.Batch
		b.Delete(tm.Key)
		b.Put(timers.Key(t0+30_000, timers.KindOutcomeDelivery, "billing"), leasedValue(t0, nil))
		e.Apply(b)
		if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-000"); !errors.Is(err, outbox.ErrBusy) {
			t.Fatalf("leased stream: want ErrBusy, got %v", err)
		}

		// A corrupt timer is replaced.
		lt, _ := e.deliveryTimer("billing")
		b = store.Batch{}
		b.Delete(lt.Key)
		b.Put(timers.Key(t0, timers.KindOutcomeDelivery, "billing"), store.Value{0x00, 1, 2})
		e.Apply(b)
		if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-001"); err != nil {
			t.Fatalf("corrupt timer: %v", err)
		}
		if tm, _ := e.deliveryTimer("billing"); tm.Err != nil {
			t.Fatal("the corrupt timer is still there")
		}

		e.put("billing", outbox.EndpointSpec{Enabled: false})
		if _, err := e.admin().Replay(e.Ctx, e.P, "billing", "r-000"); !errors.Is(err, outbox.ErrDisabled) {
			t.Fatalf("disabled endpoint: want ErrDisabled, got %v", err)
		}
	})
}

func TestIngestReadsPastOrphanBacklogRows(t *testing.T) {
	forEachBackend(t, func(t *testing.T, e *env) {
		e.put("billing", outbox.EndpointSpec{Enabled: true})
		var b store.Batch
		for i := range outbox.DefaultMaxEndpoints + 2 {
			key, _ := schema.BacklogKey(fmt.Sprintf("gone%d", i))
			b.Put(key, schema.EncodeBacklog(schema.Backlog{Rows: 1, Bytes: 1}))
		}
		e.Apply(b)
		if st := e.Append(committed("r-1")); st[0].Code != outbox.Accepted {
			t.Fatalf("append beside orphan backlogs: %+v", st)
		}
		if bl, _ := e.backlog("billing"); bl.Rows != 1 {
			t.Fatalf("backlog %+v, want 1 row", bl)
		}
	})
}
