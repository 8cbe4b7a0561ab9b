package admin

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// Metrics is the process's Prometheus registry (private: nothing registers
// in the global one) with the Go runtime and process collectors, and the
// ssrun series listed in the package documentation. Counters and gauges
// are read from the host, client and broker at each scrape; only the two
// latency histograms are fed per event, through the observers (ObserveHandle
// for host.Config.Observer, ObserveRequest for protocol.Config.Observer).
type Metrics struct {
	reg      *prometheus.Registry
	handler  *prometheus.HistogramVec
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// Handler latency buckets: from a native call (microseconds) to a call at
// its default 5 s timeout.
var handlerBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics builds the registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ssrun_rule_handler_seconds",
			Help:    "Duration of the rule's handler calls that returned (failed ones included).",
			Buckets: handlerBuckets,
		}, []string{"rule"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ssrun_store_requests_total",
			Help: "State store requests by command and outcome (ok, service_error, timeout, not_connected, connection_lost, canceled, too_large, error).",
		}, []string{"command", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ssrun_store_request_seconds",
			Help:    "Duration of state store requests, from the call to the response or failure.",
			Buckets: handlerBuckets,
		}, []string{"command"}),
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.handler, m.requests, m.latency,
	)
	return m
}

// Handler serves the registry in the Prometheus text format (or
// OpenMetrics when asked for).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveHandle implements host.Observer.
func (m *Metrics) ObserveHandle(rule string, took time.Duration, _ bool) {
	m.handler.WithLabelValues(rule).Observe(took.Seconds())
}

// ObserveRequest implements protocol.Observer.
func (m *Metrics) ObserveRequest(cmd string, outcome protocol.Outcome, took time.Duration) {
	m.requests.WithLabelValues(cmd, string(outcome)).Inc()
	m.latency.WithLabelValues(cmd).Observe(took.Seconds())
}

// WatchHost adds the series of h's rules and h's own counters, read at
// each scrape.
func (m *Metrics) WatchHost(h *host.Host) { m.reg.MustRegister(&hostCollector{h: h}) }

// WatchClient adds the series of the store client c: connected,
// reconnects, notifications.
func (m *Metrics) WatchClient(c *protocol.Client) { m.reg.MustRegister(&clientCollector{c: c}) }

// WatchBroker adds the series of the embedded broker b.
func (m *Metrics) WatchBroker(b *broker.Broker) { m.reg.MustRegister(&brokerCollector{b: b}) }

var (
	_ host.Observer     = (*Metrics)(nil)
	_ protocol.Observer = (*Metrics)(nil)
)
