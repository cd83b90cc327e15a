package httpapi

import (
	"net"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the instrumentation: this package.
const tracerName = "github.com/hookrelay/relay/internal/httpapi"

// The attributes of the ingest span that are relay's own.
const (
	attrNamespace = attribute.Key("relay.namespace")
	attrOutcomes  = attribute.Key("relay.outcomes")
	attrAccepted  = attribute.Key("relay.outcomes.accepted")
	attrDuplicate = attribute.Key("relay.outcomes.duplicate")
	attrConflict  = attribute.Key("relay.outcomes.conflict")
)

// Trace makes each request a server span of tp, a child of the trace that
// its W3C traceparent and tracestate headers name, or the root of a new
// one. The span follows OpenTelemetry's HTTP conventions: named for the
// method and chi's route pattern (never the raw path, whose ids would make
// every name new), with the method, route, status, scheme, server address
// and port, and the path without its query. It records no header value but
// the Host's, and no query, token or body: those may carry secrets. The
// probes and the metrics scrape are not traced: they would bury the API's
// spans. Put it inside AssignRequestID and outside AccessLog, so that the
// access log's line names the span.
func Trace(tp trace.TracerProvider) func(http.Handler) http.Handler {
	tracer := tp.Tracer(tracerName)
	var prop propagation.TraceContext
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				next.ServeHTTP(w, r)
				return
			}
			method := spanMethod(r.Method)
			attrs := make([]attribute.KeyValue, 0, 7)
			attrs = append(attrs,
				method,
				semconv.URLPath(clip(r.URL.Path, maxLoggedPath)),
				semconv.URLScheme(scheme(r)),
			)
			host, port := serverAddress(r.Host)
			if host != "" {
				attrs = append(attrs, semconv.ServerAddress(clip(host, maxLoggedText)))
			}
			if port > 0 {
				attrs = append(attrs, semconv.ServerPort(port))
			}
			if v := protocolVersion(r); v != "" {
				attrs = append(attrs, semconv.NetworkProtocolVersion(v))
			}
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, spanName(method, ""), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
			if !span.IsRecording() {
				// Not sampled: the context still names the trace, for the
				// log, and nothing more is said of a span nobody keeps.
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
			rec := record(w)
			aborted := true
			defer func() {
				// Routed by now: chi has filled in the pattern.
				if route := routePattern(r); route != "" {
					span.SetName(spanName(method, route))
					span.SetAttributes(semconv.HTTPRoute(route))
					setParams(span, r)
				}
				status := rec.status
				if status == 0 && !aborted {
					status = http.StatusOK // net/http's implicit answer
				}
				switch {
				case status == 0:
					span.SetAttributes(semconv.ErrorTypeKey.String("aborted"))
					span.SetStatus(codes.Error, "aborted")
				case status >= 500:
					span.SetAttributes(semconv.HTTPResponseStatusCode(status), semconv.ErrorTypeKey.String(strconv.Itoa(status)))
					span.SetStatus(codes.Error, "")
				default:
					span.SetAttributes(semconv.HTTPResponseStatusCode(status))
				}
				span.End()
			}()
			next.ServeHTTP(rec, r.WithContext(ctx))
			aborted = false
		})
	}
}

// paramAttrs name the route parameters a span records: what the request
// is about (a resend's outcome and endpoint, say), which the route, having
// none of them, does not say.
var paramAttrs = map[string]attribute.Key{
	"ns":  attrNamespace,
	"id":  attribute.Key("relay.endpoint"),
	"rid": attribute.Key("relay.reservation_id"),
	"job": attribute.Key("relay.recovery.job"),
}

// setParams records the request's route parameters on its span.
func setParams(span trace.Span, r *http.Request) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return
	}
	for i, k := range rctx.URLParams.Keys {
		if key, ok := paramAttrs[k]; ok && i < len(rctx.URLParams.Values) {
			span.SetAttributes(key.String(clip(rctx.URLParams.Values[i], maxLoggedText)))
		}
	}
}

// spanMethod is http.request.method: one of the methods HTTP defines, or
// _OTHER, so that whatever a client sends does not become a span name.
func spanMethod(m string) attribute.KeyValue {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return semconv.HTTPRequestMethodKey.String(m)
	}
	return semconv.HTTPRequestMethodOther
}

// spanName is "{method} {route}", "{method}" before routing, and "HTTP"
// for a method of no name.
func spanName(method attribute.KeyValue, route string) string {
	m := method.Value.AsString()
	if m == "_OTHER" {
		m = "HTTP"
	}
	if route == "" {
		return m
	}
	return m + " " + route
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// serverAddress splits the Host the client addressed into name and port;
// the port is 0 when it names none.
func serverAddress(hostport string) (string, int) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, 0
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return host, 0
	}
	return host, port
}

// protocolVersion is network.protocol.version: 1.0, 1.1, 2 or 3.
func protocolVersion(r *http.Request) string {
	switch {
	case r.ProtoMajor == 1 && r.ProtoMinor == 1:
		return "1.1"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "1.0"
	case r.ProtoMajor == 2 || r.ProtoMajor == 3:
		return strconv.Itoa(r.ProtoMajor)
	}
	return ""
}
