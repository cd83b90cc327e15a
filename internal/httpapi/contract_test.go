package httpapi_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/hookrelay/relay/api/apitest"
)

// contract is api/openapi.yaml as a router of its operations.
func contract(t *testing.T) routers.Router { return apitest.Router(t) }

// checkContract validates one exchange the router had against the
// contract: every answer must be one the contract lists, in its schema; a
// request the API accepted (2xx) must be one the contract accepts. Refused
// requests are malformed on purpose, so only their answers are checked.
// Every answer, problems included, must say Cache-Control: no-store.
func checkContract(t *testing.T) func(req *http.Request, body []byte, rec *httptest.ResponseRecorder) {
	router := contract(t)
	return func(req *http.Request, body []byte, rec *httptest.ResponseRecorder) {
		t.Helper()
		if cc := rec.Header().Get("Cache-Control"); cc != "no-store" {
			t.Errorf("contract: %s %s answered %d with Cache-Control %q, want no-store", req.Method, req.URL.Path, rec.Code, cc)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			if rec.Code == http.StatusNotFound || rec.Code == http.StatusMethodNotAllowed {
				return // a route the contract rightly does not have
			}
			t.Errorf("contract: %s %s answered %d but is not in the contract: %v", req.Method, req.URL.Path, rec.Code, err)
			return
		}
		in := &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
		}
		if rec.Code >= 200 && rec.Code < 300 {
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				t.Errorf("contract: the API accepted %s %s (%d), which the contract refuses: %v", req.Method, req.URL.Path, rec.Code, err)
			}
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in,
			Status:                 rec.Code,
			Header:                 rec.Header(),
			Body:                   io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
			Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
		}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("contract: %s %s answered %d, which the contract does not allow: %v\n%s", req.Method, req.URL.Path, rec.Code, err, rec.Body)
		}
	}
}
