package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
)

var okRule = map[string]string{"ok.lua": metricRules["ok.lua"]}

// waitStatus waits until path answers code, and returns its body.
func (e *env) waitStatus(path string, code int) string {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, body := e.get(path)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s answered %d %q for 30 s, want %d", path, got, body, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// /readyz is 503 while the store is away and 200 again when it is back;
// /healthz stays 200 throughout (the process is alive).
func TestReadyzFollowsTheStore(t *testing.T) {
	e := newEnv(t, okRule, nil, false)
	if code, body := e.get("/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	if body := e.waitStatus("/readyz", http.StatusOK); !strings.HasSuffix(body, "ok\n") || !strings.Contains(body, "[+]store ok") {
		t.Fatalf("/readyz body %q", body)
	}
	e.proxy.Cut()
	body := e.waitStatus("/readyz", http.StatusServiceUnavailable)
	if !strings.Contains(body, "[-]store failed: not connected to the state store") || !strings.Contains(body, "[+]rules ok") {
		t.Fatalf("/readyz while the store is away: %q", body)
	}
	if code, _ := e.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while the store is away: %d, want 200", code)
	}
	if v := e.metric("ssrun_store_connected"); v != 0 {
		t.Fatalf("ssrun_store_connected = %v while away", v)
	}
	e.proxy.Heal()
	e.waitStatus("/readyz", http.StatusOK)
	if v := e.metric("ssrun_store_reconnects_total"); v != 1 {
		t.Fatalf("ssrun_store_reconnects_total = %v, want 1", v)
	}
	// The rule works again after the reconnection.
	e.set("in", "back")
	e.waitMetric("ok.lua handled after the reconnection", eq(1), "ssrun_rule_events_handled_total", "rule=ok.lua")
}

const brokenRule = "local ss = require(\"ssrun\")\nfunction on_event(ev\n"

// A rule file that fails to load makes the process not ready, unless
// failed rules are allowed; before the first load it is not ready either.
func TestReadyzFailedRules(t *testing.T) {
	rules := map[string]string{"ok.lua": okRule["ok.lua"], "broken.lua": brokenRule}
	e := newEnv(t, rules, nil, false)
	body := e.waitStatus("/readyz", http.StatusServiceUnavailable)
	if !strings.Contains(body, "[-]rules failed: 1 rule file(s) failed to load") || !strings.Contains(body, "[+]store ok") {
		t.Fatalf("/readyz with a broken rule: %q", body)
	}
	if v := e.metric("ssrun_host_rules_load_failed"); v != 1 {
		t.Fatalf("ssrun_host_rules_load_failed = %v, want 1", v)
	}

	allowed := newEnv(t, rules, nil, true)
	allowed.waitStatus("/readyz", http.StatusOK)

	var r admin.RulesReady
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "not loaded yet") {
		t.Fatalf("before the first load: %v", err)
	}
}
