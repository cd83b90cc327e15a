package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
	"github.com/hookrelay/relay/internal/store"
	"github.com/hookrelay/relay/internal/tracing"
)

// A producer's trace: the traceparent and tracestate it sends.
const (
	producerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan   = "00f067aa0ba902b7"
	traceparent    = "00-" + producerTrace + "-" + producerSpan + "-01"
	tracestate     = "vendor=opaque"
	ingestRoute    = "/v1/namespaces/{ns}/outcomes"
	headerValue    = "header-value-7d1c"
	payloadMarker  = "payload-marker-5e9a"
	endpointSecret = "whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3"
	querySecret    = "query-secret-31b0"
)

// tracedHarness is a harness on miniredis whose API traces into an
// in-memory exporter and logs, naming spans, into the buffer.
func tracedHarness(t *testing.T) (*harness, *tracetest.InMemoryExporter, *bytes.Buffer) {
	t.Helper()
	return tracedHarnessWith(t, apiOptions{})
}

// tracedHarnessWith is tracedHarness serving the API opts vary.
func tracedHarnessWith(t *testing.T, opts apiOptions) (*harness, *tracetest.InMemoryExporter, *bytes.Buffer) {
	t.Helper()
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	st := redistest.NewStore(t, client, redisstore.Options{Prefix: redisstore.DefaultPrefix})
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	logs := &bytes.Buffer{}
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(logs, nil)))
	opts.ready, opts.logger, opts.configure = st.Check, log, func(c *httpapi.Config) { c.TracerProvider = tp }
	h := newHarnessOn(t, st, opts)
	h.st, h.client, h.prefix = st, client, redisstore.DefaultPrefix
	return h, exp, logs
}

// send serves a request with the headers, given as name, value pairs.
func (h *harness) send(method, target, token, body string, header ...string) *httptest.ResponseRecorder {
	h.t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.h.ServeHTTP(rec, req)
	return rec
}

// spanNamed is the one ended span of that name.
func spanNamed(t *testing.T, exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		var names []string
		for _, s := range exp.GetSpans() {
			names = append(names, s.Name)
		}
		t.Fatalf("%d spans named %q, want 1; spans: %q", len(found), name, names)
	}
	return found[0]
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// The ingest's server span is a child of the producer's span: same trace,
// the producer's span its remote parent, the tracestate kept; it bears the
// HTTP conventions' attributes, the route as chi's pattern, and relay's
// counts of the request and its answer.
func TestTheIngestSpanContinuesTheProducersTrace(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	rec := h.send(http.MethodPost, "/v1/namespaces/acme/outcomes?trace="+querySecret, h.token("acme", httpapi.ScopeOutcomesWrite), outcomeJSON("r-1", "aborted"),
		"traceparent", traceparent, "tracestate", tracestate)
	want(t, rec, http.StatusAccepted, "")

	s := spanNamed(t, exp, "POST "+ingestRoute)
	if s.SpanKind != trace.SpanKindServer {
		t.Errorf("kind %v", s.SpanKind)
	}
	if got := s.SpanContext.TraceID().String(); got != producerTrace {
		t.Errorf("trace %s, want the producer's %s", got, producerTrace)
	}
	if got := s.Parent.SpanID().String(); got != producerSpan || !s.Parent.IsRemote() {
		t.Errorf("parent %s (remote %v), want the producer's span %s", got, s.Parent.IsRemote(), producerSpan)
	}
	if got := s.SpanContext.TraceState().String(); got != tracestate {
		t.Errorf("tracestate %q, want %q", got, tracestate)
	}
	if s.Status.Code == codes.Error {
		t.Errorf("status %v", s.Status)
	}
	a := attrs(s)
	for k, v := range map[attribute.Key]any{
		"http.request.method":       "POST",
		"http.route":                ingestRoute,
		"http.response.status_code": int64(http.StatusAccepted),
		"url.path":                  "/v1/namespaces/acme/outcomes",
		"url.scheme":                "http",
		"server.address":            "example.com",
		"network.protocol.version":  "1.1",
		"relay.namespace":           "acme",
		"relay.outcomes":            int64(1),
		"relay.outcomes.accepted":   int64(1),
		"relay.outcomes.duplicate":  int64(0),
		"relay.outcomes.conflict":   int64(0),
	} {
		if got := a[k].AsInterface(); got != v {
			t.Errorf("%s = %v (%T), want %v", k, got, got, v)
		}
	}
}

// A list's span counts what the answer says of each outcome.
func TestTheIngestSpanCountsAListsAnswer(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	tok := h.token("acme", httpapi.ScopeOutcomesWrite)
	want(t, h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", tok, `{"outcomes": [`+outcomeJSON("r-1", "aborted")+`, `+outcomeJSON("r-2", "aborted")+`]}`), http.StatusAccepted, "")
	exp.Reset()
	list := `{"outcomes": [` + outcomeJSON("r-1", "aborted") + `, ` + outcomeJSON("r-2", "expired") + `, ` + outcomeJSON("r-3", "aborted") + `, ` + outcomeJSON("r-4", "aborted") + `]}`
	want(t, h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", tok, list), http.StatusAccepted, "")
	s := spanNamed(t, exp, "POST "+ingestRoute)
	a := attrs(s)
	for k, v := range map[attribute.Key]int64{
		"relay.outcomes": 4, "relay.outcomes.accepted": 2, "relay.outcomes.duplicate": 1, "relay.outcomes.conflict": 1,
	} {
		if got := a[k].AsInt64(); got != v {
			t.Errorf("%s = %d, want %d", k, got, v)
		}
	}
	if s.Parent.IsValid() {
		t.Errorf("a request without traceparent has parent %v; want a new trace", s.Parent)
	}
}

// Every route's span is named for chi's pattern, never for the path with
// its ids; a request no route takes is named for its method alone, and a
// method HTTP does not define is _OTHER.
func TestSpansAreNamedForTheRoutePattern(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	admin := h.admin()
	for _, c := range []struct {
		method, path, name, route string
		status                    int
		params                    map[attribute.Key]string
	}{
		{http.MethodGet, "/v1/namespaces/acme/outcomes/r-9", "GET /v1/namespaces/{ns}/outcomes/{rid}", "/v1/namespaces/{ns}/outcomes/{rid}", http.StatusNotFound,
			map[attribute.Key]string{"relay.namespace": "acme", "relay.reservation_id": "r-9"}},
		{http.MethodPut, "/v1/namespaces/acme/endpoints/billing", "PUT /v1/namespaces/{ns}/endpoints/{id}", "/v1/namespaces/{ns}/endpoints/{id}", http.StatusCreated,
			map[attribute.Key]string{"relay.namespace": "acme", "relay.endpoint": "billing"}},
		{http.MethodPost, "/v1/namespaces/acme/endpoints/billing/outcomes/r-9/resend", "POST /v1/namespaces/{ns}/endpoints/{id}/outcomes/{rid}/resend",
			"/v1/namespaces/{ns}/endpoints/{id}/outcomes/{rid}/resend", http.StatusNotFound,
			map[attribute.Key]string{"relay.namespace": "acme", "relay.endpoint": "billing", "relay.reservation_id": "r-9"}},
		{http.MethodGet, "/v1/no/such/route", "GET", "", http.StatusNotFound, nil},
		{"BREW", "/v1/namespaces", "HTTP", "", http.StatusMethodNotAllowed, nil},
	} {
		exp.Reset()
		body := ""
		if c.method == http.MethodPut {
			body = `{"url": "https://billing.example.com/hooks"}`
		}
		if rec := h.send(c.method, c.path, admin, body); rec.Code != c.status {
			t.Fatalf("%s %s: %d %s", c.method, c.path, rec.Code, rec.Body)
		}
		s := spanNamed(t, exp, c.name)
		a := attrs(s)
		if got := a["http.route"].AsString(); got != c.route {
			t.Errorf("%s %s: http.route %q, want %q", c.method, c.path, got, c.route)
		}
		if got := a["url.path"].AsString(); got != c.path {
			t.Errorf("%s %s: url.path %q", c.method, c.path, got)
		}
		if got := a["http.response.status_code"].AsInt64(); got != int64(c.status) {
			t.Errorf("%s %s: status %d", c.method, c.path, got)
		}
		for k, v := range c.params {
			if got := a[k].AsString(); got != v {
				t.Errorf("%s %s: %s = %q, want %q", c.method, c.path, k, got, v)
			}
		}
		wantMethod := c.method
		if c.method == "BREW" {
			wantMethod = "_OTHER"
		}
		if got := a["http.request.method"].AsString(); got != wantMethod {
			t.Errorf("%s %s: http.request.method %q, want %q", c.method, c.path, got, wantMethod)
		}
	}
}

// The probes and the metrics scrape make no span.
func TestProbesAreNotTraced(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if rec := h.send(http.MethodGet, p, "", ""); rec.Code != http.StatusOK {
			t.Fatalf("%s: %d", p, rec.Code)
		}
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans of probes", n)
	}
}

// A 5xx, a panic answered as the internal problem included, marks its span
// an error; a 4xx does not, as the server did not fail.
func TestAServerErrorMarksItsSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	h := httpapi.Trace(tp)(httpapi.Recover(slog.New(slog.DiscardHandler))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("boom")
	})))
	if rec := call(h, http.MethodGet, "/v1/whatever"); rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d", rec.Code)
	}
	s := spanNamed(t, exp, "GET")
	if s.Status.Code != codes.Error || attrs(s)["error.type"].AsString() != "500" {
		t.Errorf("status %v, error.type %v", s.Status, attrs(s)["error.type"])
	}

	exp.Reset()
	h = httpapi.Trace(tp)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusConflict) }))
	call(h, http.MethodGet, "/v1/whatever")
	if s := spanNamed(t, exp, "GET"); s.Status.Code == codes.Error {
		t.Errorf("a 409 marks its span %v", s.Status)
	}
}

// No span attribute or event holds a secret or what a client sent beyond
// the method, path and Host: not the token, a header's value, the query,
// an endpoint's secret or a byte of the payload.
func TestSpansHoldNoSecret(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	admin := h.admin()
	tok := h.token("acme", httpapi.ScopeOutcomesWrite)
	put := `{"url": "https://billing.example.com/hooks", "scheme": "standard-webhooks", "secret": "` + endpointSecret + `", "headers": {"x-tenant": "` + headerValue + `"}}`
	want(t, h.send(http.MethodPut, "/v1/namespaces/acme/endpoints/billing?q="+querySecret, admin, put, "X-Custom", headerValue, "User-Agent", headerValue), http.StatusCreated, "")
	rid := "r-" + payloadMarker
	body := outcomeJSON(rid, "aborted")
	want(t, h.send(http.MethodPost, "/v1/namespaces/acme/outcomes?q="+querySecret, tok, body,
		"traceparent", traceparent, "X-Custom", headerValue, "User-Agent", headerValue, "X-Forwarded-For", headerValue), http.StatusAccepted, "")
	// A refused one too: problems say more.
	want(t, h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", tok, `{"reservation_id": "`+payloadMarker+`"}`), http.StatusBadRequest, httpapi.SlugInvalidOutcome)
	want(t, h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", "x"+tok, body), http.StatusUnauthorized, "")

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	secrets := []string{tok, admin, strings.SplitN(tok, ".", 3)[2], headerValue, querySecret, endpointSecret, payloadMarker, "ref_conflict", "main moved"}
	for _, s := range spans {
		var texts []string
		texts = append(texts, s.Name, s.Status.Description)
		for _, kv := range s.Attributes {
			texts = append(texts, string(kv.Key), kv.Value.String())
		}
		for _, e := range s.Events {
			texts = append(texts, e.Name)
			for _, kv := range e.Attributes {
				texts = append(texts, string(kv.Key), kv.Value.String())
			}
		}
		for _, text := range texts {
			for _, secret := range secrets {
				if strings.Contains(text, secret) {
					t.Errorf("span %q holds %.12q… in %q", s.Name, secret, text)
				}
			}
		}
	}
}

// The access log's line of a traced request names its trace and span.
func TestTheAccessLogNamesTheSpan(t *testing.T) {
	h, exp, logs := tracedHarness(t)
	want(t, h.send(http.MethodGet, "/v1/namespaces/acme/endpoints", h.admin(), "", "traceparent", traceparent), http.StatusOK, "")
	s := spanNamed(t, exp, "GET /v1/namespaces/{ns}/endpoints")
	var line map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if v["msg"] == "http request" {
			line = v
		}
	}
	if line == nil {
		t.Fatalf("no access log line:\n%s", logs)
	}
	if line["trace_id"] != producerTrace || line["span_id"] != s.SpanContext.SpanID().String() {
		t.Errorf("line %v, want trace_id %s and span_id %s", line, producerTrace, s.SpanContext.SpanID())
	}
}

// A producer's trace it chose not to sample is not sampled here either
// (the SDK's default sampler follows the parent), yet the log still names
// it.
func TestAnUnsampledTraceIsFollowed(t *testing.T) {
	h, exp, logs := tracedHarness(t)
	want(t, h.send(http.MethodGet, "/v1/namespaces/acme/endpoints", h.admin(), "", "traceparent", "00-"+producerTrace+"-"+producerSpan+"-00"), http.StatusOK, "")
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans of an unsampled trace", n)
	}
	if !strings.Contains(logs.String(), `"trace_id":"`+producerTrace+`"`) {
		t.Errorf("the log does not name the trace:\n%s", logs)
	}
}

// storedTrace is the trace parent of the outcome rid as the stream of
// endpoint reads it to deliver it.
func storedTrace(t *testing.T, h *harness, ns, endpoint, rid string) schema.TraceParent {
	t.Helper()
	p := store.Partition{Namespace: ns}
	for _, q := range outboxtest.Queue(t, h.st, p, endpoint) {
		if q.RID != rid {
			continue
		}
		rows, err := outbox.ReadStreamRows(context.Background(), h.st, p, endpoint, []outbox.StreamRef{{Seq: q.Seq, RID: rid, Logged: q.Logged}})
		if err != nil || rows[0].Err != nil {
			t.Fatalf("read %s: %v %v", rid, err, rows[0].Err)
		}
		return rows[0].Outcome.Trace
	}
	t.Fatalf("%s is not queued on %s", rid, endpoint)
	return schema.TraceParent{}
}

// Each outcome of a traced ingest keeps the ingest's server span as the
// parent of its attempts; with tracing off none is kept, whatever
// traceparent the producer sent.
func TestAnIngestKeepsItsSpanWithEachOutcome(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	rec := h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", h.token("acme", httpapi.ScopeOutcomesWrite),
		`{"outcomes": [`+outcomeJSON("r-1", "aborted")+`, `+outcomeJSON("r-2", "aborted")+`]}`, "traceparent", traceparent)
	want(t, rec, http.StatusAccepted, "")
	s := spanNamed(t, exp, "POST "+ingestRoute)
	wantParent := schema.TraceParent{TraceID: s.SpanContext.TraceID(), SpanID: s.SpanContext.SpanID(), Flags: 1}
	for _, rid := range []string{"r-1", "r-2"} {
		if got := storedTrace(t, h, "acme", "billing", rid); got != wantParent {
			t.Errorf("%s keeps %+v, want the ingest span %+v", rid, got, wantParent)
		}
	}

	forEachBackend(t, func(t *testing.T, h *harness) {
		h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
		rec := h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", h.token("acme", httpapi.ScopeOutcomesWrite), outcomeJSON("r-1", "aborted"),
			"traceparent", traceparent)
		want(t, rec, http.StatusAccepted, "")
		if got := storedTrace(t, h, "acme", "billing", "r-1"); got != (schema.TraceParent{}) {
			t.Errorf("untraced relay kept %+v", got)
		}
	})
}

// Concurrent requests to one namespace share store batches; each outcome
// still keeps its own request's span, never another's in the batch.
func TestConcurrentIngestsKeepEachTheirOwnSpan(t *testing.T) {
	h, exp, _ := tracedHarnessWith(t, apiOptions{coalesce: true})
	h.putEndpoint("acme", "billing", `{"url": "https://billing.example.com/hooks"}`)
	token := h.token("acme", httpapi.ScopeOutcomesWrite)
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tp := fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
			rec := h.send(http.MethodPost, "/v1/namespaces/acme/outcomes", token, outcomeJSON(fmt.Sprintf("r-%d", i), "aborted"), "traceparent", tp)
			if rec.Code != http.StatusAccepted {
				t.Errorf("post %d: %d %s", i, rec.Code, rec.Body)
			}
		}()
	}
	wg.Wait()
	// Each request's server span, by the producer's trace it continues.
	spans := map[trace.TraceID]trace.SpanID{}
	for _, s := range exp.GetSpans() {
		if s.Name == "POST "+ingestRoute {
			spans[s.SpanContext.TraceID()] = s.SpanContext.SpanID()
		}
	}
	for i := range n {
		got := storedTrace(t, h, "acme", "billing", fmt.Sprintf("r-%d", i))
		var want trace.TraceID
		want[15] = byte(i + 1)
		if got.TraceID != want || got.SpanID != spans[want] {
			t.Errorf("r-%d keeps trace %x span %x, want its own request's %x %x", i, got.TraceID, got.SpanID, want, spans[want])
		}
	}
}
