package app

import (
	"bytes"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hookrelay/relay/internal/buildinfo"
	"github.com/hookrelay/relay/internal/relaytest"
)

// Without an OTLP endpoint relay traces nothing: no exporter, and the API
// has no tracing layer.
func TestTracingIsOffWithoutAnEndpoint(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	c := Defaults()
	c.Logger = slog.New(slog.DiscardHandler)
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.tracing.On() {
		t.Error("tracing is on without an endpoint")
	}
}

// With an endpoint, the spans of the requests served are exported by Stop
// at the latest, with relay's version as service.version, and the access
// log's line names the trace.
func TestStopExportsTheSpansOfTheRequestsServed(t *testing.T) {
	const producerTrace = "5b8efff798038103d269b633813fc60c"
	collector := relaytest.NewOTLPReceiver(t, nil)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	var logs bytes.Buffer
	c := Defaults()
	c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	a, err := New(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "/v1/namespaces", nil)
	req.Header.Set("Authorization", "Bearer "+a.DevToken())
	req.Header.Set("traceparent", "00-"+producerTrace+"-eee19b7ec3c1b174-01")
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/namespaces: %d %s", rec.Code, rec.Body)
	}
	if err := a.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, s := range collector.Spans() {
		if s.Span.GetName() != "GET /v1/namespaces" {
			continue
		}
		found = true
		if got := hex.EncodeToString(s.Span.GetTraceId()); got != producerTrace {
			t.Errorf("trace %s, want %s", got, producerTrace)
		}
		res := s.Resource.GetAttributes()
		if got := relaytest.Attr(res, "service.name").GetStringValue(); got != "relay" {
			t.Errorf("service.name %q", got)
		}
		if got := relaytest.Attr(res, "service.version").GetStringValue(); got != buildinfo.Read().Version {
			t.Errorf("service.version %q, want %q", got, buildinfo.Read().Version)
		}
	}
	if !found {
		t.Fatalf("no span of the request exported: %v", collector.Spans())
	}
	if !strings.Contains(logs.String(), `"trace_id":"`+producerTrace+`"`) {
		t.Errorf("the log names no trace:\n%s", logs.String())
	}
}
