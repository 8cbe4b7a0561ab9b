package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
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

// groupMember starts a host of the group "g" on the broker at addr whose
// rules folder holds r.lua with src, loads it, and returns the host and
// its readiness check.
func groupMember(t *testing.T, addr, src string) (*host.Host, *admin.RulesReady) {
	t.Helper()
	h := luaHost(t, host.Config{Store: connect(t, addr, nil), Group: &host.GroupConfig{Name: "g", TTL: 2 * time.Second}})
	loadRules(t, h, map[string]string{"r.lua": src}) // the group loads r.lua on the member it assigns it to
	r := &admin.RulesReady{}
	r.Loaded(h)
	return h, r
}

// waitCheck waits until check's verdict is want ("" for ready, else a part
// of its error).
func waitCheck(t *testing.T, what string, check func() error, want string) {
	t.Helper()
	testutil.WaitFor(t, what, func() bool {
		err := check()
		if want == "" {
			return err == nil
		}
		return err != nil && strings.Contains(err.Error(), want)
	})
}

// In a group, a member whose version of a rule fails to load is not ready
// while it owns the rule, and ready once it has withdrawn that version
// because another member offers another, which runs the rule; when that
// member leaves, the rule runs nowhere and the first is not ready again.
// Before, the withdrawn version kept the first member not ready ("1 rule
// file(s) failed to load") while the rule ran on the other.
func TestReadyzGroupWithdrawnVersion(t *testing.T) {
	b := brokertest.Start(t)
	h0, r0 := groupMember(t, b.Addr(), brokenRule)
	waitCheck(t, "member 0 not ready, its version owned and failed", r0.Check, "1 rule file(s) failed to load")

	h1, r1 := groupMember(t, b.Addr(), okRule["ok.lua"])
	testutil.WaitFor(t, "r.lua running on member 1", func() bool {
		st := h1.Status()
		return len(st) == 1 && st[0].State == host.StateRunning
	})
	waitCheck(t, "member 0 ready, its version withdrawn", r0.Check, "")
	if err := r1.Check(); err != nil {
		t.Fatalf("member 1, which runs the rule: %v", err)
	}
	if st := h0.Stats(); st.Withdrawn != 1 || st.LoadFailed != 0 {
		t.Fatalf("member 0 counts %d withdrawn, %d failed; want 1, 0", st.Withdrawn, st.LoadFailed)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitCheck(t, "member 0 not ready again, the rule running nowhere", r0.Check, "1 rule file(s) failed to load")
}
