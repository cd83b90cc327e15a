package clientcheck_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/hookrelay/relay/api/apitest"
	"github.com/hookrelay/relay/internal/app"
	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/relayclient"
)

// tokenSecret signs the test relays' tokens.
var tokenSecret = strings.Repeat("k", httpapi.MinHS256Secret)

// relay is a whole relay built in this process on an embedded miniredis,
// as relay serve builds it, with its delivery driver stopped so that rows
// stay pending.
type relay struct {
	app *app.App
	// handler is the API; url serves it.
	handler http.Handler
	url     string
}

func newRelay(ctx context.Context) (*relay, func(), error) {
	cfg := app.Defaults()
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.BacklogEvery = 0
	cfg.Auth.Secret = tokenSecret
	a, err := app.New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	srv := httptest.NewServer(a.Handler())
	return &relay{app: a, handler: a.Handler(), url: srv.URL}, func() { srv.Close(); a.Close() }, nil
}

func startRelay(t *testing.T) *relay {
	t.Helper()
	r, stop, err := newRelay(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return r
}

// startDelivering is startRelay with its delivery driver running until the
// test ends and endpoint billing of namespace acme registered at url +
// "/hooks"; c is an admin client of it.
func startDelivering(t *testing.T, url string) (r *relay, c *relayclient.Client) {
	t.Helper()
	r = startRelay(t)
	if err := r.app.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.app.Stop(ctx)
	})
	c, _ = client(t, r.url, r.token(httpapi.ScopeAdmin))
	if _, err := c.PutEndpoint(t.Context(), "acme", "billing", relayclient.EndpointConfig{URL: url + "/hooks"}); err != nil {
		t.Fatal(err)
	}
	return r, c
}

// token is a token of this relay with scopes, for an hour.
func (r *relay) token(scopes ...httpapi.Scope) string {
	tok, err := httpapi.MintHS256([]byte(tokenSecret), r.app.Audience(), "", httpapi.Principal{Subject: "relayclient-test", Scopes: scopes}, time.Hour, time.Now())
	if err != nil {
		panic(err)
	}
	return tok
}

// client is a client of url with token whose every exchange is checked
// against api/openapi.yaml, requests included unless refusedOK.
func client(t *testing.T, url, token string, opts ...func(*relayclient.Options)) (*relayclient.Client, *contractTransport) {
	t.Helper()
	ct := &contractTransport{t: t, router: contract(t), next: http.DefaultTransport, checkRequests: true}
	o := relayclient.Options{Token: token, HTTPClient: &http.Client{Transport: ct}}
	for _, f := range opts {
		f(&o)
	}
	c, err := relayclient.New(url, o)
	if err != nil {
		t.Fatal(err)
	}
	return c, ct
}

// contract is api/openapi.yaml as a router of its operations.
func contract(t *testing.T) routers.Router { return apitest.Router(t) }

// contractTransport checks every request the client sends and every answer
// it reads against the contract, and records the operations it saw.
type contractTransport struct {
	t      *testing.T
	router routers.Router
	next   http.RoundTripper
	// checkRequests is off for the calls a test sends broken on purpose,
	// whose answers are still checked.
	checkRequests bool

	mu  sync.Mutex
	ops []string
}

func (ct *contractTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := ct.t
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := ct.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))

	vreq := req.Clone(context.Background())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := ct.router.FindRoute(vreq)
	if err != nil {
		t.Errorf("contract: the client sent %s %s, which is not in the contract: %v", req.Method, req.URL.Path, err)
		return resp, nil
	}
	ct.mu.Lock()
	ct.ops = append(ct.ops, route.Operation.OperationID)
	ct.mu.Unlock()
	in := &openapi3filter.RequestValidationInput{
		Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true},
	}
	if ct.checkRequests {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			t.Errorf("contract: the client sent %s %s, which the contract refuses: %v\n%s", req.Method, req.URL.Path, err, body)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("contract: %s %s answered %d, which the contract does not allow: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, respBody)
	}
	return resp, nil
}

// operations are the operation ids the transport saw, sorted, once each.
func (ct *contractTransport) operations() []string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ops := slices.Clone(ct.ops)
	slices.Sort(ops)
	return slices.Compact(ops)
}
