package admin_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
)

// ok.lua handles, bad.lua fails (and is disabled after 10 failures in a
// row), slow.lua blocks on its first event until the key gate is "open",
// with a mailbox of 2, so it queues and drops.
var metricRules = map[string]string{
	"ok.lua": `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) assert(ss.set("out", ev.value)) end
`,
	"bad.lua": `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) error("boom") end
`,
	"slow.lua": `local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  while ss.get("gate") ~= "open" do end
end
`,
}

// The numbers on /metrics move with real events: handled, failed and
// disabled, queued and dropped, handler latency, store requests, broker
// keys and notifications.
func TestMetricsMoveWithEvents(t *testing.T) {
	e := newEnv(t, metricRules, map[string]host.RuleConfig{"slow.lua": {Mailbox: 2, Timeout: 5 * time.Minute}}, false)
	for _, name := range []string{"ok.lua", "bad.lua", "slow.lua"} {
		if v := e.metric("ssrun_rule_events_handled_total", "rule="+name, "kind=lua"); v != 0 {
			t.Fatalf("%s handled %v before any event, want 0", name, v)
		}
	}
	const n = 12
	for i := 1; i <= n; i++ {
		e.set("in", strconv.Itoa(i))
	}
	e.waitMetric("ok.lua handled every event", eq(n), "ssrun_rule_events_handled_total", "rule=ok.lua")
	e.waitMetric("bad.lua disabled", eq(1), "ssrun_rule_disabled", "rule=bad.lua")
	e.waitMetric("bad.lua's events after disabling dropped", eq(2), "ssrun_rule_events_dropped_total", "rule=bad.lua")
	if v := e.metric("ssrun_rule_events_failed_total", "rule=bad.lua"); v != 10 {
		t.Fatalf("bad.lua failed %v, want 10 (then disabled)", v)
	}
	if v := e.metric("ssrun_rule_disabled", "rule=ok.lua"); v != 0 {
		t.Fatalf("ok.lua disabled = %v", v)
	}
	// slow.lua is stuck in its first event: 2 wait, the rest of the
	// changes of "in" were coalesced into the last waiting one.
	e.waitMetric("slow.lua's mailbox full", eq(2), "ssrun_rule_mailbox_depth", "rule=slow.lua")
	e.waitMetric("slow.lua coalesced", eq(n-3), "ssrun_rule_events_coalesced_total", "rule=slow.lua")
	e.set("gate", "open")
	e.waitMetric("slow.lua drained", eq(0), "ssrun_rule_mailbox_depth", "rule=slow.lua")
	e.waitMetric("slow.lua handled the rest", eq(3), "ssrun_rule_events_handled_total", "rule=slow.lua")
	if dropped := e.metric("ssrun_rule_events_dropped_total", "rule=slow.lua"); dropped != 0 {
		t.Fatalf("slow.lua dropped %v, want 0 (one key conflates)", dropped)
	}

	code, body := e.get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, c := range []struct {
		name   string
		labels []string
		ok     func(float64) bool
	}{
		{"ssrun_rule_handler_seconds_count", []string{"rule=ok.lua"}, eq(n)},
		{"ssrun_rule_handler_seconds_count", []string{"rule=bad.lua"}, eq(10)},
		{"ssrun_rule_handler_seconds_count", []string{"rule=slow.lua"}, eq(3)},
		{"ssrun_rule_handler_seconds_sum", []string{"rule=slow.lua"}, func(v float64) bool { return v > 0 }},
		{"ssrun_store_requests_total", []string{"command=set", "outcome=ok"}, eq(n)}, // ok.lua's writes
		{"ssrun_store_requests_total", []string{"command=keynotify", "outcome=ok"}, eq(1)},
		{"ssrun_store_request_seconds_count", []string{"command=set"}, eq(n)},
		{"ssrun_store_connected", nil, eq(1)},
		{"ssrun_host_rules_loaded", nil, eq(3)},
		{"ssrun_host_rules_load_failed", nil, eq(0)},
		{"ssrun_host_watched_keys", nil, eq(1)},
		{"ssrun_broker_keys", nil, eq(3)}, // in, out, gate
		{"ssrun_broker_connections", nil, eq(2)},
		{"ssrun_broker_notifications_queued_total", nil, eq(n)}, // the host's one registration on "in"
		{"ssrun_broker_keynotify_registrations", nil, eq(1)},
		{"go_goroutines", nil, atLeast(1)},
		{"process_open_fds", nil, atLeast(1)},
	} {
		if v := valueOf(t, body, c.name, c.labels...); !c.ok(v) {
			t.Errorf("%s%v = %v", c.name, c.labels, v)
		}
	}
	if !strings.Contains(body, "# HELP ssrun_rule_events_handled_total ") {
		t.Error("no HELP line for ssrun_rule_events_handled_total")
	}
}

// The pattern series move with a rule's pattern watch: its keys, the host's
// patterns, scans and pages, and the status document says the same.
func TestMetricsOfPatternWatches(t *testing.T) {
	e := newEnv(t, map[string]string{"fleet.lua": `local ss = require("ssrun")
assert(ss.watch_pattern("t/*"))
function on_event(ev) end
`}, map[string]host.RuleConfig{"fleet.lua": {Rescan: 20 * time.Millisecond}}, false)
	e.set("t/1", "1")
	e.set("t/2", "1")
	e.waitMetric("the rescan finds both keys", eq(2), "ssrun_rule_pattern_watched_keys", "rule=fleet.lua")
	if v := e.metric("ssrun_host_patterns_watched"); v != 1 {
		t.Errorf("ssrun_host_patterns_watched = %v, want 1", v)
	}
	if v := e.metric("ssrun_host_pattern_keys_found_late_total"); v != 2 {
		t.Errorf("ssrun_host_pattern_keys_found_late_total = %v, want 2 (both created after the first scan)", v)
	}
	scans, pages := e.metric("ssrun_host_pattern_scans_total"), e.metric("ssrun_host_pattern_scan_pages_total")
	if scans < 3 || pages < 1 {
		t.Errorf("%v scans and %v pages: want at least the call's count, the first scan and a rescan", scans, pages)
	}
	for _, name := range []string{"ssrun_host_pattern_keys_over_limit_total", "ssrun_host_pattern_scan_errors_total"} {
		if v := e.metric(name); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
}
