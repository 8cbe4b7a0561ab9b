package lua

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// ver is abitest's n-th version string.
var ver = abitest.Version

// evalRule evaluates the Lua expression expr inside on_event against h and
// returns its results, each shown as "type:value", joined by " | ".
func evalRule(t *testing.T, h abi.Host, expr string) string {
	t.Helper()
	p := compileRule(t, New(Config{}), "verb.lua", `
local ss = require("ssrun")
local function show(...)
  local out = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    out[#out + 1] = type(v) .. ":" .. tostring(v)
  end
  return table.concat(out, " | ")
end
function on_event(ev)
  result = show(`+expr+`)
end`)
	s, err := p.Start(context.Background(), h, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := s.Handle(context.Background(), setEvent("k", "v")); err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s.(*script).st.L.GetGlobal("result").String()
}

func deny(key string) func(verb, k string) bool { return func(_, k string) bool { return k == key } }

func lockHeld(h *abitest.Host, name string) string {
	tok, err := h.Lock(context.Background(), name, time.Minute, abi.LockOptions{})
	if err != nil {
		panic(err)
	}
	return tok
}

func TestVerbs(t *testing.T) {
	type verbCase struct {
		verb, status string // the verb exercised and the status it meets
		setup        func(h *abitest.Host)
		expr         string
		want         string
		hostCalled   bool // the host saw the call (false: refused in Lua)
		check        func(t *testing.T, h *abitest.Host)
	}
	put := func(key, value string) func(h *abitest.Host) {
		return func(h *abitest.Host) { h.Put(key, []byte(value)) }
	}
	lost := func(h *abitest.Host) { lockHeld(h, "L"); h.LoseLock("L"); h.Put("k", []byte("v")) }
	stored := func(key, want string) func(t *testing.T, h *abitest.Host) {
		return func(t *testing.T, h *abitest.Host) {
			if v, ok := h.Value(key); !ok || string(v) != want {
				t.Errorf("stored %q=%q (%v), want %q", key, v, ok, want)
			}
		}
	}
	absent := func(key string) func(t *testing.T, h *abitest.Host) {
		return func(t *testing.T, h *abitest.Host) {
			if v, ok := h.Value(key); ok {
				t.Errorf("%q still stored (%q)", key, v)
			}
		}
	}
	const bin = `"\r\n\0\255"` // CR LF NUL 0xff in Lua source
	cases := []verbCase{
		// get
		{verb: "get", status: "OK", setup: put("k", "v\r\n\x00\xff"), expr: `ss.get("k")`, want: "string:v\r\n\x00\xff | string:" + ver(1), hostCalled: true},
		{verb: "get", status: "OK", setup: put("k\r\n\x00\xff", ""), expr: `ss.get("k"..` + bin + `)`, want: "string: | string:" + ver(1), hostCalled: true},
		{verb: "get", status: "NOT_FOUND", expr: `ss.get("nope")`, want: "nil:nil", hostCalled: true},
		{verb: "get", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("k") }, expr: `ss.get("k")`, want: `nil:nil | string:get "k": not permitted | string:DENIED`, hostCalled: true},
		{verb: "get", status: "INVALID", expr: `ss.get("")`, want: "nil:nil | string:get: empty key | string:INVALID", hostCalled: true},
		{verb: "get", status: "OK", setup: put("42", "n"), expr: `ss.get(42)`, want: "string:n | string:" + ver(1), hostCalled: true},

		// set
		{verb: "set", status: "OK", expr: `ss.set("k", "a" .. ` + bin + `)`, want: "boolean:true | string:" + ver(1), hostCalled: true, check: stored("k", "a\r\n\x00\xff")},
		{verb: "set", status: "OK", expr: `ss.set("k", "")`, want: "boolean:true | string:" + ver(1), hostCalled: true, check: stored("k", "")},
		{verb: "set", status: "OK", expr: `ss.set("k", 1.5, {ttl = 1000})`, want: "boolean:true | string:" + ver(1), hostCalled: true, check: stored("k", "1.5")},
		{verb: "set", status: "OK", expr: `ss.set("k", "v", {nx = true, ttl = 0})`, want: "boolean:true | string:" + ver(1), hostCalled: true},
		{verb: "set", status: "NOT_APPLIED", setup: put("k", "old"), expr: `ss.set("k", "new", {nx = true})`, want: "boolean:false | string:" + ver(1), hostCalled: true, check: stored("k", "old")},
		{verb: "set", status: "OK", setup: put("k", "same"), expr: `ss.set("k", "same", {nex = true})`, want: "boolean:true | string:" + ver(2), hostCalled: true},
		{verb: "set", status: "NOT_APPLIED", setup: put("k", "old"), expr: `ss.set("k", "new", {nex = true, nx = false})`, want: "boolean:false | string:" + ver(1), hostCalled: true},
		{verb: "set", status: "OK", setup: func(h *abitest.Host) { lockHeld(h, "L") }, expr: `ss.set("k", "v", {fence = "L"})`, want: "boolean:true | string:" + ver(2), hostCalled: true},
		{verb: "set", status: "LOCK_LOST", setup: lost, expr: `ss.set("k", "w", {fence = "L"})`, want: `nil:nil | string:fence "L": lock not held | string:LOCK_LOST`, hostCalled: true, check: stored("k", "v")},
		{verb: "set", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("k") }, expr: `ss.set("k", "v")`, want: `nil:nil | string:set "k": not permitted | string:DENIED`, hostCalled: true, check: absent("k")},
		{verb: "set", status: "INVALID", expr: `ss.set("", "v")`, want: "nil:nil | string:set: empty key | string:INVALID", hostCalled: true},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {nx = true, nex = true})`, want: "nil:nil | string:ss.set: options nx and nex exclude each other | string:INVALID"},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {px = 5})`, want: `nil:nil | string:ss.set: unknown option "px" (want nx, nex, ttl, fence) | string:INVALID`},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {true})`, want: `nil:nil | string:ss.set: unknown option [1] (want nx, nex, ttl, fence) | string:INVALID`},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {ttl = -1})`, want: "nil:nil | string:ss.set: ttl must be >= 0, got -1 | string:INVALID"},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {ttl = 1.5})`, want: "nil:nil | string:ss.set: ttl must be a whole number of milliseconds, got 1.5 | string:INVALID"},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {ttl = 0/0})`, want: "nil:nil | string:ss.set: ttl must be a whole number of milliseconds, got NaN | string:INVALID"},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {ttl = 1e300})`, want: "nil:nil | string:ss.set: ttl of 1e+300 ms is too long | string:INVALID"},
		{verb: "set", status: "INVALID", expr: `ss.set("k", "v", {fence = ""})`, want: `nil:nil | string:ss.set: option 'fence' must name a lock, got "" | string:INVALID`},

		// del
		{verb: "del", status: "OK", setup: put("k\r\n\x00", "v"), expr: `ss.del("k\r\n\0")`, want: "number:1", hostCalled: true, check: absent("k\r\n\x00")},
		{verb: "del", status: "NOT_FOUND", expr: `ss.del("k")`, want: "number:0", hostCalled: true},
		{verb: "del", status: "OK", setup: func(h *abitest.Host) { lockHeld(h, "L"); h.Put("k", nil) }, expr: `ss.del("k", {fence = "L"})`, want: "number:1", hostCalled: true},
		{verb: "del", status: "LOCK_LOST", setup: lost, expr: `ss.del("k", {fence = "L"})`, want: `nil:nil | string:fence "L": lock not held | string:LOCK_LOST`, hostCalled: true, check: stored("k", "v")},
		{verb: "del", status: "DENIED", setup: func(h *abitest.Host) { h.Put("k", nil); h.Deny = deny("k") }, expr: `ss.del("k")`, want: `nil:nil | string:del "k": not permitted | string:DENIED`, hostCalled: true, check: stored("k", "")},
		{verb: "del", status: "INVALID", expr: `ss.del("")`, want: "nil:nil | string:del: empty key | string:INVALID", hostCalled: true},
		{verb: "del", status: "INVALID", expr: `ss.del("k", {fence = "L", nx = true})`, want: `nil:nil | string:ss.del: unknown option "nx" (want fence) | string:INVALID`},

		// vdel
		{verb: "vdel", status: "OK", setup: put("k", "v\x00"), expr: `ss.vdel("k", "v\0")`, want: "number:1", hostCalled: true, check: absent("k")},
		{verb: "vdel", status: "NOT_FOUND", expr: `ss.vdel("k", "v")`, want: "number:0", hostCalled: true},
		{verb: "vdel", status: "NOT_APPLIED", setup: put("k", "v\x00"), expr: `ss.vdel("k", "v")`, want: "number:-1", hostCalled: true, check: stored("k", "v\x00")},
		{verb: "vdel", status: "LOCK_LOST", setup: lost, expr: `ss.vdel("k", "v", {fence = "L"})`, want: `nil:nil | string:fence "L": lock not held | string:LOCK_LOST`, hostCalled: true, check: stored("k", "v")},
		{verb: "vdel", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("k") }, expr: `ss.vdel("k", "v")`, want: `nil:nil | string:vdel "k": not permitted | string:DENIED`, hostCalled: true},
		{verb: "vdel", status: "INVALID", expr: `ss.vdel("", "v")`, want: "nil:nil | string:vdel: empty key | string:INVALID", hostCalled: true},
		{verb: "vdel", status: "INVALID", expr: `ss.vdel("k", "v", {fence = 5 > 4 and "" or "x"})`, want: `nil:nil | string:ss.vdel: option 'fence' must name a lock, got "" | string:INVALID`},

		// watch
		{verb: "watch", status: "OK", expr: `ss.watch("a\0b", {self = true})`, want: "boolean:true", hostCalled: true, check: func(t *testing.T, h *abitest.Host) {
			if o, ok := h.Watches()["a\x00b"]; !ok || !o.Self {
				t.Errorf("watches %v", h.Watches())
			}
		}},
		{verb: "watch", status: "OK", expr: `ss.watch("a", {self = false})`, want: "boolean:true", hostCalled: true, check: func(t *testing.T, h *abitest.Host) {
			if o, ok := h.Watches()["a"]; !ok || o.Self {
				t.Errorf("watches %v", h.Watches())
			}
		}},
		{verb: "watch", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("k") }, expr: `ss.watch("k")`, want: `nil:nil | string:watch "k": not permitted | string:DENIED`, hostCalled: true},
		{verb: "watch", status: "INVALID", expr: `ss.watch("")`, want: "nil:nil | string:watch: empty key | string:INVALID", hostCalled: true},
		{verb: "watch", status: "INVALID", expr: `ss.watch("k", {me = true})`, want: `nil:nil | string:ss.watch: unknown option "me" (want self) | string:INVALID`},

		// unwatch
		{verb: "unwatch", status: "OK", setup: func(h *abitest.Host) { h.Watch(context.Background(), "k", abi.WatchOptions{}) }, expr: `ss.unwatch("k")`, want: "boolean:true", hostCalled: true},
		{verb: "unwatch", status: "NOT_FOUND", expr: `ss.unwatch("k")`, want: "boolean:false", hostCalled: true},
		{verb: "unwatch", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("k") }, expr: `ss.unwatch("k")`, want: `nil:nil | string:unwatch "k": not permitted | string:DENIED`, hostCalled: true},
		{verb: "unwatch", status: "INVALID", expr: `ss.unwatch("")`, want: "nil:nil | string:unwatch: empty key | string:INVALID", hostCalled: true},

		// lock
		{verb: "lock", status: "OK", expr: `ss.lock("L\0", 3000, {wait = 0})`, want: "string:" + ver(1), hostCalled: true},
		{verb: "lock", status: "OK", setup: func(h *abitest.Host) { lockHeld(h, "L") }, expr: `ss.lock("L", 3000)`, want: "string:" + ver(1), hostCalled: true},
		{verb: "lock", status: "BUSY", setup: put("L", "someone else"), expr: `ss.lock("L", 3000, {wait = 10})`, want: "boolean:false", hostCalled: true},
		{verb: "lock", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("L") }, expr: `ss.lock("L", 3000)`, want: `nil:nil | string:lock "L": not permitted | string:DENIED`, hostCalled: true},
		{verb: "lock", status: "INVALID", expr: `ss.lock("", 3000)`, want: "nil:nil | string:lock: empty key | string:INVALID", hostCalled: true},
		{verb: "lock", status: "INVALID", expr: `ss.lock("L", 0)`, want: "nil:nil | string:ss.lock: ttl_ms must be > 0, got 0 | string:INVALID"},
		{verb: "lock", status: "INVALID", expr: `ss.lock("L", -5)`, want: "nil:nil | string:ss.lock: ttl_ms must be > 0, got -5 | string:INVALID"},
		{verb: "lock", status: "INVALID", expr: `ss.lock("L", 100, {wait = -1})`, want: "nil:nil | string:ss.lock: wait must be >= 0, got -1 | string:INVALID"},
		{verb: "lock", status: "INVALID", expr: `ss.lock("L", 100, {ttl = 5})`, want: `nil:nil | string:ss.lock: unknown option "ttl" (want wait) | string:INVALID`},

		// unlock
		{verb: "unlock", status: "OK", setup: func(h *abitest.Host) { lockHeld(h, "L") }, expr: `ss.unlock("L")`, want: "boolean:true", hostCalled: true, check: absent("L")},
		{verb: "unlock", status: "NOT_FOUND", expr: `ss.unlock("L")`, want: "boolean:false", hostCalled: true},
		{verb: "unlock", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("L") }, expr: `ss.unlock("L")`, want: `nil:nil | string:unlock "L": not permitted | string:DENIED`, hostCalled: true},
		{verb: "unlock", status: "INVALID", expr: `ss.unlock("")`, want: "nil:nil | string:unlock: empty key | string:INVALID", hostCalled: true},

		// log
		{verb: "log", status: "OK", expr: `ss.log("warn", "m\0\n")`, want: "boolean:true", hostCalled: true, check: wantLog(abi.LevelWarn, "m\x00\n")},
		{verb: "log", status: "OK", expr: `ss.log("debug", 5)`, want: "boolean:true", hostCalled: true, check: wantLog(abi.LevelDebug, "5")},
		{verb: "log", status: "OK", expr: `ss.error("e")`, want: "boolean:true", hostCalled: true, check: wantLog(abi.LevelError, "e")},
		{verb: "log", status: "OK", expr: `ss.info("i")`, want: "boolean:true", hostCalled: true, check: wantLog(abi.LevelInfo, "i")},
		{verb: "log", status: "INVALID", expr: `ss.log("fatal", "m")`, want: `nil:nil | string:ss.log: unknown level "fatal" (want debug, info, warn or error) | string:INVALID`},

		// timer (the clock is fixed at now0 for every case)
		{verb: "timer", status: "OK", expr: `ss.timer("door", 1500, {payload = "open-too-long"})`, want: "boolean:true", hostCalled: true, check: armed("door", now0+1500, 0, "open-too-long")},
		{verb: "timer", status: "OK", expr: `ss.timer("t\0", 0)`, want: "boolean:true", hostCalled: true, check: armed("t\x00", now0, 0, "")},
		{verb: "timer", status: "OK", expr: `ss.timer("t", 0, {payload = ""})`, want: "boolean:true", hostCalled: true, check: armed("t", now0, 0, "")},
		{verb: "timer", status: "OK", expr: `ss.timer(7, 250, {every = 1000, payload = 1.5})`, want: "boolean:true", hostCalled: true, check: armed("7", now0+250, time.Second, "1.5")},
		{verb: "timer", status: "OK", expr: `ss.timer("t", 10, {payload = ` + bin + `, every = 0})`, want: "boolean:true", hostCalled: true, check: armed("t", now0+10, 0, "\r\n\x00\xff")},
		{verb: "timer", status: "OK", setup: arm("t", 5000, "old"), expr: `ss.timer("t", 100, {payload = "new"})`, want: "boolean:true", hostCalled: true, check: armed("t", now0+100, 0, "new")},
		{verb: "timer", status: "QUOTA", setup: failWith(abi.FnTimer, abi.StatusQuota, "timer \"t\": the rule has 1000 timers, the most it may have"), expr: `ss.timer("t", 100)`, want: `nil:nil | string:timer "t": the rule has 1000 timers, the most it may have | string:QUOTA`, hostCalled: true, check: noTimers},
		{verb: "timer", status: "TOO_LARGE", setup: failWith(abi.FnTimer, abi.StatusTooLarge, "timer \"t\": payload of 5 bytes exceeds max_value 4"), expr: `ss.timer("t", 100, {payload = "12345"})`, want: `nil:nil | string:timer "t": payload of 5 bytes exceeds max_value 4 | string:TOO_LARGE`, hostCalled: true, check: noTimers},
		{verb: "timer", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("t") }, expr: `ss.timer("t", 100)`, want: `nil:nil | string:timer "t": not permitted | string:DENIED`, hostCalled: true, check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("", 100)`, want: "nil:nil | string:timer: empty key | string:INVALID", hostCalled: true, check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", -1)`, want: "nil:nil | string:ss.timer: delay_ms must be >= 0, got -1 | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 1.5)`, want: "nil:nil | string:ss.timer: delay_ms must be a whole number of milliseconds, got 1.5 | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 0/0)`, want: "nil:nil | string:ss.timer: delay_ms must be a whole number of milliseconds, got NaN | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 1/0)`, want: "nil:nil | string:ss.timer: delay_ms must be a whole number of milliseconds, got +Inf | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 1e300)`, want: "nil:nil | string:ss.timer: delay_ms of 1e+300 ms is too long | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 10, {every = -5})`, want: "nil:nil | string:ss.timer: every must be >= 0, got -5 | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 10, {every = 0.5})`, want: "nil:nil | string:ss.timer: every must be a whole number of milliseconds, got 0.5 | string:INVALID", check: noTimers},
		{verb: "timer", status: "INVALID", expr: `ss.timer("t", 10, {period = 5})`, want: `nil:nil | string:ss.timer: unknown option "period" (want every, payload) | string:INVALID`, check: noTimers},

		// cancel
		{verb: "cancel", status: "OK", setup: arm("t", 100, ""), expr: `ss.cancel("t")`, want: "boolean:true", hostCalled: true, check: noTimers},
		{verb: "cancel", status: "NOT_FOUND", setup: arm("other", 100, ""), expr: `ss.cancel("t")`, want: "boolean:false", hostCalled: true, check: armed("other", now0+100, 0, "")},
		{verb: "cancel", status: "DENIED", setup: func(h *abitest.Host) { arm("t", 100, "")(h); h.Deny = deny("t") }, expr: `ss.cancel("t")`, want: `nil:nil | string:cancel "t": not permitted | string:DENIED`, hostCalled: true, check: armed("t", now0+100, 0, "")},
		{verb: "cancel", status: "INVALID", expr: `ss.cancel("")`, want: "nil:nil | string:cancel: empty key | string:INVALID", hostCalled: true},

		// keys (revision 3): a sequence table, sorted
		{verb: "keys", status: "OK", setup: puts("t/2", "t/1", "u/1", "t/3"), expr: `#ss.keys("t/*"), table.concat(ss.keys("t/*", 3), ",")`, want: "number:3 | string:t/1,t/2,t/3", hostCalled: true},
		{verb: "keys", status: "OK", expr: `#ss.keys("none/*"), next(ss.keys("none/*"))`, want: "number:0 | nil:nil", hostCalled: true},
		{verb: "keys", status: "LIMIT", setup: puts("t/1", "t/2"), expr: `ss.keys("t/*", 1)`, want: `nil:nil | string:keys "t/*": more than 1 keys match | string:LIMIT`, hostCalled: true},
		{verb: "keys", status: "DENIED", expr: `ss.keys("$ssrun/*")`, want: `nil:nil | string:keys "$ssrun/*": keys under $ssrun/ are reserved for the host | string:DENIED`, hostCalled: true},
		{verb: "keys", status: "INVALID", expr: `ss.keys("[")`, want: `nil:nil | string:keys "[": unterminated [ in pattern | string:INVALID`, hostCalled: true},
		{verb: "keys", status: "INVALID", expr: `ss.keys("t/*", 1.5)`, want: `nil:nil | string:ss.keys: limit must be a whole number between 0 (the default, 1000) and 100000, got 1.5 | string:INVALID`},
		{verb: "keys", status: "INVALID", expr: `ss.keys("t/*", -1)`, want: `nil:nil | string:ss.keys: limit must be a whole number between 0 (the default, 1000) and 100000, got -1 | string:INVALID`},

		// watch_pattern, unwatch_pattern (revision 3)
		{verb: "watch_pattern", status: "OK", expr: `ss.watch_pattern("t/*", {self = true})`, want: "boolean:true", hostCalled: true, check: func(t *testing.T, h *abitest.Host) {
			if o, ok := h.Patterns()["t/*"]; !ok || !o.Self {
				t.Errorf("patterns %v", h.Patterns())
			}
		}},
		{verb: "watch_pattern", status: "LIMIT", setup: func(h *abitest.Host) { h.MaxWatchedKeys = 1; puts("t/1", "t/2")(h) }, expr: `ss.watch_pattern("t/*")`, want: `nil:nil | string:watch_pattern "t/*": more than max_watched_keys (1) keys match | string:LIMIT`, hostCalled: true},
		{verb: "watch_pattern", status: "DENIED", setup: func(h *abitest.Host) { h.Deny = deny("t/*") }, expr: `ss.watch_pattern("t/*")`, want: `nil:nil | string:watch_pattern "t/*": not permitted | string:DENIED`, hostCalled: true},
		{verb: "watch_pattern", status: "INVALID", expr: `ss.watch_pattern("a\\")`, want: `nil:nil | string:watch_pattern "a\\": pattern ends with an escaping backslash | string:INVALID`, hostCalled: true},
		{verb: "watch_pattern", status: "INVALID", expr: `ss.watch_pattern("t/*", {me = true})`, want: `nil:nil | string:ss.watch_pattern: unknown option "me" (want self) | string:INVALID`},
		{verb: "unwatch_pattern", status: "OK", setup: func(h *abitest.Host) { h.WatchPattern(context.Background(), "t/*", abi.WatchOptions{}) }, expr: `ss.unwatch_pattern("t/*")`, want: "boolean:true", hostCalled: true},
		{verb: "unwatch_pattern", status: "NOT_FOUND", expr: `ss.unwatch_pattern("t/*")`, want: "boolean:false", hostCalled: true},

		// now: a whole number of milliseconds, exact
		{verb: "now", status: "OK", expr: `ss.now(), ss.now() == 1700000000123, math.floor(ss.now()) == ss.now()`, want: "number:1700000000123 | boolean:true | boolean:true", hostCalled: true},
	}

	// Every verb of abi.Verbs() is covered with OK and each status it can meet.
	statuses := map[string][]string{
		"get":     {"OK", "NOT_FOUND", "DENIED", "INVALID"},
		"set":     {"OK", "NOT_APPLIED", "LOCK_LOST", "DENIED", "INVALID"},
		"del":     {"OK", "NOT_FOUND", "LOCK_LOST", "DENIED", "INVALID"},
		"vdel":    {"OK", "NOT_FOUND", "NOT_APPLIED", "LOCK_LOST", "DENIED", "INVALID"},
		"watch":   {"OK", "DENIED", "INVALID"},
		"unwatch": {"OK", "NOT_FOUND", "DENIED", "INVALID"},
		"lock":    {"OK", "BUSY", "DENIED", "INVALID"},
		"unlock":  {"OK", "NOT_FOUND", "DENIED", "INVALID"},
		"log":     {"OK", "INVALID"},
		"timer":   {"OK", "QUOTA", "TOO_LARGE", "DENIED", "INVALID"},
		"cancel":  {"OK", "NOT_FOUND", "DENIED", "INVALID"},
		"now":     {"OK"},

		"keys":            {"OK", "LIMIT", "DENIED", "INVALID"},
		"watch_pattern":   {"OK", "LIMIT", "DENIED", "INVALID"},
		"unwatch_pattern": {"OK", "NOT_FOUND"},
	}
	for _, verb := range abi.Verbs() {
		for _, st := range statuses[verb] {
			if !slices.ContainsFunc(cases, func(c verbCase) bool { return c.verb == verb && c.status == st }) {
				t.Errorf("no case for %s %s", verb, st)
			}
		}
		if statuses[verb] == nil {
			t.Errorf("verb %s has no cases", verb)
		}
	}

	for _, c := range cases {
		t.Run(c.verb+"/"+c.status+"/"+c.expr, func(t *testing.T) {
			h := abitest.New()
			h.SetNow(now0)
			if c.setup != nil {
				c.setup(h)
			}
			calls := h.Calls(c.verb)
			if got := evalRule(t, h, c.expr); got != c.want {
				t.Errorf("%s\n got %q\nwant %q", c.expr, got, c.want)
			}
			if called := h.Calls(c.verb) > calls; called != c.hostCalled {
				t.Errorf("host called: %v, want %v", called, c.hostCalled)
			}
			if c.check != nil {
				c.check(t, h)
			}
		})
	}
}

// puts stores each key (value "v") on h.
func puts(keys ...string) func(h *abitest.Host) {
	return func(h *abitest.Host) {
		for _, k := range keys {
			h.Put(k, []byte("v"))
		}
	}
}

// now0 is the abitest clock of TestVerbs (Unix ms).
const now0 = 1700000000123

// arm arms the timer name on h, delay ms from its clock.
func arm(name string, delay int64, payload string) func(h *abitest.Host) {
	return func(h *abitest.Host) {
		if err := h.Timer(context.Background(), name, time.Duration(delay)*time.Millisecond, abi.TimerOptions{Payload: []byte(payload)}); err != nil {
			panic(err)
		}
	}
}

// armed checks that name is the only timer armed on h, as given.
func armed(name string, deadline int64, every time.Duration, payload string) func(t *testing.T, h *abitest.Host) {
	return func(t *testing.T, h *abitest.Host) {
		tm, ok := h.Timers()[name]
		if !ok || len(h.Timers()) != 1 || tm.Deadline != deadline || tm.Every != every || string(tm.Payload) != payload {
			t.Errorf("timers %+v, want only %q due at %d every %v with payload %q", h.Timers(), name, deadline, every, payload)
		}
	}
}

func noTimers(t *testing.T, h *abitest.Host) {
	if n := len(h.Timers()); n != 0 {
		t.Errorf("%d timers armed: %+v", n, h.Timers())
	}
}

// failWith makes h fail verb with status and msg.
func failWith(verb string, status abi.Status, msg string) func(h *abitest.Host) {
	return func(h *abitest.Host) { h.Fail(verb, abi.Errorf(status, "%s", msg)) }
}

func wantLog(level int32, msg string) func(t *testing.T, h *abitest.Host) {
	return func(t *testing.T, h *abitest.Host) {
		if l := h.Logs(); len(l) != 1 || l[0].Level != level || l[0].Msg != msg {
			t.Errorf("logs %+v, want level %d %q", l, level, msg)
		}
	}
}

func TestVerbsExposed(t *testing.T) {
	L := newState(Config{}.withDefaults(), abitest.New(), 1<<20).L
	defer L.Close()
	if err := L.DoString(`ss = require("ssrun")`); err != nil {
		t.Fatal(err)
	}
	mod := L.GetGlobal("ss").(*glua.LTable)
	for _, verb := range abi.Verbs() {
		if fn := mod.RawGetString(verb); fn.Type() != glua.LTFunction {
			t.Errorf("ss.%s is %s", verb, fn.Type())
		}
	}
	status := mod.RawGetString("status").(*glua.LTable)
	for _, s := range abi.Statuses() {
		if got := status.RawGetString(s.String()); got != glua.LNumber(s) {
			t.Errorf("ss.status.%s = %v, want %d", s, got, s)
		}
	}
}

func TestVerbArgumentTypes(t *testing.T) {
	for _, tc := range []struct{ expr, msg string }{
		{`ss.get()`, "ss.get: bad argument #1 'key' (string expected, got nil)"},
		{`ss.get({})`, "ss.get: bad argument #1 'key' (string expected, got table)"},
		{`ss.set("k")`, "ss.set: bad argument #2 'value' (string expected, got nil)"},
		{`ss.set("k", true)`, "ss.set: bad argument #2 'value' (string expected, got boolean)"},
		{`ss.set("k", "v", 5)`, "ss.set: bad argument #3 'options' (table expected, got number)"},
		{`ss.set("k", "v", {nx = "yes"})`, "ss.set: option 'nx' must be a boolean, got string"},
		{`ss.set("k", "v", {ttl = "5"})`, "ss.set: option 'ttl' must be a number of milliseconds, got string"},
		{`ss.set("k", "v", {fence = 1})`, "ss.set: option 'fence' must be a lock name (string), got number"},
		{`ss.del(true)`, "ss.del: bad argument #1 'key' (string expected, got boolean)"},
		{`ss.del("k", "v")`, "ss.del: bad argument #2 'options' (table expected, got string)"},
		{`ss.vdel("k")`, "ss.vdel: bad argument #2 'value' (string expected, got nil)"},
		{`ss.vdel("k", "v", {fence = {}})`, "ss.vdel: option 'fence' must be a lock name (string), got table"},
		{`ss.watch(nil)`, "ss.watch: bad argument #1 'key' (string expected, got nil)"},
		{`ss.watch("k", {self = 1})`, "ss.watch: option 'self' must be a boolean, got number"},
		{`ss.unwatch()`, "ss.unwatch: bad argument #1 'key' (string expected, got nil)"},
		{`ss.lock("n")`, "ss.lock: bad argument #2 'ttl_ms' (number expected, got nil)"},
		{`ss.lock("n", "5")`, "ss.lock: bad argument #2 'ttl_ms' (number expected, got string)"},
		{`ss.lock("n", 5, {wait = "x"})`, "ss.lock: option 'wait' must be a number of milliseconds, got string"},
		{`ss.unlock({})`, "ss.unlock: bad argument #1 'name' (string expected, got table)"},
		{`ss.log("info")`, "ss.log: bad argument #2 'message' (string expected, got nil)"},
		{`ss.log(nil, "x")`, "ss.log: bad argument #1 'level' (string expected, got nil)"},
		{`ss.warn()`, "ss.warn: bad argument #1 'message' (string expected, got nil)"},
		{`ss.timer()`, "ss.timer: bad argument #1 'name' (string expected, got nil)"},
		{`ss.timer("t")`, "ss.timer: bad argument #2 'delay_ms' (number expected, got nil)"},
		{`ss.timer("t", "5")`, "ss.timer: bad argument #2 'delay_ms' (number expected, got string)"},
		{`ss.timer("t", 5, "x")`, "ss.timer: bad argument #3 'options' (table expected, got string)"},
		{`ss.timer("t", 5, {every = "1"})`, "ss.timer: option 'every' must be a number of milliseconds, got string"},
		{`ss.timer("t", 5, {payload = {}})`, "ss.timer: option 'payload' must be a string, got table"},
		{`ss.timer("t", 5, {payload = true})`, "ss.timer: option 'payload' must be a string, got boolean"},
		{`ss.cancel()`, "ss.cancel: bad argument #1 'name' (string expected, got nil)"},
		{`ss.cancel({})`, "ss.cancel: bad argument #1 'name' (string expected, got table)"},
		{`ss.keys()`, "ss.keys: bad argument #1 'pattern' (string expected, got nil)"},
		{`ss.keys("t/*", "5")`, "ss.keys: bad argument #2 'limit' (number expected, got string)"},
		{`ss.watch_pattern({})`, "ss.watch_pattern: bad argument #1 'pattern' (string expected, got table)"},
		{`ss.watch_pattern("t/*", {self = 1})`, "ss.watch_pattern: option 'self' must be a boolean, got number"},
		{`ss.unwatch_pattern()`, "ss.unwatch_pattern: bad argument #1 'pattern' (string expected, got nil)"},
	} {
		h := abitest.New()
		got := evalRule(t, h, `pcall(function() return `+tc.expr+` end)`)
		if want := "boolean:false | string:verb.lua:"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ": "+tc.msg) {
			t.Errorf("%s: %q, want a raised error %q with the rule's position", tc.expr, got, tc.msg)
		}
		for _, verb := range abi.Verbs() {
			if n := h.Calls(verb); n != 0 {
				t.Errorf("%s: host %s called %d times", tc.expr, verb, n)
			}
		}
	}
}
