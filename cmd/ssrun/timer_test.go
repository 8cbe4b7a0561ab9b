package main

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
)

// doorRule is what the user writes: a door left open arms a timer,
// closing it cancels the timer, and a firing is written to the store
// (alarm/<timer> = the payload, fired/<timer> counts the firings). A set of
// "probe" to N arms the timer "probe-N" due at once: when it has fired,
// every timer due before it has fired too, so a test can wait for it
// instead of sleeping.
const doorRule = `local ss = require("ssrun")
ss.watch("door")
ss.watch("probe")

function on_event(ev)
  if ev.op == "TIMER" then
    local n = tonumber((ss.get("fired/" .. ev.key))) or 0
    assert(ss.set("fired/" .. ev.key, tostring(n + 1)))
    assert(ss.set("alarm/" .. ev.key, ev.value))
  elseif ev.key == "probe" then
    assert(ss.timer("probe-" .. ev.value, 0))
  elseif ev.value == "open" then
    assert(ss.timer("door", 1500, {payload = "open-too-long"}))
  elseif ev.value == "closed" then
    ss.cancel("door")
  end
end
`

// TestDevTimerSurvivesKill is the session of a user trying timers with
// `ssrun dev --data D DIR`: a timer fires, a cancelled one does not, and
// one pending when ssrun dev is killed with SIGKILL fires once after a
// restart on the same --data.
func TestDevTimerSurvivesKill(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"door.lua": doorRule})
	p, addr := startDev(t, dir, "--data", data)
	kv := func(args ...string) string {
		t.Helper()
		r := runCLI(t, "", append([]string{"kv", "--broker", addr}, args...)...)
		if r.code != 0 && !(args[0] == "get" && r.code == 1) {
			t.Fatalf("kv %v: %+v", args, r)
		}
		return r.stdout
	}
	probes := 0
	// probe waits until the rule has handled everything written before,
	// and every timer due by now has fired.
	probe := func() {
		t.Helper()
		probes++
		kv("set", "probe", strconv.Itoa(probes))
		waitKV(t, addr, "fired/probe-"+strconv.Itoa(probes), "1")
	}

	// It fires.
	kv("set", "door", "open")
	waitKV(t, addr, "alarm/door", "open-too-long")
	waitKV(t, addr, "fired/door", "1")

	// A cancelled one does not: once its deadline has passed, nothing.
	kv("set", "door", "open")
	kv("set", "door", "closed")
	probe()
	closed := time.Now()
	testutil.WaitFor(t, "the cancelled timer's deadline to pass", func() bool { return time.Since(closed) > 1500*time.Millisecond })
	probe()
	if got := kv("get", "fired/door"); got != "1\n" {
		t.Fatalf("fired/door = %q after a cancel, want 1", got)
	}

	// Pending when ssrun dev is killed: fires once after the restart.
	kv("set", "door", "open")
	probe() // the timer is armed (and stored) once the open is handled
	p.signal(syscall.SIGKILL)
	p.wait("ssrun dev after SIGKILL")
	p, addr = startDev(t, dir, "--data", data)
	waitKV(t, addr, "fired/door", "2")
	if got := kv("get", "alarm/door"); got != "open-too-long\n" {
		t.Fatalf("alarm/door = %q after the restart", got)
	}
	probe()
	if got := kv("get", "fired/door"); got != "2\n" {
		t.Fatalf("fired/door = %q, want 2: the timer fired more than once after the restart", got)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait("ssrun dev after SIGTERM"); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, p.stderr.String())
	}
}
