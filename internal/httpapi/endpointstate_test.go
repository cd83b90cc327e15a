package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/timers"
)

const billingPath = "/v1/namespaces/acme/endpoints/billing"

// storedEndpoint is the endpoint row as stored, secrets and all.
func (h *harness) storedEndpoint(ns, id string) schema.Endpoint {
	h.t.Helper()
	v, found, err := h.st.Get(h.t.Context(), store.Partition{Namespace: ns}, schema.ClassEndpoint.Key(id))
	if err != nil || !found {
		h.t.Fatalf("endpoint %s/%s: found %v, %v", ns, id, found, err)
	}
	ep, err := schema.DecodeEndpoint(v)
	if err != nil {
		h.t.Fatal(err)
	}
	return ep
}

// withoutState is an endpoint view less what enabling and disabling
// change, and the stream's state, which a fire may move.
func withoutState(v map[string]any) map[string]any {
	out := map[string]any{}
	for k, x := range v {
		switch k {
		case "enabled", "disabled_at", "disabled_reason", "updated_at", "next_attempt_at", "per_minute":
		default:
			out[k] = x
		}
	}
	return out
}

func TestEnableAndDisableChangeOnlyTheEnabledFlag(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		created := h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "scheme": "standard-webhooks",
			"timeout_ms": 2500, "rate_limit": 20, "kinds": ["committed"],
			"headers": {"authorization": "Bearer hunter2", "x-tenant": "acme"}}`)
		if created["headers"].(map[string]any)["authorization"] != schema.RedactedHeader {
			t.Fatalf("the secret header is not redacted: %v", created["headers"])
		}
		stored := h.storedEndpoint("acme", "billing")
		shown := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, "")
		writer := h.token("acme", httpapi.ScopeEndpointsWrite)

		h.clk.Advance(time.Second)
		off := want(t, h.do(http.MethodPost, billingPath+"/disable", writer, ""), http.StatusOK, "")
		if off["enabled"] != false || off["disabled_at"] != at(h.clk.Now().UnixMilli()) || off["updated_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("disabled view %v", off)
		}
		if !reflect.DeepEqual(withoutState(off), withoutState(shown)) {
			t.Fatalf("disable changed more than the flag:\nbefore %v\nafter  %v", shown, off)
		}
		if got := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, ""); !reflect.DeepEqual(got, off) {
			t.Fatalf("disable answered %v, GET shows %v", off, got)
		}
		h.clk.Advance(time.Second)
		on := want(t, h.do(http.MethodPost, billingPath+"/enable", writer, ""), http.StatusOK, "")
		if on["enabled"] != true || on["disabled_at"] != nil || !reflect.DeepEqual(withoutState(on), withoutState(shown)) {
			t.Fatalf("enable changed more than the flag:\nbefore %v\nafter  %v", shown, on)
		}
		now := h.storedEndpoint("acme", "billing")
		if !reflect.DeepEqual(now.Secrets, stored.Secrets) || !reflect.DeepEqual(now.Headers, stored.Headers) || len(now.Secrets) != 1 {
			t.Fatal("the secrets or the headers' stored values changed")
		}
	})
}

func TestEnablingAnEnabledEndpointAnswersItAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "audit", `{"url": "https://audit.example.com/hooks", "enabled": false}`)
		before := h.dump()
		h.clk.Advance(time.Minute)
		woken := h.woken.Load()
		on := want(t, h.do(http.MethodPost, billingPath+"/enable", h.admin(), ""), http.StatusOK, "")
		off := want(t, h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/audit/disable", h.admin(), ""), http.StatusOK, "")
		if on["enabled"] != true || off["enabled"] != false {
			t.Fatalf("answers %v and %v", on, off)
		}
		if !reflect.DeepEqual(before, h.dump()) || h.woken.Load() != woken {
			t.Fatal("an enable of an enabled endpoint or a disable of a disabled one wrote or woke the driver")
		}
	})
}

func TestEnablingAGoneEndpointClearsItsReasonAndMakesItsStreamDue(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "enabled": false}`)
		ep := h.storedEndpoint("acme", "billing")
		ep.DisabledReason = "gone"
		v, err := schema.EncodeEndpoint(&ep)
		if err != nil {
			t.Fatal(err)
		}
		var b store.Batch
		b.Put(schema.ClassEndpoint.Key("billing"), v)
		if _, err := h.st.Apply(t.Context(), store.Partition{Namespace: "acme"}, b); err != nil {
			t.Fatal(err)
		}
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		h.clk.Advance(time.Minute)
		woken := h.woken.Load()
		on := want(t, h.do(http.MethodPost, billingPath+"/enable", h.admin(), ""), http.StatusOK, "")
		if on["enabled"] != true || on["disabled_reason"] != nil || on["next_attempt_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("enabled view %v: want no reason and its row due now", on)
		}
		if h.woken.Load() == woken {
			t.Fatal("an enable must wake the driver")
		}
	})
}

// A PUT and a disable sent at once both land: whatever their order, the
// PUT's settings are kept.
func TestAConcurrentPutAndDisableLoseNeitherWrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		for i := range 50 {
			h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "timeout_ms": 1000}`)
			start := make(chan struct{})
			var wg sync.WaitGroup
			codes := make([]int, 2)
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-start
				codes[0] = h.do(http.MethodPut, billingPath, h.admin(), fmt.Sprintf(`{"url": "https://billing.example.com/hooks", "timeout_ms": %d}`, 2000+i)).Code
			}()
			go func() {
				defer wg.Done()
				<-start
				codes[1] = h.do(http.MethodPost, billingPath+"/disable", h.admin(), "").Code
			}()
			close(start)
			wg.Wait()
			if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
				t.Fatalf("round %d: PUT %d, disable %d", i, codes[0], codes[1])
			}
			if got := h.storedEndpoint("acme", "billing"); got.TimeoutMs != 2000+i {
				t.Fatalf("round %d: timeout %d, want the PUT's %d", i, got.TimeoutMs, 2000+i)
			}
		}
	})
}

// backOff leaves the stream of endpoint in acme backing off: 5 failed
// fires, throttled, due in a minute.
func (h *harness) backOff(endpoint string) {
	h.t.Helper()
	ctx, p := h.t.Context(), store.Partition{Namespace: "acme"}
	tm, ok, err := timers.Find(ctx, h.st, p, timers.KindOutcomeDelivery, endpoint)
	if err != nil || !ok {
		h.t.Fatalf("timer of %s: %v %v", endpoint, ok, err)
	}
	nowMs := h.clk.Now().UnixMilli()
	st, err := schema.EncodeDeliveryState(schema.DeliveryState{FailedFires: 5, Throttle: &schema.Throttle{MaxInFlight: 1, Reason: "503", SinceMs: nowMs}})
	if err != nil {
		h.t.Fatal(err)
	}
	var b store.Batch
	tm.Replace(&b, nowMs+60_000, st)
	if res, err := h.st.Apply(ctx, p, b); err != nil || !res.Committed {
		h.t.Fatalf("back off: %+v %v", res, err)
	}
}

func TestRetryMakesEveryPendingRowDueNow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "max_in_flight": 4}`)
		for _, rid := range []string{"r-1", "r-2", "r-3"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
		}
		h.backOff("billing")
		h.clk.Advance(time.Second)
		before := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, "")
		if before["throttle"] == nil || before["next_attempt_at"] != at(h.clk.Now().UnixMilli()+59_000) {
			t.Fatalf("not backing off: %v", before)
		}
		woken := h.woken.Load()
		got := want(t, h.do(http.MethodPost, billingPath+"/retry", h.token("acme", httpapi.ScopeAdmin), ""), http.StatusAccepted, "")
		wantBody := map[string]any{"endpoint": "billing", "pending_rows": 3.0, "next_attempt_at": at(h.clk.Now().UnixMilli()), "enabled": false}
		if !reflect.DeepEqual(got, wantBody) {
			t.Fatalf("retry answered %v, want %v", got, wantBody)
		}
		after := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, "")
		if after["throttle"] != nil || after["next_attempt_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("after the retry %v: want no throttle and due now", after)
		}
		if h.woken.Load() == woken {
			t.Fatal("a retry must wake the driver")
		}
	})
}

func TestRetryOfADisabledEndpointIsRefusedUnlessItEnablesIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		h.backOff("billing")
		want(t, h.do(http.MethodPost, billingPath+"/disable", h.admin(), ""), http.StatusOK, "")
		before := h.dump()
		for _, q := range []string{"", "?enable=false"} {
			p := want(t, h.do(http.MethodPost, billingPath+"/retry"+q, h.admin(), ""), http.StatusConflict, httpapi.SlugEndpointDisabled)
			if d, _ := p["detail"].(string); !strings.Contains(d, "enable=true") {
				t.Fatalf("detail %q does not say how to enable and deliver", d)
			}
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a refused retry changed Redis")
		}
		h.clk.Advance(time.Second)
		got := want(t, h.do(http.MethodPost, billingPath+"/retry?enable=true", h.admin(), ""), http.StatusAccepted, "")
		if got["enabled"] != true || got["pending_rows"] != 1.0 || got["next_attempt_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("enable and deliver answered %v", got)
		}
		ep := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, "")
		if ep["enabled"] != true || ep["throttle"] != nil || ep["next_attempt_at"] != at(h.clk.Now().UnixMilli()) {
			t.Fatalf("after enable and deliver %v", ep)
		}
	})
}

func TestRetryOfAStreamWithNothingPendingSaysSo(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		before := h.dump()
		got := want(t, h.do(http.MethodPost, billingPath+"/retry", h.admin(), ""), http.StatusOK, "")
		if wantBody := map[string]any{"endpoint": "billing", "pending_rows": 0.0, "next_attempt_at": nil, "enabled": false}; !reflect.DeepEqual(got, wantBody) {
			t.Fatalf("retry answered %v, want %v", got, wantBody)
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a retry with nothing pending changed Redis")
		}
	})
}

func TestARecoveryPreviewCountsTheRangeAndWritesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		for _, rid := range []string{"r-0", "r-1", "r-2", "r-3"} {
			want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON(rid, "committed")), http.StatusAccepted, "")
			h.clk.Advance(time.Minute)
		}
		h.deliver("acme", "billing", 3, outbox.Done{AtMs: h.clk.Now().UnixMilli(), Status: 200})
		h.clk.Advance(time.Hour)
		before := h.dump()
		q := url.Values{"since": {"2025-11-30T00:01:00Z"}, "until": {"2025-11-30T00:04:00Z"}}
		path := billingPath + "/recover?" + q.Encode()
		got := want(t, h.do(http.MethodGet, path, h.token("acme", httpapi.ScopeOutboxRead), ""), http.StatusOK, "")
		wantBody := map[string]any{"endpoint": "billing", "since": "2025-11-30T00:01:00.000Z", "until": "2025-11-30T00:04:00.000Z",
			"delivered": 2.0, "pending": 1.0, "examined": 3.0, "partial": false}
		if !reflect.DeepEqual(got, wantBody) {
			t.Fatalf("preview %v, want %v", got, wantBody)
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a preview changed Redis")
		}
		job := want(t, h.do(http.MethodPost, billingPath+"/recover", h.admin(), `{"since": "2025-11-30T00:01:00Z", "until": "2025-11-30T00:04:00Z"}`), http.StatusAccepted, "")
		h.runRecovery("billing")
		done := want(t, h.do(http.MethodGet, billingPath+"/recoveries/"+job["id"].(string), h.admin(), ""), http.StatusOK, "")
		if done["queued"] != got["delivered"] {
			t.Fatalf("the recovery queued %v, the preview said %v", done["queued"], got["delivered"])
		}
	})
}

func TestBadRepairsAreRefusedAndChangeNothing(t *testing.T) {
	h, _ := newLoggedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
	h.clk.Advance(48 * time.Hour)
	now := h.clk.Now()
	ts := func(d time.Duration) string { return url.QueryEscape(now.Add(d).UTC().Format(time.RFC3339Nano)) }
	preview := func(since, until string) string { return billingPath + "/recover?since=" + since + "&until=" + until }
	before := h.dump()
	for _, c := range []struct {
		name, method, path string
		status             int
		slug               httpapi.Slug
		detail             string
	}{
		{"enable unknown", "POST", "/v1/namespaces/acme/endpoints/nobody/enable", 404, httpapi.SlugNotFound, "endpoint"},
		{"disable unknown", "POST", "/v1/namespaces/acme/endpoints/nobody/disable", 404, httpapi.SlugNotFound, "endpoint"},
		{"retry unknown", "POST", "/v1/namespaces/acme/endpoints/nobody/retry", 404, httpapi.SlugNotFound, "endpoint"},
		{"preview unknown", "GET", "/v1/namespaces/acme/endpoints/nobody/recover?since=" + ts(-time.Hour) + "&until=" + ts(0), 404, httpapi.SlugNotFound, "endpoint"},
		{"enable bad id", "POST", "/v1/namespaces/acme/endpoints/-x/enable", 400, httpapi.SlugInvalidRequest, "endpoint"},
		{"retry enable yes", "POST", billingPath + "/retry?enable=yes", 400, httpapi.SlugInvalidRequest, "enable"},
		{"retry enable 1", "POST", billingPath + "/retry?enable=1", 400, httpapi.SlugInvalidRequest, "enable"},
		{"retry bad query", "POST", billingPath + "/retry?enable=%zz", 400, httpapi.SlugInvalidRequest, "query"},
		{"preview malformed since", "GET", preview("last%20tuesday", ts(0)), 400, httpapi.SlugInvalidRequest, "since"},
		{"preview since without a zone", "GET", preview(now.Format("2006-01-02T15:04:05"), ts(0)), 400, httpapi.SlugInvalidRequest, "since"},
		{"preview malformed until", "GET", preview(ts(-time.Hour), "2025-02-30T00:00:00Z"), 400, httpapi.SlugInvalidRequest, "until"},
		{"preview no since", "GET", billingPath + "/recover?until=" + ts(0), 400, httpapi.SlugInvalidRequest, "since"},
		{"preview no until", "GET", billingPath + "/recover?since=" + ts(-time.Hour), 400, httpapi.SlugInvalidRequest, "until"},
		{"preview since twice", "GET", preview(ts(-time.Hour), ts(0)) + "&since=" + ts(-time.Hour), 400, httpapi.SlugInvalidRequest, "since"},
		{"preview reversed", "GET", preview(ts(0), ts(-time.Hour)), 400, httpapi.SlugInvalidRequest, "until"},
		{"preview before the retention", "GET", preview(ts(-25*time.Hour), ts(0)), 400, httpapi.SlugInvalidRequest, "since"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := want(t, h.do(c.method, c.path, h.admin(), ""), c.status, c.slug)
			if d, _ := body["detail"].(string); !strings.Contains(d, c.detail) {
				t.Fatalf("detail %q, want it to mention %q", d, c.detail)
			}
			if !reflect.DeepEqual(before, h.dump()) {
				t.Fatal("a refused request changed Redis")
			}
		})
	}
}

// A token bound to another namespace, or without the route's scope, is
// refused before anything is read or written.
func TestTheRepairRoutesNeedTheirScopeAndNamespace(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		want(t, h.do(http.MethodPost, outcomesPath, h.admin(), outcomeJSON("r-1", "committed")), http.StatusAccepted, "")
		before := h.dump()
		previewQ := "?since=2025-11-29T12:00:00Z&until=2025-11-30T00:00:01Z"
		routes := []struct {
			method, path string
			scope        httpapi.Scope
		}{
			{"POST", "/enable", httpapi.ScopeEndpointsWrite},
			{"POST", "/disable", httpapi.ScopeEndpointsWrite},
			{"POST", "/retry?enable=true", httpapi.ScopeAdmin},
			{"GET", "/recover" + previewQ, httpapi.ScopeOutboxRead},
		}
		answer := func(method, path, token string) string {
			rec := h.do(method, path, token, "")
			var p map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &p)
			delete(p, "request_id")
			b, _ := json.Marshal(p)
			return http.StatusText(rec.Code) + " " + string(b)
		}
		for _, r := range routes {
			existing := answer(r.method, billingPath+r.path, h.token("globex", r.scope))
			missing := answer(r.method, "/v1/namespaces/acme/endpoints/nobody"+r.path, h.token("globex", r.scope))
			if !strings.HasPrefix(existing, "Forbidden ") || existing != missing {
				t.Errorf("%s %s with a token of globex: %s; for a missing endpoint: %s", r.method, r.path, existing, missing)
			}
			for _, s := range []httpapi.Scope{httpapi.ScopeOutcomesWrite, httpapi.ScopeEndpointsWrite, httpapi.ScopeOutboxRead} {
				if s == r.scope {
					continue
				}
				want(t, h.do(r.method, billingPath+r.path, h.token("acme", s), ""), http.StatusForbidden, httpapi.SlugForbidden)
			}
			want(t, h.do(r.method, billingPath+r.path, "", ""), http.StatusUnauthorized, httpapi.SlugUnauthorized)
		}
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a refused token changed Redis")
		}
	})
}
