package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/hookrelay/relay/internal/outbox/outboxtest"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/redisstore/redistest"
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
	postTraced(t, p, token, outboxtest.Committed("traced"), "00-"+producerTrace+"-"+producerSpan+"-01")
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

// postTraced posts the outcome to acme as a producer in a trace would, its
// traceparent naming the producer's span.
func postTraced(t *testing.T, p *relaytest.Relay, token string, o schema.Outcome, traceparent string) {
	t.Helper()
	body, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, p.URL+"/v1/namespaces/acme/outcomes", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("post %s: %d", o.ReservationID, resp.StatusCode)
	}
}

// attemptSpans are the exported attempt spans of trace, by attempt number,
// and the trace's ingest span; it fails the test on an attempt numbered
// twice.
func attemptSpans(t *testing.T, spans []relaytest.ExportedSpan, trace string) (map[int64]relaytest.ExportedSpan, *relaytest.ExportedSpan) {
	t.Helper()
	attempts := map[int64]relaytest.ExportedSpan{}
	var ingest *relaytest.ExportedSpan
	for _, s := range spans {
		if hex.EncodeToString(s.Span.GetTraceId()) != trace {
			continue
		}
		switch s.Span.GetName() {
		case "POST /v1/namespaces/{ns}/outcomes":
			ingest = &s
		case "POST":
			n := relaytest.Attr(s.Span.GetAttributes(), "relay.attempt").GetIntValue()
			if _, twice := attempts[n]; twice {
				t.Errorf("attempt %d exported twice", n)
			}
			attempts[n] = s
		}
	}
	return attempts, ingest
}

// awaitOneDelivery waits until rc has taken one delivery.
func awaitOneDelivery(t *testing.T, rc *relaytest.Receiver, notify <-chan struct{}) {
	t.Helper()
	relaytest.Eventually(t, settle, notify, func() error {
		if n := rc.Deliveries(); n != 1 {
			return fmt.Errorf("%d deliveries after %d attempts", n, len(rc.Arrivals()))
		}
		return nil
	})
}

// tracedAttempts are the requests rc took, the attempt spans of trace and
// its ingest span, checked to be n of each with the ingest under the
// producer's span parent.
func tracedAttempts(t *testing.T, rc *relaytest.Receiver, collector *relaytest.OTLPReceiver, trace, parent string, n int) ([]relaytest.Arrival, map[int64]relaytest.ExportedSpan, *relaytest.ExportedSpan) {
	t.Helper()
	arrivals := rc.Arrivals()
	attempts, ingest := attemptSpans(t, collector.Spans(), trace)
	if ingest == nil || hex.EncodeToString(ingest.Span.GetParentSpanId()) != parent {
		t.Fatalf("no ingest span under the producer's span %s in the trace", parent)
	}
	if len(arrivals) != n || len(attempts) != n {
		t.Fatalf("%d requests and %d attempt spans, want %d of each", len(arrivals), len(attempts), n)
	}
	return arrivals, attempts, ingest
}

// checkAttempt checks one attempt's span against the request the receiver
// took: a client span, the child of the ingest's, the status the receiver
// answered, and the traceparent the receiver saw naming it.
func checkAttempt(t *testing.T, n int64, s relaytest.ExportedSpan, ingest *relaytest.ExportedSpan, arrival relaytest.Arrival) {
	t.Helper()
	if s.Span.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("attempt %d: kind %v", n, s.Span.GetKind())
	}
	if ingest != nil && !bytes.Equal(s.Span.GetParentSpanId(), ingest.Span.GetSpanId()) {
		t.Errorf("attempt %d: parent %x, want the ingest span %x", n, s.Span.GetParentSpanId(), ingest.Span.GetSpanId())
	}
	if got := relaytest.Attr(s.Span.GetAttributes(), "http.response.status_code").GetIntValue(); got != int64(arrival.Status) {
		t.Errorf("attempt %d: status %d, the receiver answered %d", n, got, arrival.Status)
	}
	want := "00-" + hex.EncodeToString(s.Span.GetTraceId()) + "-" + hex.EncodeToString(s.Span.GetSpanId()) + "-01"
	if arrival.TraceParent != want {
		t.Errorf("attempt %d: the receiver saw traceparent %q, want %q, naming the attempt's span", n, arrival.TraceParent, want)
	}
}

// One trace holds the producer's request and every attempt of its
// outcome: the ingest's server span, child of the producer's, and an
// attempt client span under it for each call, failed or not, with its
// number and status; each webhook's traceparent names its own attempt's
// span, so a receiver that traces continues the trace.
func TestEveryAttemptIsInTheProducersTrace(t *testing.T) {
	const (
		producerTrace = "5b8aa5a2d2c872e8321cf37308d69df2"
		producerSpan  = "051581bf3cb55c13"
	)
	collector := relaytest.NewOTLPReceiver(t, nil)
	p, token := startRelay(t, []string{"RELAY_REDIS_URL=", "OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL}, true)
	notify := make(chan struct{}, 1)
	rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "billing", Notify: notify, Script: func(_ string, n int) relaytest.Answer {
		if n < 2 {
			return relaytest.Answer{Status: http.StatusInternalServerError}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	p.Must(t, http.StatusCreated, http.MethodPut, "/v1/namespaces/acme/endpoints/billing", token, map[string]any{
		"url": rc.URL + "?token=" + querySecret, "scheme": "standard-webhooks", "secret": rc.Secret,
		"headers": map[string]string{"x-tenant-key": headerSecret},
	})
	o := outboxtest.Committed("traced")
	o.Repository = "acme/" + payloadMarker
	postTraced(t, p, token, o, "00-"+producerTrace+"-"+producerSpan+"-01")
	awaitOneDelivery(t, rc, notify)
	p.Stop()

	arrivals, attempts, ingest := tracedAttempts(t, rc, collector, producerTrace, producerSpan, 3)
	for i, a := range arrivals {
		n := int64(i + 1)
		s, ok := attempts[n]
		if !ok {
			t.Fatalf("no span of attempt %d", n)
		}
		checkAttempt(t, n, s, ingest, a)
	}
	// Each attempt links to its fire: the first in the main lane, the
	// retries of a failing stream in the slow lane.
	lanes := map[string]string{}
	for _, s := range collector.Spans() {
		if s.Span.GetName() == "delivery fire" {
			lanes[hex.EncodeToString(s.Span.GetSpanId())] = relaytest.Attr(s.Span.GetAttributes(), "relay.fire.lane").GetStringValue()
		}
	}
	for n, want := range map[int64]string{1: "main", 2: "slow", 3: "slow"} {
		links := attempts[n].Span.GetLinks()
		if len(links) != 1 || lanes[hex.EncodeToString(links[0].GetSpanId())] != want {
			t.Errorf("attempt %d: links %v, want one to a fire of the %s lane (fires: %v)", n, links, want, lanes)
		}
	}
	// The ingest's batch is a span of its own under the ingest's.
	batches := 0
	for _, s := range collector.Spans() {
		if s.Span.GetName() == "ingest batch" && bytes.Equal(s.Span.GetParentSpanId(), ingest.Span.GetSpanId()) &&
			relaytest.Attr(s.Span.GetAttributes(), "relay.batch.committed").GetBoolValue() {
			batches++
		}
	}
	if batches != 1 {
		t.Errorf("%d committed batch spans under the ingest's, want 1", batches)
	}
	// Nothing secret, and no byte of the payload, in any span.
	secrets := []string{rc.Secret, strings.TrimPrefix(rc.Secret, "whsec_"), querySecret, headerSecret, payloadMarker, token}
	for _, s := range collector.Spans() {
		seen := prototext.Format(s.Span) + prototext.Format(s.Resource)
		for _, secret := range secrets {
			if strings.Contains(seen, secret) {
				t.Errorf("span %q holds %q", s.Span.GetName(), secret)
			}
		}
	}
}

// What no span may hold.
const (
	querySecret   = "query-secret-31b0"
	headerSecret  = "header-value-7d1c"
	payloadMarker = "payload-marker-5e9a"
)

// Across processes: the first attempt is made by one relay, which is then
// killed with SIGKILL; the retry, made by another relay on the same Redis,
// is in the producer's trace too, as the child of the same ingest span,
// numbered after the first, and its webhook names its own span.
func TestARetryOnAnotherProcessIsInTheProducersTrace(t *testing.T) {
	const (
		producerTrace = "8a3c60f7d188f8fa79d48a391a778fa6"
		producerSpan  = "53995c3f42cd8ad8"
	)
	client := redistest.RealClient(t)
	prefix := redistest.Prefix(t, client)
	creds := relaytest.NewCredentials(t, "otel-e2e")
	exported := make(chan struct{}, 1)
	collector := relaytest.NewOTLPReceiver(t, exported)
	env := func(instance string) []string {
		return append(creds.Env(os.Getenv(redistest.EnvRedisURL)), "RELAY_REDIS_PREFIX="+prefix,
			"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_RESOURCE_ATTRIBUTES=service.instance.id="+instance,
			// Exported at once, so that the killed relay's spans are out
			// before the kill.
			"OTEL_BSP_SCHEDULE_DELAY=20",
			// The second relay finds the timer the first left without
			// waiting for a whole default poll.
			"RELAY_DELIVERY_FULL_POLL_EVERY=200ms")
	}
	first := relaytest.Start(t, relaytest.Config{Name: "first", Env: env("first")})
	notify := make(chan struct{}, 1)
	rc := relaytest.NewReceiver(t, relaytest.ReceiverConfig{Name: "billing", Notify: notify, Script: func(_ string, n int) relaytest.Answer {
		if n == 0 {
			return relaytest.Answer{Status: http.StatusServiceUnavailable}
		}
		return relaytest.Answer{Status: http.StatusNoContent}
	}})
	first.Must(t, http.StatusCreated, http.MethodPut, "/v1/namespaces/acme/endpoints/billing", creds.Token,
		map[string]any{"url": rc.URL, "scheme": "standard-webhooks", "secret": rc.Secret})
	postTraced(t, first, creds.Token, outboxtest.Committed("traced"), "00-"+producerTrace+"-"+producerSpan+"-01")

	// The first attempt is exported, and its fire's completion recorded
	// it (so no lease is left to wait out): then the kill.
	relaytest.Eventually(t, settle, exported, func() error {
		if attempts, _ := attemptSpans(t, collector.Spans(), producerTrace); len(attempts) != 1 {
			return fmt.Errorf("%d attempt spans exported, want the first", len(attempts))
		}
		return nil
	})
	relaytest.Eventually(t, settle, nil, func() error {
		_, view := first.Call(t, http.MethodGet, "/v1/namespaces/acme/outcomes/traced", creds.Token, nil)
		eps, _ := view["endpoints"].([]any)
		if len(eps) == 1 {
			if n, _ := eps[0].(map[string]any)["attempt_count"].(float64); n == 1 {
				return nil
			}
		}
		return fmt.Errorf("the first attempt is not recorded: %v", view)
	})
	first.Kill()

	second := relaytest.Start(t, relaytest.Config{Name: "second", Env: env("second")})
	awaitOneDelivery(t, rc, notify)
	second.Stop()

	arrivals, attempts, ingest := tracedAttempts(t, rc, collector, producerTrace, producerSpan, 2)
	for i, instance := range []string{"first", "second"} {
		n := int64(i + 1)
		s := attempts[n]
		checkAttempt(t, n, s, ingest, arrivals[i])
		if got := relaytest.Attr(s.Resource.GetAttributes(), "service.instance.id").GetStringValue(); got != instance {
			t.Errorf("attempt %d made by %q, want the %s relay", n, got, instance)
		}
	}
}
