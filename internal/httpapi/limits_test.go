package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
)

// Registrations of 64 new ids sent at once leave at most the limit of
// endpoints, each refusal a 422 too-many-endpoints, and the namespace
// answers as before.
func TestConcurrentRegistrationsThroughTheAPIStayWithinTheLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, h *harness) {
		const racers = 64
		tok := h.admin()
		for round := range 2 {
			ns := fmt.Sprintf("race-%d", round)
			start := make(chan struct{})
			codes := make([]int, racers)
			var wg sync.WaitGroup
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec := h.do(http.MethodPut, fmt.Sprintf("/v1/namespaces/%s/endpoints/e%02d", ns, i), tok, `{"url": "https://h.example.com/x"}`)
					codes[i] = rec.Code
					if rec.Code == http.StatusUnprocessableEntity {
						want(t, rec, rec.Code, httpapi.SlugTooManyEndpoints)
					}
				}()
			}
			close(start)
			wg.Wait()
			created := 0
			for i, code := range codes {
				switch code {
				case http.StatusCreated:
					created++
				case http.StatusUnprocessableEntity, http.StatusServiceUnavailable:
				default:
					t.Errorf("%s: registration %d answered %d", ns, i, code)
				}
			}
			rec := h.do(http.MethodGet, "/v1/namespaces/"+ns+"/endpoints", tok, "")
			want(t, rec, http.StatusOK, "")
			var list struct {
				Endpoints []json.RawMessage `json:"endpoints"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Endpoints) > outbox.DefaultMaxEndpoints || len(list.Endpoints) != created {
				t.Fatalf("%s: %d answered 201, %d endpoints listed; the limit is %d", ns, created, len(list.Endpoints), outbox.DefaultMaxEndpoints)
			}
		}
	})
}

// A namespace holding one endpoint more than its limit (left by racing
// registrations of an earlier version) is listed, read, ingested into and
// emptied through the API; only a new endpoint is refused, with the
// configured limit in the detail.
func TestANamespaceOverItsEndpointLimitAnswersThroughTheAPI(t *testing.T) {
	for _, limit := range []int{0, 3} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			client, prefix := backends()[0].open(t)
			st := redistest.NewStore(t, client, redisstore.Options{Prefix: prefix})
			h := newHarnessOn(t, st, apiOptions{maxEndpoints: limit})
			h.st, h.client, h.prefix = st, client, prefix
			configured := limit
			if limit == 0 {
				configured = outbox.DefaultMaxEndpoints
			}
			n := configured + 1
			p := store.Partition{Namespace: "acme"}
			for i := range n {
				outboxtest.PutEndpoint(t, st, p, fmt.Sprintf("ep%d", i), schema.Endpoint{Enabled: true})
			}
			tok := h.admin()
			var list struct {
				Endpoints []struct {
					ID string `json:"id"`
				} `json:"endpoints"`
			}
			if err := json.Unmarshal(h.do(http.MethodGet, "/v1/namespaces/acme/endpoints", tok, "").Body.Bytes(), &list); err != nil || len(list.Endpoints) != n {
				t.Fatalf("list: %d endpoints, %v; want %d", len(list.Endpoints), err, n)
			}
			if page := h.listPage("", 10); len(page.Namespaces) != 1 || page.Namespaces[0].Endpoints != n {
				t.Fatalf("namespaces: %+v", page.Namespaces)
			}
			want(t, h.do(http.MethodPost, "/v1/namespaces/acme/outcomes", tok, committedJSON), http.StatusAccepted, "")
			for i := range n {
				rec := h.do(http.MethodGet, fmt.Sprintf("/v1/namespaces/acme/endpoints/ep%d", i), tok, "")
				body := want(t, rec, http.StatusOK, "")
				if rows := body["backlog"].(map[string]any)["rows"]; rows != 1.0 {
					t.Fatalf("ep%d: backlog rows %v, want the outcome", i, rows)
				}
			}
			h.putEndpoint("acme", "ep0", `{"url": "https://h.example.com/changed"}`)
			before := h.dump()
			rec := h.do(http.MethodPut, "/v1/namespaces/acme/endpoints/one-more", tok, `{"url": "https://h.example.com/x"}`)
			body := want(t, rec, http.StatusUnprocessableEntity, httpapi.SlugTooManyEndpoints)
			if d, want := body["detail"], fmt.Sprintf("a namespace holds at most %d endpoints", configured); d != want {
				t.Fatalf("detail %q, want %q", d, want)
			}
			if after := h.dump(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatal("a refused endpoint changed the store")
			}
			for i := range n {
				want(t, h.do(http.MethodDelete, fmt.Sprintf("/v1/namespaces/acme/endpoints/ep%d?force=true", i), tok, ""), http.StatusOK, "")
			}
			if page := h.listPage("", 10); len(page.Namespaces) != 0 {
				t.Fatalf("namespaces after the deletes: %+v", page.Namespaces)
			}
		})
	}
}

// Through the API, the first endpoint of a namespace past the limit is 422
// too-many-namespaces naming the limit, and writes nothing; namespaces
// created at once pass the limit by at most their number; the namespaces
// held take endpoints as before.
func TestNewNamespacesPastTheLimitAreRefusedThroughTheAPI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const limit, racers = 3, 16
			client, prefix := b.open(t)
			st := redistest.NewStore(t, client, redisstore.Options{Prefix: prefix})
			h := newHarnessOn(t, st, apiOptions{maxNamespaces: limit})
			h.st, h.client, h.prefix = st, client, prefix
			tok := h.token("", httpapi.ScopeEndpointsWrite)
			body := `{"url": "https://h.example.com/x"}`
			codes := make([]int, racers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					rec := h.do(http.MethodPut, fmt.Sprintf("/v1/namespaces/ns-%02d/endpoints/hooks", i), tok, body)
					codes[i] = rec.Code
					if rec.Code != http.StatusCreated {
						want(t, rec, http.StatusUnprocessableEntity, httpapi.SlugTooManyNamespaces)
					}
				}()
			}
			close(start)
			wg.Wait()
			var held []string
			for i, code := range codes {
				if code == http.StatusCreated {
					held = append(held, fmt.Sprintf("ns-%02d", i))
				}
			}
			if len(held) < limit || len(held) > limit+racers-1 {
				t.Fatalf("%d namespaces created at once; the limit is %d", len(held), limit)
			}
			before := h.dump()
			rec := h.do(http.MethodPut, "/v1/namespaces/late/endpoints/hooks", tok, body)
			p := want(t, rec, http.StatusUnprocessableEntity, httpapi.SlugTooManyNamespaces)
			if d := fmt.Sprint(p["detail"]); !strings.Contains(d, fmt.Sprintf("at most %d namespaces", limit)) {
				t.Fatalf("detail %q does not name the limit", d)
			}
			if fmt.Sprint(h.dump()) != fmt.Sprint(before) {
				t.Fatal("a refused namespace changed the store")
			}
			want(t, h.do(http.MethodPut, "/v1/namespaces/"+held[0]+"/endpoints/audit", tok, body), http.StatusCreated, "")
			want(t, h.do(http.MethodPut, "/v1/namespaces/"+held[0]+"/endpoints/hooks", tok, `{"url": "https://h.example.com/y"}`), http.StatusOK, "")
		})
	}
}
