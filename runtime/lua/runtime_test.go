package lua

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// compileRule compiles src as name or fails the test.
func compileRule(t testing.TB, rt *Runtime, name, src string) abi.Program {
	t.Helper()
	p, err := rt.Compile(context.Background(), name, []byte(src))
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return p
}

// startRule compiles and starts src against h, closing it when the test ends.
func startRule(t testing.TB, src string, h abi.Host, lim abi.Limits) abi.Script {
	t.Helper()
	s, err := compileRule(t, New(Config{}), "rule.lua", src).Start(context.Background(), h, lim)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func setEvent(key, value string) abi.Event {
	return abi.Event{Key: key, Op: abi.OpSet, Value: []byte(value), Version: "v1"}
}

// logs returns the messages h has logged.
func logs(h *abitest.Host) []string {
	var out []string
	for _, l := range h.Logs() {
		out = append(out, l.Msg)
	}
	return out
}

// wantErr checks that err is an *Error wrapping sentinel at line (0: any).
func wantErr(t *testing.T, err error, sentinel error, line int) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %q", err, sentinel)
	}
	if line != 0 && e.Line != line {
		t.Fatalf("error %q: line %d, want %d", err, e.Line, line)
	}
	return e
}

func TestCompileErrorLines(t *testing.T) {
	rt := New(Config{})
	for _, tc := range []struct {
		src  string
		line int
	}{
		{"x = = 1", 1},
		{"local a = 1\n\nfunction f(\n  return 1\nend", 4},
		{"local a = 1\nx = 'abc\ny = 2", 2},
		{"local x = 1\nif x then\n", 3}, // unexpected end of file: the line after the last newline
		{"x = 1\n\n\ny = 0x", 4},
		{"for i=1 do end", 1},
		{"x = 1\nlocal t = {\n  a = 1,\n  b = 2\n  c = 3,\n}", 5},
		{"x = 1\n\n\n\nreturn\nx = 2", 6},
		{"goto nowhere", 1},
	} {
		_, err := rt.Compile(context.Background(), "rules/broken.lua", []byte(tc.src))
		var ce *abi.CompileError
		if !errors.As(err, &ce) {
			t.Errorf("%q: error %v (%T), want *abi.CompileError", tc.src, err, err)
			continue
		}
		if ce.File != "rules/broken.lua" || ce.Line != tc.line || ce.Msg == "" {
			t.Errorf("%q: %+v, want file rules/broken.lua line %d", tc.src, ce, tc.line)
		}
	}
}

func TestCompileLimits(t *testing.T) {
	rt := New(Config{})
	nest := func(n int) string {
		return "x = 1\n" + strings.Repeat("do ", n) + "\n" + strings.Repeat("end ", n)
	}
	if _, err := rt.Compile(context.Background(), "ok.lua", []byte(nest(MaxSyntaxDepth))); err != nil {
		t.Fatalf("depth %d: %v", MaxSyntaxDepth, err)
	}
	for name, src := range map[string]string{
		"deep blocks":   nest(100000),
		"deep brackets": "x = 1\ny = " + strings.Repeat("{", MaxSyntaxDepth+1) + strings.Repeat("}", MaxSyntaxDepth+1),
		"deep parens":   "x = 1\ny = " + strings.Repeat("(", 1<<18) + "1" + strings.Repeat(")", 1<<18),
	} {
		_, err := rt.Compile(context.Background(), "deep.lua", []byte(src))
		var ce *abi.CompileError
		if !errors.As(err, &ce) || ce.Line != 2 || !strings.Contains(ce.Msg, "too many syntax levels") {
			t.Errorf("%s: %v, want a compile error at line 2 about syntax levels", name, err)
		}
	}
	_, err := rt.Compile(context.Background(), "big.lua", []byte("x = 1\n--"+strings.Repeat("x", MaxSourceBytes)))
	var ce *abi.CompileError
	if !errors.As(err, &ce) || !strings.Contains(ce.Msg, "limit") {
		t.Errorf("oversized source: %v, want a compile error about the limit", err)
	}
}

func TestCompileCache(t *testing.T) {
	rt := New(Config{})
	src := "function on_event(ev) end"
	a := compileRule(t, rt, "a.lua", src).(*program)
	if b := compileRule(t, rt, "a.lua", src).(*program); b.proto != a.proto {
		t.Error("same name and source compiled twice")
	}
	if c := compileRule(t, rt, "c.lua", src).(*program); c.proto == a.proto {
		t.Error("another name shares the compiled chunk (its error messages would name a.lua)")
	}
	if n := rt.cached(); n != 2 {
		t.Errorf("cache holds %d chunks, want 2", n)
	}
	runtime.KeepAlive(a)
	// Unused chunks leave the cache once collected.
	deadline := time.Now().Add(10 * time.Second)
	for rt.cached() > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if n := rt.cached(); n != 0 {
		t.Errorf("cache still holds %d chunks no program uses", n)
	}
}

func TestLoadErrors(t *testing.T) {
	rt := New(Config{})
	for _, tc := range []struct {
		name, src string
		line      int
		msg       string
	}{
		{"error", "local x = 1\nerror('bad config')\nfunction on_event() end", 2, "bad config"},
		{"undefined function", "local ss = require('ssrun')\n\nundefined_fn(1)\nfunction on_event() end", 3, "attempt to call a non-function object"},
		{"error in a function", "local function f()\n  local t = nil\n  return t.x\nend\nf()\nfunction on_event() end", 3, "attempt to index"},
		{"error object", "function on_event() end\n\nerror({code = 1})", 3, "error object is a table value"},
		{"error level 0", "function on_event() end\nerror('plain', 0)", 2, "plain"},
		// A helper's error(msg, 2) names its caller's line, as in Lua 5.1;
		// level 3 its caller's caller.
		{"error level 2", "local function check(ok)\n  if not ok then error('failed', 2) end\nend\nfunction on_event() end\n\ncheck(false)", 6, "failed"},
		{"error level 3", "local function check(ok)\n  if not ok then error('failed', 3) end\nend\nlocal function use()\n  check(false)\nend\nfunction on_event() end\nuse()", 8, "failed"},
		{"error level 1", "local function check(ok)\n  if not ok then error('failed', 1) end\nend\nfunction on_event() end\ncheck(false)", 2, "failed"},
		{"bad require", "local json = require('json')", 1, "module 'json' not available"},
		{"no on_event", "local x = 1", 0, "no global function on_event"},
		{"on_event not a function", "on_event = 42", 0, "no global function on_event"},
		// on_event is looked up raw: a recursing __index never runs outside a call
		{"metatable on _G", "setmetatable(_G, {__index = function(t, k) return t[k] end})", 0, "no global function on_event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compileRule(t, rt, "rules/x.lua", tc.src).Start(context.Background(), abitest.New(), abi.Limits{})
			e := wantErr(t, err, abi.ErrCrashed, tc.line)
			if e.File != "rules/x.lua" || e.Call != "load" || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("error %+v, want file rules/x.lua, call load, message containing %q", e, tc.msg)
			}
			if tc.line > 0 && !strings.HasPrefix(err.Error(), fmt.Sprintf("rules/x.lua:%d: ", tc.line)) {
				t.Errorf("message %q does not start with file:line", err)
			}
		})
	}
}

func TestEventFields(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  ss.log("info", string.format("%s|%s|%s|%s|%s|%s|%s|%s", type(ev.value), ev.key, ev.op,
    tostring(ev.value), ev.version, tostring(ev.resync), type(ev.resync), tostring(ev.coalesced)))
end`, h, abi.Limits{})
	events := []abi.Event{
		{Key: "k\x00\r\n", Op: abi.OpSet, Value: []byte("v\r\n\x00\xff"), Version: "001:00001:x"},
		{Key: "k", Op: abi.OpSet, Version: "002:00001:x", Resync: true},
		{Key: "k", Op: abi.OpDelete, Version: "003:00001:x", Coalesced: 41},
		{Key: "lock1", Op: abi.OpLockLost},
	}
	want := []string{
		"string|k\x00\r\n|SET|v\r\n\x00\xff|001:00001:x|false|boolean|0",
		"string|k|SET||002:00001:x|true|boolean|0",
		"nil|k|DELETE|nil|003:00001:x|false|boolean|41",
		"nil|lock1|LOCK_LOST|nil||false|boolean|0",
	}
	for _, ev := range events {
		if err := s.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if got := logs(h); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events seen as\n%q\nwant\n%q", got, want)
	}
}

func TestHandleErrorKeepsState(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
n = 0
function on_event(ev)
  n = n + 1
  ss.log("info", "n=" .. n)
  if ev.value == "fail" then
    error("asked to fail")
  end
end`, h, abi.Limits{})
	ctx := context.Background()
	if err := s.Handle(ctx, setEvent("k", "ok")); err != nil {
		t.Fatal(err)
	}
	err := s.Handle(ctx, setEvent("k", "fail"))
	e := wantErr(t, err, abi.ErrCrashed, 8)
	if e.Call != "on_event" || e.Msg != "asked to fail" || !strings.Contains(e.Traceback, "rule.lua:8") {
		t.Errorf("error %+v", e)
	}
	if err := s.Handle(ctx, setEvent("k", "ok")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(logs(h), " "); got != "n=1 n=2 n=3" {
		t.Errorf("logs %q: the state was not kept after the error", got)
	}
}

func TestRedefinedOnEvent(t *testing.T) {
	s := startRule(t, "function on_event(ev) on_event = nil end", abitest.New(), abi.Limits{})
	if err := s.Handle(context.Background(), setEvent("k", "v")); err != nil {
		t.Fatal(err)
	}
	err := s.Handle(context.Background(), setEvent("k", "v"))
	if e := wantErr(t, err, abi.ErrCrashed, 0); !strings.Contains(e.Msg, "not a function") {
		t.Errorf("error %v", err)
	}
}

func TestClosed(t *testing.T) {
	rt := New(Config{})
	p := compileRule(t, rt, "a.lua", "function on_event() end")
	s, err := p.Start(context.Background(), abitest.New(), abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(context.Background(), setEvent("k", "v")); !errors.Is(err, ErrClosed) {
		t.Errorf("Handle after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Compile(context.Background(), "b.lua", []byte("x = 1")); !errors.Is(err, ErrClosed) {
		t.Errorf("Compile after Close: %v, want ErrClosed", err)
	}
	if rt.Kind() != "lua" {
		t.Errorf("Kind %q", rt.Kind())
	}
}

func TestConcurrentScripts(t *testing.T) {
	rt := New(Config{})
	p := compileRule(t, rt, "count.lua", `
local ss = require("ssrun")
local n = 0
function on_event(ev)
  n = n + 1
  local ok, err = ss.set(ev.key, tostring(n))
  assert(ok, err)
  local s = string.rep("x", 100) .. ev.value
  assert(#s == 100 + #ev.value)
end`)
	const scripts, events = 8, 50
	hosts := make([]*abitest.Host, scripts)
	var wg sync.WaitGroup
	errs := make(chan error, scripts+1)
	var shared abi.Script
	for i := range hosts {
		hosts[i] = abitest.New()
		s, err := p.Start(context.Background(), hosts[i], abi.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		if i == 0 {
			shared = s
		}
		wg.Go(func() {
			for j := range events {
				if err := s.Handle(context.Background(), setEvent("n", fmt.Sprint(j))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	// A second goroutine on script 0: the host never does this, but the
	// Script serialises it anyway.
	wg.Go(func() {
		for j := range events {
			if err := shared.Handle(context.Background(), setEvent("n", fmt.Sprint(j))); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, h := range hosts {
		want := fmt.Sprint(events)
		if i == 0 {
			want = fmt.Sprint(2 * events)
		}
		if v, _ := h.Value("n"); string(v) != want {
			t.Errorf("script %d counted %q events, want %s", i, v, want)
		}
	}
}

// A compiled program holds no spare capacity: gopher-lua's compiler leaves
// room for thousands of instructions in every function, which a cached
// program would keep for its whole life.
func TestCompiledProgramIsTrimmed(t *testing.T) {
	src := "local ss = require('ssrun')\nlocal function f(a) local t = {} for i = 1, a do t[i] = i * 2 end return t end\n" +
		"function on_event(ev) local x = f(3) ss.log('info', tostring(#x)) end\n"
	prog, err := New(Config{}).Compile(context.Background(), "trim.lua", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var check func(p *glua.FunctionProto)
	check = func(p *glua.FunctionProto) {
		if cap(p.Code) != len(p.Code) || cap(p.DbgSourcePositions) != len(p.DbgSourcePositions) || cap(p.Constants) != len(p.Constants) {
			t.Errorf("function at line %d: code %d/%d, positions %d/%d, constants %d/%d (len/cap)", p.LineDefined,
				len(p.Code), cap(p.Code), len(p.DbgSourcePositions), cap(p.DbgSourcePositions), len(p.Constants), cap(p.Constants))
		}
		for _, c := range p.FunctionPrototypes {
			check(c)
		}
	}
	check(prog.(*program).proto)
}
