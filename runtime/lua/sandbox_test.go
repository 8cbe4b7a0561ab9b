package lua

import (
	"context"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

func TestSandboxForbidden(t *testing.T) {
	rt := New(Config{})
	for _, name := range []string{
		"io", "os", "debug", "package", "channel", "coroutine",
		"dofile", "loadfile", "load", "loadstring", "collectgarbage",
		"getfenv", "setfenv", "newproxy", "_printregs", "module",
	} {
		src := "assert(" + name + " == nil and rawget(_G, '" + name + "') == nil, '" + name + " is reachable')\nfunction on_event() end"
		if _, err := compileRule(t, rt, "forbidden.lua", src).Start(context.Background(), abitest.New(), abi.Limits{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSandboxAllowed(t *testing.T) {
	_, err := compileRule(t, New(Config{}), "allowed.lua", `
for _, name in ipairs({"assert", "error", "ipairs", "pairs", "next", "pcall", "xpcall", "select",
    "tonumber", "tostring", "type", "unpack", "rawget", "rawset", "rawequal", "setmetatable",
    "getmetatable", "print", "require"}) do
  assert(type(_G[name]) == "function", name .. " missing")
end
for _, lib in ipairs({"string", "table", "math"}) do
  assert(type(_G[lib]) == "table", lib .. " missing")
end
assert(string.upper("a") == "A" and ("x"):rep(2) == "xx" and math.floor(2.5) == 2)
assert(table.concat({"a", "b"}, ",") == "a,b")
assert(_VERSION == "Lua 5.1")
math.randomseed(42) -- a no-op, but callable
local r = math.random(1, 6)
assert(r >= 1 and r <= 6)
assert(not pcall(string.dump, print))
function on_event() end`).Start(context.Background(), abitest.New(), abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRequire(t *testing.T) {
	rt := New(Config{})
	_, err := compileRule(t, rt, "req.lua", `
local a, b = require("ssrun"), require("ssrun")
assert(a == b and type(a.get) == "function")
function on_event() end`).Start(context.Background(), abitest.New(), abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"os", "io", "string", "ssrun.x", "json", ""} {
		_, err := compileRule(t, rt, "req.lua", "require('"+name+"')\nfunction on_event() end").Start(context.Background(), abitest.New(), abi.Limits{})
		e := wantErr(t, err, abi.ErrCrashed, 1)
		if want := "module '" + name + "' not available"; e.Msg != want {
			t.Errorf("require(%q): %q, want %q", name, e.Msg, want)
		}
	}
}

func TestPrintLogsAtInfo(t *testing.T) {
	h := abitest.New()
	startRule(t, `
print("a", 1, nil, true, 2.5, setmetatable({}, {__tostring = function() return "T" end}))
print()
function on_event() end`, h, abi.Limits{})
	got := h.Logs()
	want := []string{"a\t1\tnil\ttrue\t2.5\tT", ""}
	if len(got) != len(want) {
		t.Fatalf("logs %+v, want %q", got, want)
	}
	for i, l := range got {
		if l.Level != abi.LevelInfo || l.Msg != want[i] {
			t.Errorf("log %d: %+v, want info %q", i, l, want[i])
		}
	}
}

func TestStringMetatableIsolated(t *testing.T) {
	// Two scripts of one program: patching string (every string's
	// metatable) in one must not change the other.
	p := compileRule(t, New(Config{}), "patch.lua", `
function on_event(ev)
  if ev.value == "patch" then
    getmetatable("").__index.upper = function() return "patched" end
    string.len = nil
  end
  result = ("abc"):upper()
end`)
	var scripts [2]*script
	for i := range scripts {
		s, err := p.Start(context.Background(), abitest.New(), abi.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		scripts[i] = s.(*script)
	}
	if err := scripts[0].Handle(context.Background(), setEvent("k", "patch")); err != nil {
		t.Fatal(err)
	}
	if err := scripts[1].Handle(context.Background(), setEvent("k", "x")); err != nil {
		t.Fatal(err)
	}
	if got := scripts[0].st.L.GetGlobal("result"); got != glua.LString("patched") {
		t.Errorf("patching script sees %v", got)
	}
	if got := scripts[1].st.L.GetGlobal("result"); got != glua.LString("ABC") {
		t.Errorf("the other script sees %v: the patch leaked", got)
	}
	if got := scripts[1].st.L.GetField(scripts[1].st.L.GetGlobal("string"), "len"); got.Type() != glua.LTFunction {
		t.Errorf("string.len in the other script is %v", got)
	}
}

func TestCheckFormat(t *testing.T) {
	for f, ok := range map[string]bool{
		"": true, "%d": true, "%%": true, "100%%": true, "%-5s": true, "%99d": true, "%.99f": true,
		"%+#0 12.34f": true, "%%100d": true, "%00000001d": true, "%c%i%o%u%x%X%e%E%g%G%q%s": true,
		"%": false, "%5": false, "%100d": false, "%.100f": false, "%1.123f": false, "%%%100d": false,
		"%-0100d": false, "%[1]999999d": false, "%*d": false, "%v": false, "%T": false, "%5.2": false,
	} {
		if err := checkFormat(f); (err == nil) != ok {
			t.Errorf("checkFormat(%q) = %v, want ok=%v", f, err, ok)
		}
	}
	if !strings.Contains(checkFormat("%123d").Error(), "width") {
		t.Error("width error does not say width")
	}
}
