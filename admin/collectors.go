package admin

import (
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

const (
	counter = prometheus.CounterValue
	gauge   = prometheus.GaugeValue
)

// stat is one series a collector reads at scrape time from a snapshot S
// (a RuleStatus, a Stats).
type stat[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
}

func newStat[S any](name, help string, kind prometheus.ValueType, labels []string, value func(S) float64) stat[S] {
	return stat[S]{prometheus.NewDesc(name, help, labels, nil), kind, value}
}

// stats is a table of series read from one snapshot.
type stats[S any] []stat[S]

func (t stats[S]) describe(ch chan<- *prometheus.Desc) {
	for _, s := range t {
		ch <- s.desc
	}
}

func (t stats[S]) emit(ch chan<- prometheus.Metric, snap S, labels ...string) {
	for _, s := range t {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(snap), labels...)
	}
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The series of rules, labelled with the rule's file name and its kind.
var ruleStats = func() stats[host.RuleStatus] {
	l := []string{"rule", "kind"}
	s := func(name, help string, kind prometheus.ValueType, v func(host.RuleStatus) float64) stat[host.RuleStatus] {
		return newStat(name, help, kind, l, v)
	}
	return stats[host.RuleStatus]{
		s("ssrun_rule_events_handled_total", "Events the rule handled successfully.", counter,
			func(r host.RuleStatus) float64 { return float64(r.Handled) }),
		s("ssrun_rule_events_failed_total", "Handler calls that failed (error, timeout, memory, crash).", counter,
			func(r host.RuleStatus) float64 { return float64(r.Failed) }),
		s("ssrun_rule_events_dropped_total", "Events dropped: mailbox full of distinct keys, or rule disabled.", counter,
			func(r host.RuleStatus) float64 { return float64(r.Dropped) }),
		s("ssrun_rule_events_coalesced_total", "Changes replaced in the rule's full mailbox by a newer change of their key.", counter,
			func(r host.RuleStatus) float64 { return float64(r.Coalesced) }),
		s("ssrun_rule_calls_restarted_total", "Handler calls cut by a newer change of their key (mode restart).", counter,
			func(r host.RuleStatus) float64 { return float64(r.Restarted) }),
		s("ssrun_rule_echoes_suppressed_total", "Events skipped as echoes of the rule's own writes.", counter,
			func(r host.RuleStatus) float64 { return float64(r.Echoes) }),
		s("ssrun_rule_calls_abandoned_total", "Handler calls given up on as stuck (also counted as failed).", counter,
			func(r host.RuleStatus) float64 { return float64(r.Abandoned) }),
		s("ssrun_rule_mailbox_depth", "Events waiting in the rule's mailbox.", gauge,
			func(r host.RuleStatus) float64 { return float64(r.Queued) }),
		s("ssrun_rule_calls_in_flight", "Handler calls of the rule running now (up to its concurrency).", gauge,
			func(r host.RuleStatus) float64 { return float64(r.InFlight) }),
		s("ssrun_rule_disabled", "1 while the rule is disabled after repeated failures.", gauge,
			func(r host.RuleStatus) float64 { return bool01(r.Disabled) }),
		s("ssrun_rule_timers_pending", "Timers the rule has armed.", gauge,
			func(r host.RuleStatus) float64 { return float64(r.Timers) }),
		s("ssrun_rule_pattern_watched_keys", "Keys the rule's pattern watches (watch_pattern) cover.", gauge,
			func(r host.RuleStatus) float64 { return float64(r.PatternKeys) }),
	}
}()

// hostSnapshot is what a scrape reads of a host.
type hostSnapshot struct {
	rules int
	st    host.Stats
}

var hostStats = stats[hostSnapshot]{
	newStat("ssrun_host_rules_loaded", "Rules running.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.rules) }),
	newStat("ssrun_host_rules_load_failed", "Rule files whose load failed and of which no version runs (in a group, counted on the shared rule's owner only).", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.LoadFailed) }),
	newStat("ssrun_host_notifications_total", "Key change notifications the host routed to rules.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Notifications) }),
	newStat("ssrun_host_loops_damped_total", "Events dropped by the feedback-loop damper.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.LoopsDamped) }),
	newStat("ssrun_host_resyncs_total", "Resync events delivered after reconnections.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Resyncs) }),
	newStat("ssrun_host_load_retries_total", "Rule files started on a retry after their start failed.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.LoadRetries) }),
	newStat("ssrun_host_watched_keys", "Keys registered for notifications with the store.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.WatchedKeys) }),
	newStat("ssrun_host_rules_owned", "In a group: shared rules this host owns and runs.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Owned) }),
	newStat("ssrun_host_rules_standby", "In a group: shared rules another host runs.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Standby) }),
	newStat("ssrun_host_rules_withdrawn", "In a group: shared rules whose version here failed to load, no longer offered while another member offers them.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Withdrawn) }),
	newStat("ssrun_host_stuck_calls", "Runtime calls abandoned as stuck and still running.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Stuck) }),
	newStat("ssrun_host_patterns_watched", "Patterns the rules watch (watch_pattern), each counted once.", gauge, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.Patterns) }),
	newStat("ssrun_host_pattern_scans_total", "Scans of the store (SCAN walks) for keys and pattern watches.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.Scans) }),
	newStat("ssrun_host_pattern_scan_pages_total", "SCAN pages those scans read.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.Pages) }),
	newStat("ssrun_host_pattern_keys_found_late_total", "Keys a rule got after its pattern's first scan (rescan, a rule's write, reconnection).", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.FoundLate) }),
	newStat("ssrun_host_pattern_keys_over_limit_total", "Keys not watched because the rule had max_watched_keys already.", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.OverLimit) }),
	newStat("ssrun_host_pattern_scan_errors_total", "Pattern scans that failed (the store online).", counter, nil,
		func(h hostSnapshot) float64 { return float64(h.st.Patterns.ScanErrors) }),
}

// hostCollector reads a host's Status and Stats at each scrape.
type hostCollector struct{ h *host.Host }

func (c *hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ruleStats.describe(ch)
	hostStats.describe(ch)
}

func (c *hostCollector) Collect(ch chan<- prometheus.Metric) {
	rules := c.h.Status()
	for i, name := range ruleLabels(rules) {
		ruleStats.emit(ch, rules[i], name, rules[i].Kind)
	}
	st := c.h.Stats()
	hostStats.emit(ch, hostSnapshot{rules: len(rules) - st.Standby, st: st}) // standby rules run elsewhere
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

// clientSnapshot is what a scrape reads of a store client.
type clientSnapshot struct {
	connected bool
	st        protocol.Stats
}

var clientStats = stats[clientSnapshot]{
	newStat("ssrun_store_connected", "1 while connected to the state store (and subscribed: calls can be made).", gauge, nil,
		func(c clientSnapshot) float64 { return bool01(c.connected) }),
	newStat("ssrun_store_reconnects_total", "Connections to the store after the first.", counter, nil,
		func(c clientSnapshot) float64 { return float64(c.st.Reconnects) }),
	newStat("ssrun_store_notifications_total", "Valid key notifications received.", counter, nil,
		func(c clientSnapshot) float64 { return float64(c.st.Notifications) }),
	newStat("ssrun_store_events_dropped_total", "Notifications dropped because the client's event queue was full.", counter, nil,
		func(c clientSnapshot) float64 { return float64(c.st.EventsDropped) }),
	newStat("ssrun_store_requests_pending", "Requests waiting for their response.", gauge, nil,
		func(c clientSnapshot) float64 { return float64(c.st.Pending) }),
}

// clientCollector reads a store client's Stats at each scrape.
type clientCollector struct{ c *protocol.Client }

func (c *clientCollector) Describe(ch chan<- *prometheus.Desc) { clientStats.describe(ch) }

func (c *clientCollector) Collect(ch chan<- prometheus.Metric) {
	clientStats.emit(ch, clientSnapshot{connected: c.c.Connected(), st: c.c.Stats()})
}

var brokerStats = stats[broker.Stats]{
	newStat("ssrun_broker_connections", "MQTT clients connected now.", gauge, nil,
		func(s broker.Stats) float64 { return float64(s.Connections) }),
	newStat("ssrun_broker_keys", "Keys in the state store (expired ones not yet reaped included).", gauge, nil,
		func(s broker.Stats) float64 { return float64(s.Keys) }),
	newStat("ssrun_broker_bytes", "Size of the stored data as --max-bytes counts it.", gauge, nil,
		func(s broker.Stats) float64 { return float64(s.Bytes) }),
	newStat("ssrun_broker_keynotify_registrations", "KEYNOTIFY registrations.", gauge, nil,
		func(s broker.Stats) float64 { return float64(s.Registrations) }),
	newStat("ssrun_broker_notifications_queued_total", "Key notifications queued for delivery to clients.", counter, nil,
		func(s broker.Stats) float64 { return float64(s.NotifyQueued) }),
	newStat("ssrun_broker_notifications_dropped_total", "Messages to clients that could not be delivered (connection gone, write failed).", counter, nil,
		func(s broker.Stats) float64 { return float64(s.NotifyDropped) }),
	newStat("ssrun_broker_client_queue_overflows_total", "Clients disconnected because their output queue overflowed.", counter, nil,
		func(s broker.Stats) float64 { return float64(s.QueueOverflows) }),
}

// brokerCollector reads a broker's Stats at each scrape.
type brokerCollector struct{ b *broker.Broker }

func (c *brokerCollector) Describe(ch chan<- *prometheus.Desc) { brokerStats.describe(ch) }

func (c *brokerCollector) Collect(ch chan<- prometheus.Metric) { brokerStats.emit(ch, c.b.Stats()) }
