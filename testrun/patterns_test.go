package testrun_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/testrun"
)

// A pattern watch runs in ssrun test as it does live: the keys of the
// case's store at start, changes, keys created later found by the rescan
// when virtual time passes it (not before), at once when a rule writes
// them, and after the store comes back; ss.keys lists the world.
func TestPatternWatchWorld(t *testing.T) {
	rule := `local ss = require("ssrun")
assert(ss.watch_pattern("t/*/sp"))
ss.watch("count")
function on_event(ev)
  if ev.key == "count" then
    local keys = assert(ss.keys("t/*/sp"))
    ss.set("n", tostring(#keys))
    ss.set("t/made/sp", "1")
    return
  end
  local id = ev.key:match("^t/(.-)/sp$")
  if ev.op == "DELETE" then ss.del("hvac/" .. id) return end
  ss.set("hvac/" .. id, ev.value .. (ev.resync and " resync" or ""))
end`
	failed, out := run(t, map[string]string{"p.lua": rule}, `
cases:
  - name: pattern
    store: {t/1/sp: "20", t/2/sp: "21", other: "x"}
    steps:
      - set: {t/1/sp: "22"}
        expect:
          writes: [SET hvac/1 22]
          store: {hvac/1: "22", hvac/2: "21 resync"}
      - set: {t/3/sp: "23"}
        expect: {writes: []}
      - advance: 9s
        expect: {writes: []}
      - advance: 1s
        expect: {writes: [SET hvac/3 23 resync]}
      - delete: t/2/sp
        expect: {writes: [DEL hvac/2]}
      - set: {count: "go"}
        expect:
          writes: [SET n 2, SET t/made/sp 1]
          store: {n: "2", hvac/made: null}
      - store: down
      - set: {t/4/sp: "24", t/1/sp: "25"}
      - store: up
        expect: {writes: [SET hvac/1 25 resync, SET hvac/4 24 resync]}
`)
	if failed != 0 {
		t.Fatalf("failed:\n%s", out)
	}
}

// A host trace of a rule using the pattern verbs parses and replays: the
// keys reply and the pattern's events come from the recording.
func TestReplayPatternTrace(t *testing.T) {
	const start = 1767225600000
	var b strings.Builder
	hr, err := testrun.NewHostRecorder(&b, time.UnixMilli(start))
	if err != nil {
		t.Fatal(err)
	}
	const r = "fleet.lua"
	hr.RecordConnection(start, true)
	hr.RecordCall(r, start+1, host.Call{Verb: "watch_pattern", Key: "t/*"})
	hr.RecordEvent(r, start+2, abi.Event{Key: "t/1", Op: abi.OpSet, Value: []byte("20"), Version: "001767225600002:00001:StateStore", Resync: true})
	hr.RecordCall(r, start+3, host.Call{Verb: "keys", Key: "t/*", Limit: 10, Keys: []string{"t/1", "t/2"}})
	hr.RecordCall(r, start+4, host.Call{Verb: "set", Key: "n", Value: []byte("2"), Version: "001767225600004:00001:StateStore"})
	hr.RecordEvent(r, start+5, abi.Event{Key: "t/2", Op: abi.OpDelete, Version: "001767225600005:00001:StateStore"})
	hr.RecordCall(r, start+6, host.Call{Verb: "keys", Key: "t/*", Limit: 10, Keys: nil})
	hr.RecordCall(r, start+7, host.Call{Verb: "set", Key: "n", Value: []byte("0"), Version: "001767225600007:00001:StateStore"})
	hr.RecordCall(r, start+8, host.Call{Verb: "unwatch_pattern", Key: "t/*"})
	if hr.Err() != nil {
		t.Fatal(hr.Err())
	}
	tr, err := testrun.ParseTrace("fleet.trace", strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	rule := `local ss = require("ssrun")
assert(ss.watch_pattern("t/*"))
function on_event(ev)
  local keys = assert(ss.keys("t/*", 10))
  ss.set("n", tostring(#keys))
  if #keys == 0 then ss.unwatch_pattern("t/*") end
end`
	out, ms := replayMismatches(t, tr, ruleDir(t, r, rule))
	want := `+2ms line 4 fleet.lua SET n "2"
+5ms line 7 fleet.lua SET n "0"
`
	if out != want || ms != "" {
		t.Fatalf("replay:\n%s\nmismatches:\n%s\nwant:\n%s", out, ms, want)
	}
}
