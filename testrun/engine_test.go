package testrun_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// passes runs the rules and the test file (run) and fails the test unless
// every case passed.
func passes(t *testing.T, rules map[string]string, spec string) {
	t.Helper()
	if failed, out := run(t, rules, spec); failed != 0 {
		t.Fatalf("failed:\n%s", out)
	}
}

// run writes the rules and the test file into a folder and runs it,
// returning the number of failed cases and the text output.
func run(t *testing.T, rules map[string]string, spec string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, rules)
	p := filepath.Join(dir, "x.test.yaml")
	if err := os.WriteFile(p, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := lua.New(lua.Config{Rand: testrun.Rand})
	t.Cleanup(func() { rt.Close(context.Background()) })
	var out bytes.Buffer
	failed, err := testrun.Run(context.Background(), []string{p}, testrun.Options{Runtimes: []abi.Runtime{rt}, Report: &testrun.Reporter{Out: &out}})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return failed, out.String()
}

// A lost lock is told to its holder, and a fenced write after it fails
// with LOCK_LOST.
func TestLoseLock(t *testing.T) {
	rule := `local ss = require("ssrun")
ss.watch("go")
function on_event(ev)
  if ev.op == "LOCK_LOST" then ss.warn("lost " .. ev.key) return end
  assert(ss.lock("pump", 10000))
  local ok, msg, code = ss.set("pump/state", ev.value, {fence = "pump"})
  if not ok then ss.warn("write refused: " .. code) end
end`
	passes(t, map[string]string{"p.lua": rule}, `
cases:
  - name: lost
    steps:
      - set: {go: "1"}
        expect: {writes: [SET pump/state 1]}
      - lose_lock: pump
        expect: {logs: [lost pump], writes: []}
`)
}

// Two rules writing each other's keys are damped after host.DefaultMaxHops
// instead of looping for ever, with a log line saying so.
func TestFeedbackLoopDamped(t *testing.T) {
	ping := func(in, out string) string {
		return `local ss = require("ssrun")
ss.watch("` + in + `")
function on_event(ev) assert(ss.set("` + out + `", tostring((tonumber(ev.value) or 0) + 1))) end`
	}
	passes(t, map[string]string{"a.lua": ping("a", "b"), "b.lua": ping("b", "a")}, `
cases:
  - name: loop
    steps:
      - set: {a: "0"}
        expect:
          logs: [feedback loop between rules damped]
          store: {a: "16", b: "17"}
`)
}

// A key set with a TTL expires on the virtual clock and its watchers see
// the delete; periodic timers fire once per period.
func TestExpiryAndPeriodicTimer(t *testing.T) {
	rule := `local ss = require("ssrun")
ss.watch("lease")
assert(ss.timer("tick", 1000, {every = 1000}))
function on_event(ev)
  if ev.op == "TIMER" then
    local n = tonumber((ss.get("ticks"))) or 0
    assert(ss.set("ticks", tostring(n + 1)))
  elseif ev.op == "DELETE" then ss.info("lease gone at " .. ss.now())
  else assert(ss.set("lease", "renewed", {ttl = 500})) end
end`
	passes(t, map[string]string{"r.lua": rule}, `
start: 2026-01-01T00:00:00Z
cases:
  - name: clock
    steps:
      - set: {lease: held}
        expect: {store: {lease: renewed}}
      - advance: 3500ms
        expect:
          store: {ticks: "3", lease: null}
          logs: [lease gone at 1767225600500]
          timers: {r.lua: [tick]}
`)
}

// A failing expectation is reported with the step and the differences.
func TestFailureNamesStep(t *testing.T) {
	rule := `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) assert(ss.set("out", ev.value)) end`
	failed, out := run(t, map[string]string{"r.lua": rule}, `
cases:
  - name: wrong
    steps:
      - set: {in: "1"}
      - set: {in: "2"}
        expect:
          writes: [SET out 3]
          timers: {r.lua: [none]}
          status: {r.lua: {handled: 1}}
`)
	for _, want := range []string{
		"--- FAIL: x.test.yaml/wrong (",
		`step 2 (set in="2", line 6):`,
		"- SET out 3\n", "+ SET out 2\n",
		`timers of r.lua: want ["none"], got []`,
		"status of r.lua: want handled 1 failed 0, got handled 2 failed 0",
		"FAIL\t",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if failed != 1 {
		t.Errorf("failed = %d, want 1", failed)
	}
}

func TestIsTestFile(t *testing.T) {
	for name, want := range map[string]bool{
		"thermostat.test.yaml": true, "door_test.yaml": true, "a.test.yml": true,
		"ssrun.yaml": false, "thermostat.lua": false, "test.yaml": false, "README.md": false,
	} {
		if got := testrun.IsTestFile(name); got != want {
			t.Errorf("IsTestFile(%q) = %v", name, got)
		}
	}
}

// Bad files are refused with the file and line of the mistake.
func TestParseErrors(t *testing.T) {
	for spec, want := range map[string]string{
		"cases:\n  - name: a\n    steps:\n      - set: {a: b}\n        advance: 1s\n":  "f.yaml: line 4: case \"a\", step 1: want exactly one of",
		"cases:\n  - name: a\n    steps:\n      - sett: {a: b}\n":                      `f.yaml: line 4: step: unknown field "sett"`,
		"cases:\n  - name: a\n    steps:\n      - store: sideways\n":                   `line 4: case "a", step 1: store "sideways": want down or up`,
		"cases:\n  - name: a\n    steps: [{advance: 1s, expect: {writes: [PUT a]}}]\n": `line 3: case "a", step 1: writes: "PUT a"`,
		"cases:\n  - name: a\n    steps: [{delete: k}]\n  - name: a\n":                 `line 4: case "a" already at line 2`,
		"": "f.yaml: empty test file",
		"cases:\n  - name: a\n    steps: [{delete: k, expect: {status: {r.lua: {handeld: 1}}}}]\n": `status: unknown field "handeld"`,
		"cases:\n  - name: a\n    steps: [{reload: {r.lua: ../v2.lua}}]\n":                         `reload r.lua: ../v2.lua: want the names of a rule file and of a file next to the test file`,
		// A second document was dropped unread, its cases never run; a
		// null value was stored as "" (an expected store's null means
		// absent).
		"cases:\n  - name: a\n    steps: [{delete: k}]\n---\ncases:\n  - name: b\n    steps: [{delete: k}]\n": `f.yaml: line 5: a second YAML document (after ---)`,
		"cases:\n  - name: a\n    steps:\n      - set: {k: null}\n":                                           `f.yaml: line 4: k: null is not a value`,
		"cases:\n  - name: a\n    steps:\n      - set:\n          k:\n":                                       `f.yaml: line 5: k: null is not a value`,
		"cases:\n  - name: a\n    store: {k: ~}\n    steps: [{delete: k}]\n":                                  `f.yaml: line 3: k: null is not a value`,
		"cases:\n  - name: a\n    store: [k]\n    steps: [{delete: k}]\n":                                     `f.yaml: line 3: want a mapping of keys to values`,
	} {
		_, err := testrun.Parse("f.yaml", []byte(spec))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", spec, err, want)
		}
	}
}

// A reload step loads a new version of a rule as ssrun dev does on a save:
// the timer the old version armed fires in the new one, the rule's counts
// go on, and the rule file itself is not touched.
func TestReloadStep(t *testing.T) {
	v1 := `local ss = require("ssrun")
ss.watch("arm")
function on_event(ev)
  if ev.op == "TIMER" then ss.info("v1 fired") return end
  assert(ss.timer("t", 1000))
end`
	v2 := strings.Replace(v1, "v1 fired", "v2 fired", 1)
	passes(t, map[string]string{"r.lua": v1, "r_v2.txt": v2}, `
cases:
  - name: reload
    steps:
      - set: {arm: "1"}
        expect: {timers: {r.lua: [t]}}
      - reload: {r.lua: r_v2.txt}
        expect: {logs: [rule reloaded], timers: {r.lua: [t]}, status: {r.lua: {handled: 1}}}
      - advance: 1s
        expect: {logs: [v2 fired], no_logs: [v1 fired], status: {r.lua: {handled: 2}}}
  - name: the next case runs the file as it is
    steps:
      - set: {arm: "1"}
      - advance: 1s
        expect: {logs: [v1 fired]}
`)
}
