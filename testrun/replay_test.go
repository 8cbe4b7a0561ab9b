package testrun_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// thermostatDir is a folder holding only the thermostat example's rule,
// with edit applied to its source.
func thermostatDir(t testing.TB, edit func(string) string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "examples", "thermostat", "thermostat.lua"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "thermostat.lua"), []byte(edit(string(src))), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func same(s string) string { return s }

// setPointTrace is a recorded trace of thermostat1/setPoint: the initial
// read, then n set points one second apart, cycling through values that
// are in range, clamped (with the rule's write-back echoed) and invalid.
func setPointTrace(t testing.TB, n int) *testrun.TraceData {
	t.Helper()
	const start = 1767225600000
	var b strings.Builder
	tw, err := testrun.NewTraceWriter(&b, testrun.TraceHeader{StartMs: start, Keys: []string{"thermostat1/setPoint"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(r testrun.Record, v string) {
		if r.Op != "DELETE" {
			r.SetBytes([]byte(v))
		}
		if err := tw.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	rec(testrun.Record{TMs: start, Kind: testrun.RecordGet, Key: "thermostat1/setPoint", Found: true, Version: "001767225600000:00000:StateStore"}, "20")
	for i := range n {
		at := int64(start + 1000*(i+1))
		v := fmt.Sprintf("%015d:%05d:StateStore", at, i+1)
		note := testrun.Record{TMs: at, Kind: testrun.RecordNotify, Key: "thermostat1/setPoint", Op: "SET", Version: v}
		switch i % 4 {
		case 0:
			rec(note, fmt.Sprint(17+i%10))
		case 1:
			rec(note, "35")
			note.TMs += 3
			rec(note, "28") // the rule's clamped write-back, seen by the recorder
		case 2:
			rec(note, "warm")
		case 3:
			note.Op = "DELETE"
			rec(note, "")
		}
	}
	tr, err := testrun.ParseTrace("mem.trace", strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return tr
}

func replay(t testing.TB, tr *testrun.TraceData, dir string) []testrun.Write {
	t.Helper()
	writes, _ := replayLogs(t, tr, dir)
	return writes
}

// replayLogs replays tr on the Lua rules in dir: their writes and logs.
func replayLogs(t testing.TB, tr *testrun.TraceData, dir string) (writes []testrun.Write, logs []string) {
	t.Helper()
	rt := lua.New(lua.Config{})
	defer rt.Close(context.Background())
	writes, err := testrun.Replay(context.Background(), tr, dir, testrun.ReplayOptions{Runtimes: []abi.Runtime{rt},
		Log: func(l string) { logs = append(logs, l) }})
	if err != nil {
		t.Fatal(err)
	}
	return writes, logs
}

func text(t testing.TB, writes []testrun.Write) string {
	t.Helper()
	var b bytes.Buffer
	if err := testrun.PrintWrites(&b, writes, false); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The thermostat replayed on a trace writes what it wrote live: the
// clamped target, the write-back (whose echo in the trace is not applied
// again) and the error of an invalid set point, each at its event's time.
func TestReplayThermostat(t *testing.T) {
	writes, logs := replayLogs(t, setPointTrace(t, 4), thermostatDir(t, same))
	got := text(t, writes)
	want := `+1000ms line 3 thermostat.lua SET hvac1/target "17"
+2000ms line 4 thermostat.lua SET hvac1/target "28"
+2000ms line 4 thermostat.lua SET thermostat1/setPoint "28"
+2000ms line 4 thermostat.lua DEL thermostat1/error
+3000ms line 6 thermostat.lua SET thermostat1/error "invalid set point \"warm\""
+4000ms line 7 thermostat.lua DEL hvac1/target
`
	// +2000ms DEL thermostat1/error is absent: the key did not exist.
	want = strings.Replace(want, "+2000ms line 4 thermostat.lua DEL thermostat1/error\n", "", 1)
	if got != want {
		t.Fatalf("replay:\n%s\nwant:\n%s", got, want)
	}
	wantLogs := []string{"thermostat.lua: info: set point 35 clamped to 28", `thermostat.lua: warn: invalid set point "warm"`}
	if fmt.Sprint(logs) != fmt.Sprint(wantLogs) {
		t.Fatalf("logs %q, want %q", logs, wantLogs)
	}
}

// Timers fire on the trace's clock, between the records around them.
func TestReplayTimer(t *testing.T) {
	dir := t.TempDir()
	rule := `local ss = require("ssrun")
ss.watch("door")
function on_event(ev)
  if ev.op == "TIMER" then assert(ss.set("alarm", "open since " .. ev.value)) return end
  if ev.value == "open" then assert(ss.timer("open", 5000, {payload = tostring(ss.now())})) end
end`
	if err := os.WriteFile(filepath.Join(dir, "door.lua"), []byte(rule), 0o644); err != nil {
		t.Fatal(err)
	}
	in := `{"ssrun_trace":1,"start_ms":1000000,"keys":["door"]}
{"t_ms":1001000,"kind":"notify","key":"door","op":"SET","value":"open","version":"v1"}
{"t_ms":1010000,"kind":"notify","key":"door","op":"SET","value":"shut","version":"v2"}
`
	tr, err := testrun.ParseTrace("door.trace", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, replay(t, tr, dir)), "+6000ms timer door.lua SET alarm \"open since 1001000\"\n"; got != want {
		t.Fatalf("replay:\n%s\nwant:\n%s", got, want)
	}
}

// The same trace replayed 100 times gives byte-identical output.
func TestReplayDeterministic(t *testing.T) {
	tr := setPointTrace(t, 40)
	dir := thermostatDir(t, same)
	first := text(t, replay(t, tr, dir))
	if strings.Count(first, "\n") < 40 {
		t.Fatalf("too few writes to prove anything:\n%s", first)
	}
	for i := range 99 {
		if got := text(t, replay(t, tr, dir)); got != first {
			t.Fatalf("replay %d differs from the first:\n%s\nfirst:\n%s", i+2, got, first)
		}
	}
}

// Two versions of a rule on the same trace: the diff shows the first
// differing writes; the same version shows none.
func TestReplayDiff(t *testing.T) {
	tr := setPointTrace(t, 8)
	a := replay(t, tr, thermostatDir(t, same))
	if d := testrun.DiffWrites(a, replay(t, tr, thermostatDir(t, same))); d != nil {
		t.Fatalf("same rule differs: %v", d)
	}
	b := replay(t, tr, thermostatDir(t, func(s string) string {
		return strings.Replace(s, "MIN, MAX  = 16, 28", "MIN, MAX  = 16, 30", 1)
	}))
	d := testrun.DiffWrites(a, b)
	if len(d) == 0 || !strings.Contains(d[0].String(), `- +2000ms line 4 thermostat.lua SET hvac1/target "28"`) ||
		!strings.Contains(d[0].String(), `+ +2000ms line 4 thermostat.lua SET hvac1/target "30"`) {
		t.Fatalf("diff: %v", d)
	}
}

// refusedTrace is a trace file named t.trace that ParseTrace refuses with
// an error containing want.
type refusedTrace struct{ name, in, want string }

// refusesTraces checks ParseTrace on each of traces, a subtest each.
func refusesTraces(t *testing.T, traces []refusedTrace) {
	for _, c := range traces {
		t.Run(c.name, func(t *testing.T) {
			_, err := testrun.ParseTrace("t.trace", strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// A corrupt or hostile trace is refused with its file and line.
func TestParseTraceRefuses(t *testing.T) {
	const hdr = `{"ssrun_trace":1,"start_ms":1000,"keys":["k"]}` + "\n"
	refusesTraces(t, []refusedTrace{
		{"empty", "", "t.trace:1: empty trace"},
		{"not json", "hello\n", "t.trace:1: not a trace header"},
		{"future format", `{"ssrun_trace":3,"start_ms":0}` + "\n", "t.trace:1: trace format 3"},
		{"unknown field", hdr + `{"t_ms":1000,"kind":"get","key":"k","evil":1}` + "\n", `t.trace:2: json: unknown field "evil"`},
		{"unknown kind", hdr + `{"t_ms":1000,"kind":"exec","key":"k"}` + "\n", `t.trace:2: unknown record kind "exec"`},
		{"time goes back", hdr + `{"t_ms":1000,"kind":"connected"}` + "\n" + `{"t_ms":999,"kind":"connected"}` + "\n", "t.trace:3: t_ms 999 goes back"},
		{"set without value", hdr + `{"t_ms":1000,"kind":"notify","key":"k","op":"SET"}` + "\n", "t.trace:2: notify SET without a value"},
		{"bad op", hdr + `{"t_ms":1000,"kind":"notify","key":"k","op":"EXPLODE","value":"x"}` + "\n", `t.trace:2: notify op "EXPLODE"`},
		{"two values", hdr + `{"t_ms":1000,"kind":"connected"} {"t_ms":1000,"kind":"connected"}` + "\n", "t.trace:2: more than one JSON value"},
		{"no key", hdr + `{"t_ms":1000,"kind":"get"}` + "\n", "t.trace:2: get without a key"},
	})
}

// A recorder killed mid-write leaves a last line without its newline: it
// is dropped, and the trace is marked truncated.
func TestParseTraceTruncated(t *testing.T) {
	in := `{"ssrun_trace":1,"start_ms":1000,"keys":["k"]}` + "\n" +
		`{"t_ms":1000,"kind":"notify","key":"k","op":"SET","value":"1"}` + "\n" +
		`{"t_ms":1001,"kind":"notify","key":"k","op":"SE`
	tr, err := testrun.ParseTrace("t.trace", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Truncated || len(tr.Records) != 1 || tr.Records[0].Line != 2 {
		t.Fatalf("truncated=%v records=%+v", tr.Truncated, tr.Records)
	}
}

// The trace parser never panics, and what it refuses it names with the
// file and a line number.
func FuzzParseTrace(f *testing.F) {
	f.Add(`{"ssrun_trace":1,"start_ms":1000,"keys":["k"]}` + "\n" + `{"t_ms":1000,"kind":"get","key":"k","found":true,"value":"1","version":"v"}` + "\n")
	f.Add(`{"ssrun_trace":1,"start_ms":0}` + "\n" + `{"t_ms":5,"kind":"notify","key":"k","op":"DELETE"}` + "\n" + `{"t_ms":6,"kind":"disconnected"}`)
	f.Add(`{"ssrun_trace":1}` + "\n" + `{"t_ms":1,"kind":"notify","key":"k","op":"SET","value_b64":"AAE="}` + "\n")
	f.Add("\n\n\n")
	const host = `{"ssrun_trace":2,"start_ms":1000,"keys":[],"source":"host"}` + "\n"
	f.Add(host + `{"t_ms":1000,"kind":"event","rule":"r.lua","key":"k","op":"SET","value":"1","version":"v","resync":true}` + "\n" +
		`{"t_ms":1001,"kind":"call","rule":"r.lua","verb":"set","key":"k","value":"2","fence":"l","status":"FENCED","error":"e"}` + "\n")
	f.Add(host + `{"t_ms":1000,"kind":"event","rule":"r","key":"t","op":"TIMER","value_b64":"AAE=","deadline":900,"late":true}` + "\n" +
		`{"t_ms":1000,"kind":"call","rule":"r","verb":"lock","key":"l","ttl_ms":5,"wait_ms":1,"status":"BUSY","error":"b"}` + "\n" +
		`{"t_ms":1000,"kind":"call","rule":"r","verb":"get","key":"k","found":true,"value":"x","version":"v","status":"OK"}` + "\n" +
		`{"t_ms":1002,"kind":"call","rule":"r","verb":"now","now_ms":1002,"status":"OK"}` + "\n" + `{"t_ms":1002,"kind":"disconnected"}`)
	f.Fuzz(func(t *testing.T, in string) {
		tr, err := testrun.ParseTrace("f.trace", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.trace:") {
				t.Fatalf("error without the file and line: %v", err)
			}
			return
		}
		for i, r := range tr.Records {
			if r.Line < 2 || i > 0 && r.Line <= tr.Records[i-1].Line {
				t.Fatalf("record %d at line %d", i, r.Line)
			}
		}
	})
}

// BenchmarkReplay measures replay speed: trace records per second through
// the thermostat (compare with bench's live handling, BENCHMARKS.md).
func BenchmarkReplay(b *testing.B) {
	const n = 1000
	tr := setPointTrace(b, n)
	dir := thermostatDir(b, same)
	rt := lua.New(lua.Config{})
	defer rt.Close(context.Background())
	b.ResetTimer()
	for range b.N {
		if _, err := testrun.Replay(context.Background(), tr, dir, testrun.ReplayOptions{Runtimes: []abi.Runtime{rt}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(tr.Records)*b.N)/b.Elapsed().Seconds(), "events/s")
}
