package httpapi_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox/schema"
)

func TestAnEditKeepsTheRedactedHeadersItNamesUnseen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks",
			"headers": {"authorization": "Bearer hunter2", "x-api-key": "k-123", "x-tenant": "acme"}}`)
		shown := want(t, h.do(http.MethodGet, billingPath, h.admin(), ""), http.StatusOK, "")
		if shown["headers"].(map[string]any)["authorization"] != schema.RedactedHeader {
			t.Fatalf("headers shown %v", shown["headers"])
		}
		// What a console sends back: the changed URL and plain header, the
		// redacted one by name, and x-api-key left out (removed).
		saved := want(t, h.do(http.MethodPut, billingPath, h.token("acme", httpapi.ScopeEndpointsWrite),
			`{"url": "https://billing.example.com/v2", "headers": {"x-tenant": "acme-2"}, "keep_headers": ["authorization"]}`), http.StatusOK, "")
		if saved["url"] != "https://billing.example.com/v2" {
			t.Fatalf("saved %v", saved)
		}
		got := h.storedEndpoint("acme", "billing").Headers
		if wantH := map[string]schema.HeaderValue{"authorization": "Bearer hunter2", "x-tenant": "acme-2"}; !reflect.DeepEqual(got, wantH) {
			t.Fatalf("stored headers %d, want authorization kept, x-tenant changed, x-api-key removed", len(got))
		}
		if strings.Contains(h.do(http.MethodGet, billingPath, h.admin(), "").Body.String(), "hunter2") {
			t.Fatal("a kept header's value is shown")
		}
	})
}

func TestKeepingAHeaderTheEndpointLacksOrAlsoSendsIsRefusedAndChangesNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "headers": {"authorization": "Bearer hunter2"}}`)
		before := h.dump()
		for _, c := range []struct{ body, field string }{
			{`{"url": "https://billing.example.com/hooks", "keep_headers": ["x-missing"]}`, "keep_headers.x-missing"},
			{`{"url": "https://billing.example.com/hooks", "headers": {"authorization": "Bearer new"}, "keep_headers": ["authorization"]}`, "keep_headers.authorization"},
			{`{"url": "https://billing.example.com/hooks", "keep_headers": "authorization"}`, "keep_headers"},
		} {
			rec := h.do(http.MethodPut, billingPath, h.admin(), c.body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), c.field) {
				t.Fatalf("%s: %d %s", c.body, rec.Code, rec.Body)
			}
			if strings.Contains(rec.Body.String(), "hunter2") {
				t.Fatal("the refusal shows a header's value")
			}
		}
		// A new endpoint has nothing to keep.
		want(t, h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/audit", h.admin(),
			`{"url": "https://audit.example.com/hooks", "keep_headers": ["authorization"]}`), http.StatusBadRequest, httpapi.SlugInvalidEndpoint)
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a refused keep_headers wrote")
		}
	})
}

func TestATestOutcomeGoesToItsEndpointAloneUnderRelaysOwnID(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks", "kinds": ["committed"]}`)
		// Neither every kind nor every event takes another's test.
		h.putEndpoint("acme", "all", `{"url": "https://all.example.com/hooks"}`)
		h.putEndpoint("acme", "watch", `{"url": "https://watch.example.com/hooks", "kinds": ["relay.*"]}`)
		woken := h.woken.Load()
		res := want(t, h.do(http.MethodPost, billingPath+"/test", h.token("acme", httpapi.ScopeEndpointsWrite), ""), http.StatusAccepted, "")
		rid, _ := res["reservation_id"].(string)
		if res["endpoint"] != "billing" || res["type"] != "endpoint.test" || !strings.HasPrefix(rid, schema.EventPrefix) {
			t.Fatalf("answer %v", res)
		}
		if h.woken.Load() == woken {
			t.Fatal("the driver was not told of the test's row")
		}
		h.pendingSeq("billing", rid)
		for _, other := range []string{"all", "watch"} {
			page := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outbox?endpoint="+other, h.admin(), ""), http.StatusOK, "")
			if rows := page["rows"].([]any); len(rows) != 0 {
				t.Fatalf("%s got the test: %v", other, rows)
			}
		}
		story := want(t, h.do(http.MethodGet, "/v1/namespaces/acme/outcomes/"+rid, h.admin(), ""), http.StatusOK, "")
		if o := story["outcome"].(map[string]any); o["event"].(map[string]any)["type"] != "endpoint.test" {
			t.Fatalf("outcome %v", o)
		}
	})
}

func TestATestIsRefusedWithoutTheWriteScopeOnADisabledOrUnknownEndpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		h.putEndpoint("acme", "off", `{"url": "https://off.example.com/hooks", "enabled": false}`)
		before := h.dump()
		want(t, h.do(http.MethodPost, billingPath+"/test", h.token("acme", httpapi.ScopeOutboxRead, httpapi.ScopeOutcomesWrite), ""), http.StatusForbidden, httpapi.SlugForbidden)
		want(t, h.do(http.MethodPost, billingPath+"/test", h.token("other", httpapi.ScopeEndpointsWrite), ""), http.StatusForbidden, httpapi.SlugForbidden)
		want(t, h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/off/test", h.admin(), ""), http.StatusConflict, httpapi.SlugEndpointDisabled)
		want(t, h.do(http.MethodPost, "/v1/namespaces/acme/endpoints/nobody/test", h.admin(), ""), http.StatusNotFound, httpapi.SlugNotFound)
		if !reflect.DeepEqual(before, h.dump()) {
			t.Fatal("a refused test wrote")
		}
	})
}

func TestNoEndpointsKindsNameTheTestEvent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		want(t, h.do(http.MethodPut, billingPath, h.admin(), `{"url": "https://billing.example.com/hooks", "kinds": ["relay.endpoint.test"]}`),
			http.StatusBadRequest, httpapi.SlugInvalidEndpoint)
	})
}
