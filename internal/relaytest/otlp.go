package relaytest

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TracesPath is where an OTLP/HTTP exporter posts traces, below the
// endpoint OTEL_EXPORTER_OTLP_ENDPOINT names.
const TracesPath = "/v1/traces"

// OTLPReceiver is an OpenTelemetry collector's OTLP/HTTP traces receiver
// in little: it decodes each export as the protobuf it is, keeps its spans
// and answers success. The test's cleanup closes it.
type OTLPReceiver struct {
	// URL is its endpoint, for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	t      testing.TB
	notify chan<- struct{}
	mu     sync.Mutex
	spans  []ExportedSpan
}

// ExportedSpan is one span received, with the resource it came with.
type ExportedSpan struct {
	Resource *resourcepb.Resource
	Span     *tracepb.Span
}

// NewOTLPReceiver starts a receiver; notify (buffered, optional) hears of
// every export, without blocking it.
func NewOTLPReceiver(t testing.TB, notify chan<- struct{}) *OTLPReceiver {
	t.Helper()
	o := &OTLPReceiver{t: t, notify: notify}
	srv := httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

func (o *OTLPReceiver) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != TracesPath {
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		o.t.Errorf("OTLP export of content type %q, want application/x-protobuf", ct)
		http.Error(w, "protobuf only", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &req); err != nil {
		o.t.Errorf("OTLP export does not decode: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, ExportedSpan{Resource: rs.GetResource(), Span: s})
			}
		}
	}
	o.mu.Unlock()
	answer, err := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(answer)
	if o.notify != nil {
		select {
		case o.notify <- struct{}{}:
		default:
		}
	}
}

// Spans is every span received so far, in the order received.
func (o *OTLPReceiver) Spans() []ExportedSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]ExportedSpan(nil), o.spans...)
}

// Attr is the value of the attribute key among kvs, nil when absent.
func Attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}
