package lua

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestDeadlineIsAlwaysATimeout is issue 14, point 5: a handler whose last
// instruction was a tail-called pcall of an infinite loop returned success
// after its deadline. pcall and xpcall no longer catch the stop, and a call
// that returns after its deadline is a timeout however it returns.
func TestDeadlineIsAlwaysATimeout(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		line       int
	}{
		{"tail-called pcall", "return pcall(function()\n    while true do end\n  end)", 3},
		{"pcall then return", "local ok = pcall(function()\n    while true do end\n  end)\n  return ok", 3},
		{"tail-called xpcall", "return xpcall(function()\n    while true do end\n  end, function(e) return e end)", 3},
		{"xpcall whose handler loops", "return xpcall(function()\n    while true do end\n  end, function(e) while true do end end)", 3},
		{"pcall of pcall", "return pcall(pcall, function()\n    while true do end\n  end)", 3},
		{"error handler of pcall in a loop", "for i = 1, 1e9 do\n    pcall(error, 'x')\n  end", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := startRule(t, "function on_event(ev)\n  "+tc.body+"\nend", h, abi.Limits{CallTimeout: 50 * time.Millisecond})
			e := wantErr(t, s.Handle(context.Background(), setEvent("k", "v")), abi.ErrTimeout, tc.line)
			if !strings.Contains(e.Msg, "deadline") {
				t.Errorf("message %q", e.Msg)
			}
		})
	}
}

// lateHost ignores the call's deadline in Get: it waits for it to pass,
// then answers as if nothing happened.
type lateHost struct{ *abitest.Host }

func (h lateHost) Get(ctx context.Context, key string) (abi.Value, error) {
	<-ctx.Done()
	return abi.Value{Data: []byte("late"), Version: "v"}, nil
}

func TestReturnAfterDeadlineIsATimeout(t *testing.T) {
	h := lateHost{abitest.New()}
	s := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  return ss.get("k")
end`, h, abi.Limits{CallTimeout: 20 * time.Millisecond})
	wantErr(t, s.Handle(context.Background(), setEvent("k", "v")), abi.ErrTimeout, 0)
}

// TestSortHonoursDeadline: table.sort with a Go comparator (math.min) ran
// 5.2 s against a 1 s deadline on 1.2 million elements: no Lua instruction
// runs between comparisons, so gopher-lua never looked at the deadline.
// The comparisons are counted (math.min is wrapped), so the bound holds
// however slow the machine: an unbounded sort makes about n log2 n of them.
func TestSortHonoursDeadline(t *testing.T) {
	const n = 1_200_000
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  table.sort(t, math.min)
end`, h, abi.Limits{CallTimeout: 50 * time.Millisecond})
	L := s.(*script).st.L
	tbl := L.CreateTable(n, 0)
	for i := range n {
		tbl.RawSetInt(i+1, glua.LNumber((i*7919)%n))
	}
	L.SetGlobal("t", tbl)
	mathTbl := L.GetGlobal("math").(*glua.LTable)
	orig := mathTbl.RawGetString("min").(*glua.LFunction).GFunction
	comparisons := 0
	mathTbl.RawSetString("min", L.NewFunction(func(L *glua.LState) int { comparisons++; return orig(L) }))

	start := time.Now()
	err := s.Handle(context.Background(), setEvent("k", "v"))
	t.Logf("%v after %v and %d comparisons", err, time.Since(start), comparisons)
	wantErr(t, err, abi.ErrTimeout, 3)
	if unbounded := int(n * math.Log2(n)); comparisons > unbounded/8 {
		t.Errorf("%d comparisons, more than 1/8 of an unbounded sort's %d: the deadline did not stop it", comparisons, unbounded)
	}
}

func TestSortSemantics(t *testing.T) {
	for _, code := range []string{
		`local t = {5, 3, 1, 4, 2} table.sort(t) assert(table.concat(t, ",") == "1,2,3,4,5")`,
		`local t = {"b", "c", "a"} table.sort(t, function(a, b) return a > b end) assert(table.concat(t) == "cba")`,
		`local t = {} table.sort(t) assert(#t == 0)`,
		`local mt = {__lt = function(a, b) return a.v < b.v end}
		 local t = {setmetatable({v = 2}, mt), setmetatable({v = 1}, mt)}
		 table.sort(t) assert(t[1].v == 1)`,
		`local ok, err = pcall(table.sort, {1, "x"}) assert(not ok and err:find("attempt to compare"), err)`,
		`local ok, err = pcall(table.sort, {3, 2, 1}, function(a, b) error("boom") end) assert(not ok and err:find("boom"), err)`,
		`local ok, err = pcall(table.sort, 1) assert(not ok and err:find("table expected"), err)`,
	} {
		if _, err := compileRule(t, New(Config{}), "sort.lua", code+"\nfunction on_event() end").Start(context.Background(), abitest.New(), abi.Limits{}); err != nil {
			t.Errorf("%s: %v", code, err)
		}
	}
}

// TestErrorLines is issue 14, point 10 (Lua): a stop inside pcall named the
// line after the pcall; an escaped gopher-lua panic had no line; and
// math.random(0) showed Go's message.
func TestErrorLines(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		lim        abi.Limits
		sentinel   error
		line       int
		msg        string
	}{
		{"deadline inside pcall", `
  pcall(function()
    while true do end
  end)
  print("after")`, abi.Limits{CallTimeout: 20 * time.Millisecond}, abi.ErrTimeout, 4, "deadline"},
		{"memory inside pcall", `
  pcall(function()
    local a = string.rep("x", 1e6)
    local b = a .. a .. a
  end)
  print("after")`, abi.Limits{MemoryBytes: 2 << 20}, abi.ErrMemory, 5, "memory limit"},
		{"memory in a builder called by pcall", `
  pcall(string.rep, "x", 1e9)
  print("after")`, abi.Limits{MemoryBytes: 1 << 20}, abi.ErrMemory, 3, "memory limit"},
		{"gopher-lua panic (#282) escaping pcall", `
  local function g(...) return g(1, ...) end
  g()`, abi.Limits{CallTimeout: time.Minute}, abi.ErrCrashed, 3, "panicked"},
		{"gopher-lua panic (#282) inside pcall", `
  local ok = pcall(function()
    local function g(...) return g(1, ...) end
    g()
  end)
  print("after", ok)`, abi.Limits{CallTimeout: time.Minute}, abi.ErrCrashed, 4, "panicked"},
		{"math.random(0)", `
  local x = math.random(0)`, abi.Limits{}, abi.ErrCrashed, 3, "bad argument #1 to random (interval is empty)"},
		{"math.random(3, 1)", `
  local x = math.random(3, 1)`, abi.Limits{}, abi.ErrCrashed, 3, "bad argument #2 to random (interval is empty)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			// A small registry reaches #282 in milliseconds.
			p := compileRule(t, New(Config{RegistrySize: 256, RegistryMaxSize: 4096}), "rule.lua", "function on_event(ev)\n  -- line 2"+tc.body+"\nend")
			s, err := p.Start(context.Background(), h, tc.lim)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			e := wantErr(t, s.Handle(context.Background(), setEvent("k", "v")), tc.sentinel, tc.line)
			if !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("message %q, want %q", e.Msg, tc.msg)
			}
			if strings.Contains(e.Msg, "Intn") {
				t.Errorf("message %q is Go's", e.Msg)
			}
			if len(logs(h)) != 0 {
				t.Errorf("the rule went on after the stop: %q", logs(h))
			}
		})
	}
}

func TestMathRandom(t *testing.T) {
	for _, code := range []string{
		`for i = 1, 100 do local x = math.random() assert(x >= 0 and x < 1) end`,
		`for i = 1, 100 do local x = math.random(3) assert(x >= 1 and x <= 3 and x == math.floor(x)) end`,
		`for i = 1, 100 do local x = math.random(-2, 2) assert(x >= -2 and x <= 2) end`,
		`assert(math.random(5, 5) == 5)`,
		`local ok, err = pcall(math.random, 1, 2, 3) assert(not ok and err:find("wrong number of arguments"), err)`,
		`local ok, err = pcall(math.random, -9e18, 9e18) assert(not ok and err:find("interval is too large"), err)`,
		`local ok, err = pcall(math.random, "x") assert(not ok and err:find("number expected"), err)`,
	} {
		if _, err := compileRule(t, New(Config{}), "random.lua", code+"\nfunction on_event() end").Start(context.Background(), abitest.New(), abi.Limits{}); err != nil {
			t.Errorf("%s: %v", code, err)
		}
	}
}

// A Go panic inside a builtin is not a Lua error: pcall lets it through, the
// call fails at the rule's line and the state is rebuilt (gopher-lua's pcall
// caught it, and the rule went on with a state the panic may have left
// half-updated).
func TestGoPanicGoesThroughPcall(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
n = (n or 0) + 1
function on_event(ev)
  local ok = pcall(boom)
  print("after", ok)
end`, h, abi.Limits{})
	L := s.(*script).st.L
	L.SetGlobal("boom", L.NewFunction(func(*glua.LState) int { panic("kaboom") }))
	e := wantErr(t, s.Handle(context.Background(), setEvent("k", "v")), abi.ErrCrashed, 4)
	if !strings.Contains(e.Msg, "panicked: kaboom") || !strings.Contains(e.Msg, "state discarded") {
		t.Errorf("message %q", e.Msg)
	}
	if len(logs(h)) != 0 {
		t.Errorf("pcall caught the panic: %q", logs(h))
	}
	if s.(*script).st != nil {
		t.Error("the state was kept")
	}
}
