package testrun_test

import (
	"regexp"
	"testing"
)

// pumpRule takes the lock "pump" on every reading and writes fenced with
// it, logging the code of a refused write.
const pumpRule = `local ss = require("ssrun")
ss.watch("go")
local held = false
function on_event(ev)
  if ev.op == "LOCK_LOST" then ss.warn("lost " .. ev.key) return end
  if not held then
    local token, msg, code = ss.lock("pump", 10000)
    if not token then ss.warn("lock refused: " .. tostring(code)) return end
    held = true
  end
  local ok, msg, code = ss.set("pump/state", ev.value, {fence = "pump"})
  if not ok then ss.warn("write refused: " .. code .. ": " .. msg) end
end`

// A fence step gives the lock to another host behind the holder's back:
// the holder is not told, its next fenced write is refused with FENCED
// and leaves the store as it was, and locking again is BUSY.
func TestFenceStep(t *testing.T) {
	passes(t, map[string]string{"p.lua": pumpRule}, `
cases:
  - name: fenced
    steps:
      - set: {go: "1"}
        expect: {writes: [SET pump/state 1]}
      - fence: pump
        expect: {writes: [], logs: [], no_logs: [lost]}
      - set: {go: "2"}
        expect:
          writes: []
          store: {pump/state: "1"}
          logs: ["write refused: FENCED"]
          no_logs: [LOCK_LOST]
          status: {p.lua: {handled: 2, failed: 0}}
`)
}

// A fenced-out rule that locks again gets its old token (the host answers
// from the lease it believes it holds) and its write is FENCED; once it
// is told LOCK_LOST, locking finds the lock held by another host.
func TestFenceStepLockBusy(t *testing.T) {
	rule := `local ss = require("ssrun")
ss.watch("go")
function on_event(ev)
  if ev.op == "LOCK_LOST" then return end
  local token, msg, code = ss.lock("pump", 10000)
  if token == false then ss.warn("lock busy") return end
  ss.info("token " .. token)
  assert(ss.set("pump/state", ev.value, {fence = "pump"}))
end`
	passes(t, map[string]string{"p.lua": rule}, `
cases:
  - name: busy
    steps:
      - set: {go: "1"}
        expect: {writes: [SET pump/state 1], logs: ["token 001767225600000:00005:StateStore"]}
      - fence: pump
      - set: {go: "2"}
        expect:
          writes: []
          logs: ["token 001767225600000:00005:StateStore", "lower version than the fencing token protecting the resource"]
          status: {p.lua: {handled: 1, failed: 1}}
      - lose_lock: pump
      - set: {go: "3"}
        expect: {writes: [], logs: [lock busy]}
`)
}

// fence names a lock that no rule holds: the case fails, naming the step.
func TestFenceStepUnheld(t *testing.T) {
	failed, out := run(t, map[string]string{"p.lua": pumpRule}, `
cases:
  - name: nobody
    steps:
      - fence: pump
`)
	if failed != 1 || !regexp.MustCompile(`step 1 \(fence pump, line 5\): lock "pump" is not held by any rule`).MatchString(out) {
		t.Fatalf("failed = %d, want 1 naming the step:\n%s", failed, out)
	}
}
