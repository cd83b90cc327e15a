package delivery

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookrelay/relay/internal/outbox/schema"
	"github.com/hookrelay/relay/internal/timers"
)

// Metrics are the delivery counters. None carries a namespace or endpoint
// label: their number is unbounded, and per-stream state is what the outbox
// view is for. A nil *Metrics records nothing.
type Metrics struct {
	deliveries   *prometheus.CounterVec
	latency      prometheus.Histogram
	fires        *prometheus.CounterVec
	synthetics   prometheus.Counter
	due          prometheus.Gauge
	takeovers    prometheus.Counter
	lanes        *prometheus.GaugeVec
	slowedFires  prometheus.Counter
	stalledFires prometheus.Counter
	events       *prometheus.CounterVec
}

// Delivery results, the values of relay_deliveries_total's result label.
const (
	ResultDelivered = "delivered"
	ResultFailed    = "failed"
	ResultTimeout   = "timeout"
	ResultGone      = "gone"
	// ResultStopped: the call was cut because the fire was stopped (the
	// driver stopping, or the fire's lease running out).
	ResultStopped = "stopped"
)

// NewMetrics registers the delivery metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_deliveries_total",
			Help: "Webhook calls by result: delivered, failed, timeout, gone, stopped.",
		}, []string{"result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "relay_delivery_duration_seconds",
			Help:    "Duration of one webhook call, whatever its result.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_timer_fires_total",
			Help: "Timer fires by how they ended: done, rescheduled, replanned, lease_lost, deferred, refused.",
		}, []string{"outcome"}),
		synthetics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_synthetic_acks_total",
			Help: "Synthetic outcomes acknowledged without a call.",
		}),
		due: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "relay_streams_due",
			Help: "Timers found due by the driver's last read of every due index.",
		}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_lease_takeovers_total",
			Help: "Timers claimed after another claim's lease expired.",
		}),
		lanes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "relay_fires_in_flight",
			Help: "Timer fires holding a worker, by lane: main, slow.",
		}, []string{"lane"}),
		slowedFires: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_fires_slowed_total",
			Help: "Fires that outlasted the slow-lane threshold in the main lane.",
		}),
		stalledFires: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "relay_fires_stalled_total",
			Help: "Fires that sent nothing because the stream's backlog row counts beyond what the store can reduce; the row needs repair.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "relay_endpoint_events_total",
			Help: "Operator events emitted about endpoints, by type: endpoint.disabled, endpoint.failing, endpoint.recovered, endpoint.gone.",
		}, []string{"type"}),
	}
	for _, c := range []prometheus.Collector{m.deliveries, m.latency, m.fires, m.synthetics, m.due, m.takeovers, m.lanes, m.slowedFires, m.stalledFires, m.events} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("register delivery metrics"), err)
		}
	}
	// Every label value exists from the start, so rates work from zero.
	for _, r := range []string{ResultDelivered, ResultFailed, ResultTimeout, ResultGone, ResultStopped} {
		m.deliveries.WithLabelValues(r)
	}
	for _, o := range []string{"done", "rescheduled", "replanned", "lease_lost", "deferred", "refused"} {
		m.fires.WithLabelValues(o)
	}
	for _, t := range schema.EventTypes() {
		m.events.WithLabelValues(string(t))
	}
	m.inFlight(0, 0)
	return m, nil
}

func (m *Metrics) observeCall(res result, stopped bool) {
	if m == nil {
		return
	}
	m.latency.Observe(res.took.Seconds())
	r := ResultDelivered
	switch {
	case res.err == nil:
	case stopped:
		r = ResultStopped
	case res.timedOut:
		r = ResultTimeout
	case failure(res.err).Gone:
		r = ResultGone
	default:
		r = ResultFailed
	}
	m.deliveries.WithLabelValues(r).Inc()
}

func (m *Metrics) synthetic() {
	if m != nil {
		m.synthetics.Inc()
	}
}

func (m *Metrics) streamsDue(n int) {
	if m != nil {
		m.due.Set(float64(n))
	}
}

func (m *Metrics) report(r timers.Report) {
	if m == nil {
		return
	}
	m.fires.WithLabelValues("done").Add(float64(r.Done))
	m.fires.WithLabelValues("rescheduled").Add(float64(r.Rescheduled))
	m.fires.WithLabelValues("replanned").Add(float64(r.Replanned))
	m.fires.WithLabelValues("lease_lost").Add(float64(r.LeaseLost))
	m.fires.WithLabelValues("deferred").Add(float64(r.Deferred))
	m.fires.WithLabelValues("refused").Add(float64(r.Refused))
	m.takeovers.Add(float64(r.TakenOver))
}

func (m *Metrics) inFlight(main, slow int) {
	if m != nil {
		m.lanes.WithLabelValues("main").Set(float64(main))
		m.lanes.WithLabelValues("slow").Set(float64(slow))
	}
}

func (m *Metrics) slowed() {
	if m != nil {
		m.slowedFires.Inc()
	}
}

func (m *Metrics) stalled() {
	if m != nil {
		m.stalledFires.Inc()
	}
}

func (m *Metrics) event(t schema.EventType) {
	if m != nil {
		m.events.WithLabelValues(string(t)).Inc()
	}
}
