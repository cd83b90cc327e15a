package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus metrics. Labels are routes, methods and
// statuses, never namespaces: a tenant count must not become a series
// count. Every label value comes from a fixed set, never from the client as
// sent: a made-up method would otherwise add a series, and its bytes, for
// good.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	outcomes *prometheus.CounterVec
	conns    prometheus.Gauge
	refused  prometheus.Counter
}

// NewMetrics registers the API's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_http_requests_total",
			Help: "API requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "relay_http_request_duration_seconds",
			Help:    "Time to answer an API request, by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_outcomes_total",
			Help: "Outcomes answered by ingest, by status: accepted, duplicate, conflict, no_endpoint.",
		}, []string{"status"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_http_connections_open",
			Help: "API connections open now, within the connection limit.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_http_connections_refused_total",
			Help: "API connections answered 503 and closed because the connection limit was reached.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.outcomes, m.conns, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// instrument counts and times each request under its route pattern, known
// once routing is done; an unrouted request counts as "unmatched".
func (m *Metrics) instrument(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := record(w)
		next.ServeHTTP(rec, r)
		route := routePattern(r)
		if route == "" {
			route = "unmatched"
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		m.requests.WithLabelValues(route, methodLabel(r.Method), strconv.Itoa(status)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

// methodLabel is the method as a label value: one of RFC 9110's methods,
// else "other".
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

func (m *Metrics) connOpened() {
	if m != nil {
		m.conns.Inc()
	}
}

func (m *Metrics) connClosed() {
	if m != nil {
		m.conns.Dec()
	}
}

func (m *Metrics) connRefused() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *Metrics) outcome(status string) {
	if m != nil {
		m.outcomes.WithLabelValues(status).Inc()
	}
}
