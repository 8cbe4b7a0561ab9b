package testrun_test

import "testing"

// Taking a lock writes its key as the host does: the holder's value
// ("<client id>:<rule file>"), the fencing token as its version, seen by
// a rule reading it and by a rule watching it; unlocking deletes it.
func TestLockWritesItsKey(t *testing.T) {
	holder := `local ss = require("ssrun")
ss.watch("go")
function on_event(ev)
  if ev.value == "free" then assert(ss.unlock("lk")) return end
  local token = assert(ss.lock("lk", 10000))
  local v, version = ss.get("lk")
  ss.info("holder " .. v .. " token==version " .. tostring(token == version))
end`
	watcher := `local ss = require("ssrun")
ss.watch("lk")
function on_event(ev) ss.info("saw " .. ev.op .. " lk " .. (ev.value or "")) end`
	passes(t, map[string]string{"a.lua": holder, "w.lua": watcher}, `
cases:
  - name: the lock key
    steps:
      - set: {go: "1"}
        expect:
          writes: []
          store: {lk: "ssrun-test:a.lua"}
          logs: ["holder ssrun-test:a.lua token==version true", "saw SET lk ssrun-test:a.lua"]
      - set: {go: "free"}
        expect:
          store: {lk: null}
          logs: ["saw DELETE lk"]
`)
}

// waiter takes lk with a wait of 5 s on "take", and logs the outcome with
// the virtual time; holder takes lk on "hold" and frees it on "free".
const (
	lockHolder = `local ss = require("ssrun")
ss.watch("hold")
function on_event(ev)
  if ev.value == "free" then assert(ss.unlock("lk")) else assert(ss.lock("lk", 60000)) end
end`
	lockWaiter = `local ss = require("ssrun")
ss.watch("take")
function on_event(ev)
  local t0 = ss.now()
  local token, msg, code = ss.lock("lk", 60000, {wait = 5000})
  ss.info((token and "got" or token == false and "BUSY" or tostring(code)) .. " after " .. (ss.now() - t0) .. "ms")
end`
)

// A lock held by another rule makes a rule that waits for it wait on the
// virtual clock: it gets the lock when the holder frees it, other rules'
// events go on meanwhile, and its own wait for a lock nobody frees ends
// BUSY exactly when the wait has passed.
func TestLockWaitsOnTheVirtualClock(t *testing.T) {
	ponger := `local ss = require("ssrun")
ss.watch("ping")
function on_event(ev) ss.info("pong") end`
	passes(t, map[string]string{"h.lua": lockHolder, "w.lua": lockWaiter, "p.lua": ponger}, `
cases:
  - name: freed while waiting
    steps:
      - set: {hold: "1"}
        expect: {store: {lk: "ssrun-test:h.lua"}}
      - set: {take: "1"}
        expect: {no_logs: [after], status: {w.lua: {handled: 0}}}
      - advance: 2s
        expect: {no_logs: [after]}
      - set: {ping: "1"}
        expect: {logs: [pong], status: {w.lua: {handled: 0}, p.lua: {handled: 1}}}
      - set: {hold: "free"}
        expect:
          logs: ["w.lua: info: got after 2000ms"]
          store: {lk: "ssrun-test:w.lua"}
          status: {w.lua: {handled: 1, failed: 0}}
  - name: never freed
    steps:
      - set: {hold: "1"}
      - set: {take: "1"}
      - advance: 1m
        expect:
          logs: ["w.lua: info: BUSY after 5000ms"]
          store: {lk: "ssrun-test:h.lua"}
  - name: still waiting when the case ends
    steps:
      - set: {hold: "1"}
      - set: {take: "1"}
        expect: {no_logs: [after]}
`)
}

// Without a wait a held lock is BUSY at once, as with the host.
func TestLockWithoutWaitIsBusyAtOnce(t *testing.T) {
	noWait := `local ss = require("ssrun")
ss.watch("take")
function on_event(ev)
  ss.info(tostring(ss.lock("lk", 60000)))
end`
	passes(t, map[string]string{"h.lua": lockHolder, "w.lua": noWait}, `
cases:
  - name: busy
    store: {lk: "some-other-host:h.lua"}
    steps:
      - set: {take: "1"}
        expect: {logs: ["w.lua: info: false"], store: {lk: "some-other-host:h.lua"}}
`)
}
