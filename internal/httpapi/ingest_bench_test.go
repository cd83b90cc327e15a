package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookrelay/relay/internal/httpapi"
	"github.com/hookrelay/relay/internal/outbox"
	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/store"
)

// acceptAll accepts every outcome at once, so a benchmark sees the API's
// own cost.
type acceptAll struct{}

func (acceptAll) Append(_ context.Context, _ store.Partition, outcomes []schema.Outcome) ([]outbox.Status, error) {
	st := make([]outbox.Status, len(outcomes))
	for i := range st {
		st[i] = outbox.Status{Code: outbox.Accepted, Seq: uint64(i + 1)}
	}
	return st, nil
}

// BenchmarkPostOneOutcome is what the API spends on a single-outcome POST
// around the outbox: routing, auth, strict decoding, metrics and the 202
// (the access log off, as at level warn).
func BenchmarkPostOneOutcome(b *testing.B) { postOneOutcome(b, nil) }

// BenchmarkPostOneOutcomeTraced is the same POST with tracing on: each
// request a sampled span, continuing a producer's traceparent, handed to a
// processor that keeps nothing, so that only the spans' making counts.
func BenchmarkPostOneOutcomeTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	postOneOutcome(b, tp)
}

func postOneOutcome(b *testing.B, tp trace.TracerProvider) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	auth, err := httpapi.NewAuth(httpapi.AuthConfig{Audience: apiAudience, HS256Secret: testSecret, Now: func() time.Time { return now }})
	if err != nil {
		b.Fatal(err)
	}
	metrics, err := httpapi.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	h, err := httpapi.New(httpapi.Config{
		Appender: acceptAll{},
		Admin:    &outbox.Admin{},
		Auth:     auth,
		Ingested: func(store.Partition, []outbox.StreamRef, bool) {},
		Metrics:  metrics,
		// Nil: not traced, as with no OTLP endpoint.
		TracerProvider: tp,
	})
	if err != nil {
		b.Fatal(err)
	}
	tok, err := httpapi.MintHS256(testSecret, apiAudience, "", httpapi.Principal{Subject: "bench", Scopes: []httpapi.Scope{httpapi.ScopeOutcomesWrite}, Namespace: "acme"}, time.Hour, now)
	if err != nil {
		b.Fatal(err)
	}
	body := outcomeJSON("r-7f3a", "aborted")
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/namespaces/acme/outcomes", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok)
		if tp != nil {
			req.Header.Set("traceparent", traceparent)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusAccepted {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}
