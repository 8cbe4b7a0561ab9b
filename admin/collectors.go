package admin

import (
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// series is one metric a collector reads at scrape time.
type series struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
}

func newSeries(name, help string, kind prometheus.ValueType, labels ...string) series {
	return series{prometheus.NewDesc(name, help, labels, nil), kind}
}

func (s series) emit(ch chan<- prometheus.Metric, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(s.desc, s.kind, v, labels...)
}

func describe(ch chan<- *prometheus.Desc, ss ...series) {
	for _, s := range ss {
		ch <- s.desc
	}
}

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// The series of rules, labelled with the rule's file name and its kind.
var (
	ruleHandled   = newSeries("ssrun_rule_events_handled_total", "Events the rule handled successfully.", counter, "rule", "kind")
	ruleFailed    = newSeries("ssrun_rule_events_failed_total", "Handler calls that failed (error, timeout, memory, crash).", counter, "rule", "kind")
	ruleDropped   = newSeries("ssrun_rule_events_dropped_total", "Events dropped: mailbox full, or rule disabled.", counter, "rule", "kind")
	ruleEchoes    = newSeries("ssrun_rule_echoes_suppressed_total", "Events skipped as echoes of the rule's own writes.", counter, "rule", "kind")
	ruleAbandoned = newSeries("ssrun_rule_calls_abandoned_total", "Handler calls given up on as stuck (also counted as failed).", counter, "rule", "kind")
	ruleQueued    = newSeries("ssrun_rule_mailbox_depth", "Events waiting in the rule's mailbox.", gauge, "rule", "kind")
	ruleDisabled  = newSeries("ssrun_rule_disabled", "1 while the rule is disabled after repeated failures.", gauge, "rule", "kind")
	ruleTimers    = newSeries("ssrun_rule_timers_pending", "Timers the rule has armed.", gauge, "rule", "kind")

	hostRules      = newSeries("ssrun_host_rules_loaded", "Rules running.", gauge)
	hostLoadFailed = newSeries("ssrun_host_rules_load_failed", "Rule files whose load failed and of which no version runs.", gauge)
	hostNotified   = newSeries("ssrun_host_notifications_total", "Key change notifications the host routed to rules.", counter)
	hostDamped     = newSeries("ssrun_host_loops_damped_total", "Events dropped by the feedback-loop damper.", counter)
	hostResyncs    = newSeries("ssrun_host_resyncs_total", "Resync events delivered after reconnections.", counter)
	hostWatched    = newSeries("ssrun_host_watched_keys", "Keys registered for notifications with the store.", gauge)
	hostStuck      = newSeries("ssrun_host_stuck_calls", "Runtime calls abandoned as stuck and still running.", gauge)
)

// hostCollector reads a host's Status and Stats at each scrape.
type hostCollector struct{ h *host.Host }

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, ruleHandled, ruleFailed, ruleDropped, ruleEchoes, ruleAbandoned, ruleQueued, ruleDisabled, ruleTimers,
		hostRules, hostLoadFailed, hostNotified, hostDamped, hostResyncs, hostWatched, hostStuck)
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	rules := c.h.Status()
	names := ruleLabels(rules)
	for i, s := range rules {
		l := []string{names[i], s.Kind}
		ruleHandled.emit(ch, float64(s.Handled), l...)
		ruleFailed.emit(ch, float64(s.Failed), l...)
		ruleDropped.emit(ch, float64(s.Dropped), l...)
		ruleEchoes.emit(ch, float64(s.Echoes), l...)
		ruleAbandoned.emit(ch, float64(s.Abandoned), l...)
		ruleQueued.emit(ch, float64(s.Queued), l...)
		ruleDisabled.emit(ch, bool01(s.Disabled), l...)
		ruleTimers.emit(ch, float64(s.Timers), l...)
	}
	st := c.h.Stats()
	hostRules.emit(ch, float64(len(rules)))
	hostLoadFailed.emit(ch, float64(st.LoadFailed))
	hostNotified.emit(ch, float64(st.Notifications))
	hostDamped.emit(ch, float64(st.LoopsDamped))
	hostResyncs.emit(ch, float64(st.Resyncs))
	hostWatched.emit(ch, float64(st.WatchedKeys))
	hostStuck.emit(ch, float64(st.Stuck))
}

// ruleLabels names each rule by its file name, as the logs and the handler
// histogram do; two rules of one name (a plugin named in ssrun.yaml outside
// the folder) keep their paths, so no two series collide.
func ruleLabels(rules []host.RuleStatus) []string {
	seen := map[string]int{}
	for _, s := range rules {
		seen[filepath.Base(s.Path)]++
	}
	out := make([]string, len(rules))
	for i, s := range rules {
		out[i] = filepath.Base(s.Path)
		if seen[out[i]] > 1 {
			out[i] = s.Path
		}
	}
	return out
}

// The series of the store client.
var (
	storeConnected     = newSeries("ssrun_store_connected", "1 while connected to the state store (and subscribed: calls can be made).", gauge)
	storeReconnects    = newSeries("ssrun_store_reconnects_total", "Connections to the store after the first.", counter)
	storeNotifications = newSeries("ssrun_store_notifications_total", "Valid key notifications received.", counter)
	storeEventsDropped = newSeries("ssrun_store_events_dropped_total", "Notifications dropped because the client's event queue was full.", counter)
	storePending       = newSeries("ssrun_store_requests_pending", "Requests waiting for their response.", gauge)
)

// clientCollector reads a store client's Stats at each scrape.
type clientCollector struct{ c *protocol.Client }

func (c *clientCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, storeConnected, storeReconnects, storeNotifications, storeEventsDropped, storePending)
}

func (c *clientCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.c.Stats()
	storeConnected.emit(ch, bool01(c.c.Connected()))
	storeReconnects.emit(ch, float64(st.Reconnects))
	storeNotifications.emit(ch, float64(st.Notifications))
	storeEventsDropped.emit(ch, float64(st.EventsDropped))
	storePending.emit(ch, float64(st.Pending))
}

// The series of the embedded broker.
var (
	brokerConnections   = newSeries("ssrun_broker_connections", "MQTT clients connected now.", gauge)
	brokerKeys          = newSeries("ssrun_broker_keys", "Keys in the state store (expired ones not yet reaped included).", gauge)
	brokerBytes         = newSeries("ssrun_broker_bytes", "Size of the stored data as --max-bytes counts it.", gauge)
	brokerRegistrations = newSeries("ssrun_broker_keynotify_registrations", "KEYNOTIFY registrations.", gauge)
	brokerQueued        = newSeries("ssrun_broker_notifications_queued_total", "Key notifications queued for delivery to clients.", counter)
	brokerDropped       = newSeries("ssrun_broker_notifications_dropped_total", "Messages to clients that could not be delivered (connection gone, write failed).", counter)
	brokerOverflows     = newSeries("ssrun_broker_client_queue_overflows_total", "Clients disconnected because their output queue overflowed.", counter)
)

// brokerCollector reads a broker's Stats at each scrape.
type brokerCollector struct{ b *broker.Broker }

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, brokerConnections, brokerKeys, brokerBytes, brokerRegistrations, brokerQueued, brokerDropped, brokerOverflows)
}

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Stats()
	brokerConnections.emit(ch, float64(st.Connections))
	brokerKeys.emit(ch, float64(st.Keys))
	brokerBytes.emit(ch, float64(st.Bytes))
	brokerRegistrations.emit(ch, float64(st.Registrations))
	brokerQueued.emit(ch, float64(st.NotifyQueued))
	brokerDropped.emit(ch, float64(st.NotifyDropped))
	brokerOverflows.emit(ch, float64(st.QueueOverflows))
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
