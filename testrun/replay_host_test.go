package testrun_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// leaderRule locks pump/leader, writes the level fenced with it and the
// host's clock; a refused write is reported with its status.
const leaderRule = `local ss = require("ssrun")
ss.watch("level")
function on_event(ev)
  local token = assert(ss.lock("leader", 60000))
  local ok, msg, code = ss.set("command", ev.value, {fence = "leader"})
  if not ok then ss.set("refused", code .. " " .. ev.value) return end
  ss.set("at", tostring(ss.now()))
end
`

// pumpTrace is what a host running leaderRule records: two levels, the
// second after another holder took the lock (its fenced write FENCED).
func pumpTrace(t testing.TB) *testrun.TraceData {
	t.Helper()
	const start = 1767225600000
	var b strings.Builder
	hr, err := testrun.NewHostRecorder(&b, time.UnixMilli(start))
	if err != nil {
		t.Fatal(err)
	}
	const r = "pump.lua"
	hr.RecordConnection(start, true)
	hr.RecordCall(r, start+1, host.Call{Verb: "watch", Key: "level"})
	hr.RecordEvent(r, start+1000, abi.Event{Key: "level", Op: abi.OpSet, Value: []byte("40"), Version: "001767225601000:00001:StateStore"})
	hr.RecordCall(r, start+1001, host.Call{Verb: "lock", Key: "leader", TTL: time.Minute, Version: "001767225601001:00001:StateStore"})
	hr.RecordCall(r, start+1002, host.Call{Verb: "set", Key: "command", Value: []byte("40"), Fence: "leader", Version: "001767225601002:00001:StateStore"})
	hr.RecordCall(r, start+1003, host.Call{Verb: "now", Now: start + 1003})
	hr.RecordCall(r, start+1003, host.Call{Verb: "set", Key: "at", Value: []byte(fmt.Sprint(start + 1003)), Version: "001767225601003:00001:StateStore"})
	hr.RecordEvent(r, start+5000, abi.Event{Key: "level", Op: abi.OpSet, Value: []byte("60"), Version: "001767225605000:00001:StateStore"})
	hr.RecordCall(r, start+5001, host.Call{Verb: "lock", Key: "leader", TTL: time.Minute, Version: "001767225601001:00001:StateStore"})
	hr.RecordCall(r, start+5002, host.Call{Verb: "set", Key: "command", Value: []byte("60"), Fence: "leader",
		Status: abi.StatusFenced, Err: "the request fencing token is a lower version than the fencing token protecting the resource"})
	hr.RecordCall(r, start+5003, host.Call{Verb: "set", Key: "refused", Value: []byte("FENCED 60"), Version: "001767225605003:00001:StateStore"})
	if hr.Err() != nil || hr.Records() != 11 {
		t.Fatalf("recorder: %v, %d records", hr.Err(), hr.Records())
	}
	tr, err := testrun.ParseTrace("pump.trace", strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return tr
}

func ruleDir(t testing.TB, name, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// replayMismatches replays tr on the Lua rules in dir: the output and
// the mismatches, one per line.
func replayMismatches(t testing.TB, tr *testrun.TraceData, dir string) (out, mismatches string) {
	t.Helper()
	rt := lua.New(lua.Config{Rand: testrun.Rand})
	defer rt.Close(context.Background())
	var ms []string
	writes, err := testrun.Replay(context.Background(), tr, dir, testrun.ReplayOptions{Runtimes: []abi.Runtime{rt},
		Mismatch: func(m testrun.Mismatch) { ms = append(ms, m.String()) }})
	if err != nil {
		t.Fatal(err)
	}
	return text(t, writes), strings.Join(ms, "\n")
}

// A host trace replays the rule on what it saw: the lock's token, the
// clock reading, and the fenced write the store refused, FENCED again.
func TestReplayHostTrace(t *testing.T) {
	out, ms := replayMismatches(t, pumpTrace(t), ruleDir(t, "pump.lua", leaderRule))
	want := `+1000ms line 4 pump.lua SET command "40"
+1000ms line 4 pump.lua SET at "1767225601003"
+5000ms line 9 pump.lua SET command "60" FENCED
+5000ms line 9 pump.lua SET refused "FENCED 60"
`
	if out != want || ms != "" {
		t.Fatalf("replay:\n%s\nmismatches:\n%s\nwant:\n%s", out, ms, want)
	}
}

// A rule that asks differently from the recording is told apart: a
// request made differently (answered with the recorded reply), one the
// live run did not make (INTERNAL), one the replay did not make.
func TestReplayHostMismatch(t *testing.T) {
	changed := strings.NewReplacer(`ss.set("command", ev.value`, `ss.set("command", ev.value .. "%"`,
		`ss.set("at", tostring(ss.now()))`, `ss.get("extra")`).Replace(leaderRule)
	out, ms := replayMismatches(t, pumpTrace(t), ruleDir(t, "pump.lua", changed))
	want := `+1000ms line 4 pump.lua SET command "40%"
+5000ms line 9 pump.lua SET command "60%" FENCED
+5000ms line 9 pump.lua SET refused "FENCED 60"
`
	wantMs := `line 4 pump.lua: the live run made set command "40" fence=leader -> OK (line 6), the replay set command "40%" fence=leader
line 4 pump.lua: the live run did not make get extra
line 4 pump.lua: the replay did not make now -> OK (line 7)
line 4 pump.lua: the replay did not make set at "1767225601003" -> OK (line 8)
line 9 pump.lua: the live run made set command "60" fence=leader -> FENCED (line 11), the replay set command "60%" fence=leader`
	if out != want || ms != wantMs {
		t.Fatalf("replay:\n%s\nmismatches:\n%s\nwant:\n%s\nand:\n%s", out, ms, want, wantMs)
	}
}

// A hostile host trace is refused with its file and line.
func TestParseHostTraceRefuses(t *testing.T) {
	const hdr = `{"ssrun_trace":2,"start_ms":1000,"keys":[],"source":"host"}` + "\n"
	refusesTraces(t, []refusedTrace{
		{"future format", `{"ssrun_trace":3,"start_ms":0}` + "\n", "t.trace:1: trace format 3"},
		{"source in format 1", `{"ssrun_trace":1,"start_ms":0,"source":"host"}` + "\n", `t.trace:1: trace source "host"`},
		{"unknown source", `{"ssrun_trace":2,"start_ms":0,"source":"mars"}` + "\n", `t.trace:1: trace source "mars"`},
		{"seed in a client trace", `{"ssrun_trace":2,"start_ms":0,"seed":7}` + "\n", `t.trace:1: a seed in a trace without "source":"host"`},
		{"bad kind", hdr + `{"t_ms":1000,"kind":"exec","rule":"r.lua"}` + "\n", `t.trace:2: unknown record kind "exec"`},
		{"notify in a host trace", hdr + `{"t_ms":1000,"kind":"notify","key":"k","op":"DELETE"}` + "\n", "t.trace:2: a notify record in a trace recorded inside a host"},
		{"call in a client trace", `{"ssrun_trace":2,"start_ms":1000}` + "\n" + `{"t_ms":1000,"kind":"call","rule":"r","verb":"now","status":"OK"}` + "\n", "t.trace:2: a call record in a trace without"},
		{"call without a rule", hdr + `{"t_ms":1000,"kind":"call","verb":"now","status":"OK"}` + "\n", "t.trace:2: call without a rule"},
		{"unknown request", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"exec","key":"k","status":"OK"}` + "\n", `t.trace:2: call of unknown verb "exec"`},
		{"unknown status", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"del","key":"k","status":"MAYBE"}` + "\n", `t.trace:2: call del: unknown status "MAYBE"`},
		{"reply that is no reply of the request", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"del","key":"k","status":"OK","version":"v"}` + "\n", "t.trace:2: call del with a field it does not have (version)"},
		{"error on OK", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"del","key":"k","status":"OK","error":"no"}` + "\n", `t.trace:2: call del: status OK with error "no"`},
		{"get found but failed", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"get","key":"k","found":true,"status":"NOT_FOUND","error":"x"}` + "\n", "t.trace:2: call get: found and the status disagree"},
		{"set without value", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"set","key":"k","status":"OK"}` + "\n", "t.trace:2: call set without its value"},
		{"bad op", hdr + `{"t_ms":1000,"kind":"event","rule":"r","key":"k","op":"BOOM"}` + "\n", `t.trace:2: event op "BOOM"`},
		{"deadline on a SET", hdr + `{"t_ms":1000,"kind":"event","rule":"r","key":"k","op":"SET","value":"1","deadline":5}` + "\n", "t.trace:2: event SET with a field it does not have (deadline)"},
		{"negative ttl", hdr + `{"t_ms":1000,"kind":"call","rule":"r","verb":"lock","key":"l","ttl_ms":-1,"status":"OK"}` + "\n", "t.trace:2: call lock: a negative duration"},
		{"time goes back", hdr + `{"t_ms":1000,"kind":"connected"}` + "\n" + `{"t_ms":999,"kind":"connected"}` + "\n", "t.trace:3: t_ms 999 goes back"},
		{"before the start", hdr + `{"t_ms":999,"kind":"connected"}` + "\n", "t.trace:2: t_ms 999 goes back"},
	})
}

// A line longer than the bound is refused with its line number, without
// reading the rest of the input.
func TestParseTraceHugeLine(t *testing.T) {
	hdr := strings.NewReader(`{"ssrun_trace":2,"start_ms":1000,"keys":[],"source":"host"}` + "\n")
	endless := io.MultiReader(hdr, strings.NewReader(`{"t_ms":1000,"kind":"connected","pad":"`), repeatReader('a'))
	_, err := testrun.ParseTrace("t.trace", endless)
	if err == nil || !strings.HasPrefix(err.Error(), "t.trace:2: line longer than") {
		t.Fatalf("error %v", err)
	}
}

// repeatReader reads c forever.
type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// A host trace cut short by a kill keeps its whole lines; format 1
// traces are still read.
func TestParseHostTraceTruncatedAndFormat1(t *testing.T) {
	in := `{"ssrun_trace":2,"start_ms":1000,"keys":[],"source":"host"}` + "\n" +
		`{"t_ms":1000,"kind":"event","rule":"r","key":"k","op":"DELETE"}` + "\n" +
		`{"t_ms":1001,"kind":"call","rule":"r","verb":"g`
	tr, err := testrun.ParseTrace("t.trace", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Truncated || len(tr.Records) != 1 || tr.Records[0].Line != 2 || tr.Header.Source != testrun.SourceHost {
		t.Fatalf("truncated=%v records=%+v", tr.Truncated, tr.Records)
	}
	if _, err := testrun.ParseTrace("old.trace", strings.NewReader(`{"ssrun_trace":1,"start_ms":1000,"keys":["k"]}`+"\n")); err != nil {
		t.Fatalf("format 1: %v", err)
	}
}

// The recorder stops at the first write error and reports it.
func TestHostRecorderWriteError(t *testing.T) {
	w := &failingWriter{after: 1}
	hr, err := testrun.NewHostRecorder(w, time.UnixMilli(1000))
	if err != nil {
		t.Fatal(err)
	}
	hr.RecordConnection(1000, true)
	hr.RecordConnection(1001, false)
	if err := hr.Err(); err == nil || !errors.Is(err, errDiskFull) || hr.Records() != 0 || w.writes != 2 {
		t.Fatalf("err %v, %d records, %d writes", err, hr.Records(), w.writes)
	}
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{ after, writes int }

func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes > w.after {
		return 0, errDiskFull
	}
	return len(p), nil
}
