package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/hookrelay/relay/internal/redisstore"
)

// An unauthenticated client sending made-up methods must not add a series
// per method: each would hold its label bytes for the life of the process.
func TestMadeUpMethodsDoNotGrowTheMetrics(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	h := newHarness(t, c, redisstore.DefaultPrefix)
	h.check = nil // the contract has no made-up methods

	const attempts = 200
	for i := range attempts {
		method := fmt.Sprintf("X%d%s", i, strings.Repeat("M", 16<<10))
		for _, path := range []string{"/healthz", outcomesPath, "/no/such/route"} {
			rec := httptest.NewRecorder()
			h.h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			if rec.Code < 400 {
				t.Fatalf("%s %s answered %d", method[:8], path, rec.Code)
			}
		}
	}
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))

	families, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	series, other := 0, 0.0
	for _, f := range families {
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if len(l.GetValue()) > 64 {
					t.Fatalf("%s has a %d-byte %s label", f.GetName(), len(l.GetValue()), l.GetName())
				}
			}
			if f.GetName() != "relay_http_requests_total" {
				continue
			}
			series++
			for _, l := range metric.GetLabel() {
				if l.GetName() == "method" && l.GetValue() == "other" {
					other += metric.GetCounter().GetValue()
				}
			}
		}
	}
	// Three routes, two methods, a few statuses: a handful, not hundreds.
	if series > 10 {
		t.Fatalf("relay_http_requests_total has %d series after %d made-up methods", series, attempts)
	}
	if other != 3*attempts {
		t.Fatalf("%v requests counted under method=\"other\", want %d", other, 3*attempts)
	}
}
