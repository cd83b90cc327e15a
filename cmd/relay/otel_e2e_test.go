package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/relaytest"
)

// The binary, given an OTLP endpoint, exports the ingest's server span to
// it as protobuf over HTTP: a child of the producer's span, named by the
// traceparent it sent, in the producer's trace. It exports on a clean stop
// at the latest; the wait is the process's exit.
func TestTheIngestSpanReachesTheCollector(t *testing.T) {
	const (
		producerTrace = "0af7651916cd43dd8448eb211c80319c"
		producerSpan  = "b7ad6b7169203331"
	)
	collector := relaytest.NewOTLPReceiver(t, nil)
	p, token := startRelay(t, []string{"RELAY_REDIS_URL=", "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_SERVICE_NAME=relay-e2e"}, true)
	rc := startReceiver(t, p.URL)
	if code, v := p.Call(t, http.MethodPut, "/v1/namespaces/acme/endpoints/mkit", token, map[string]any{"url": rc.URL + "/mkit"}); code != http.StatusCreated {
		t.Fatalf("put endpoint: %d %v", code, v)
	}
	body, err := json.Marshal(outboxtest.Committed("traced"))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, p.URL+"/v1/namespaces/acme/outcomes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", "00-"+producerTrace+"-"+producerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post: %d", resp.StatusCode)
	}
	rc.await(t, map[string]bool{"mkit-hook-v2 traced": true})
	p.Stop()

	var ingest []relaytest.ExportedSpan
	for _, s := range collector.Spans() {
		if s.Span.GetName() == "POST /v1/namespaces/{ns}/outcomes" {
			ingest = append(ingest, s)
		}
	}
	if len(ingest) != 1 {
		t.Fatalf("%d ingest spans exported, want 1; all: %v", len(ingest), collector.Spans())
	}
	s := ingest[0]
	if got := hex.EncodeToString(s.Span.GetTraceId()); got != producerTrace {
		t.Errorf("trace %s, want the producer's %s", got, producerTrace)
	}
	if got := hex.EncodeToString(s.Span.GetParentSpanId()); got != producerSpan {
		t.Errorf("parent span %s, want the producer's %s", got, producerSpan)
	}
	if s.Span.GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("kind %v", s.Span.GetKind())
	}
	attrs := s.Span.GetAttributes()
	if got := relaytest.Attr(attrs, "http.route").GetStringValue(); got != "/v1/namespaces/{ns}/outcomes" {
		t.Errorf("http.route %q", got)
	}
	if got := relaytest.Attr(attrs, "http.response.status_code").GetIntValue(); got != http.StatusAccepted {
		t.Errorf("http.response.status_code %d", got)
	}
	if got := relaytest.Attr(attrs, "relay.outcomes.accepted").GetIntValue(); got != 1 {
		t.Errorf("relay.outcomes.accepted %d", got)
	}
	if got := relaytest.Attr(s.Resource.GetAttributes(), "service.name").GetStringValue(); got != "relay-e2e" {
		t.Errorf("service.name %q", got)
	}
	if relaytest.Attr(s.Resource.GetAttributes(), "service.version").GetStringValue() == "" {
		t.Error("no service.version")
	}
	// The process's log names the trace on the request's line.
	for _, line := range strings.Split(p.Log(), "\n") {
		if strings.Contains(line, `msg="http request"`) && strings.Contains(line, "route=/v1/namespaces/{ns}/outcomes") && strings.Contains(line, "method=POST") {
			if !strings.Contains(line, "trace_id="+producerTrace) {
				t.Errorf("the ingest's log line names no trace: %s", line)
			}
			return
		}
	}
	t.Error("no log line of the ingest")
}
