package lua

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// rule50 is a 50-line rule of the usual shape.
const rule50 = `-- thermostat: keep heater state in line with the set point
local ss = require("ssrun")

local SETPOINT = "thermostat1/setPoint"
local TEMP = "thermostat1/temperature"
local HEATER = "thermostat1/heater"
local HYSTERESIS = 0.5

ss.watch(SETPOINT)
ss.watch(TEMP)

local last = { setpoint = nil, temp = nil }

local function number(v)
  if v == nil then return nil end
  local n = tonumber(v)
  if n == nil then
    ss.warn("not a number: " .. tostring(v))
  end
  return n
end

local function decide(setpoint, temp)
  if setpoint == nil or temp == nil then
    return nil
  end
  if temp < setpoint - HYSTERESIS then
    return "on"
  elseif temp > setpoint + HYSTERESIS then
    return "off"
  end
  return nil
end

function on_event(ev)
  if ev.op == "LOCK_LOST" then
    ss.error("lost lock " .. ev.key)
    return
  end
  if ev.key == SETPOINT then
    last.setpoint = number(ev.value)
  elseif ev.key == TEMP then
    last.temp = number(ev.value)
  end
  local want = decide(last.setpoint, last.temp)
  if want ~= nil then
    local ok, err, code = ss.set(HEATER, want, { nex = false, ttl = 60000 })
    if ok == nil then ss.error(string.format("set %s: %s (%s)", HEATER, err, code)) end
  end
end
`

// benchLimits never stop a benchmark loop.
var benchLimits = abi.Limits{CallTimeout: time.Hour, MemoryBytes: 1 << 40}

// quietHost is abitest.Host without log retention (b.N log lines would
// grow the heap).
type quietHost struct{ *abitest.Host }

func (quietHost) Log(int32, string) {}

// loopScript starts a rule whose on_event runs stmt ev.value times; nop
// is a Go function that does nothing. Close it when done.
func loopScript(h abi.Host, stmt string) *script {
	p, err := New(Config{}).Compile(context.Background(), "bench.lua", []byte(`
local ss = require("ssrun")
function on_event(ev)
  for i = 1, tonumber(ev.value) do
    `+stmt+`
  end
end`))
	if err != nil {
		panic(err)
	}
	s, err := p.Start(context.Background(), h, benchLimits)
	if err != nil {
		panic(err)
	}
	s.(*script).st.L.SetGlobal("nop", s.(*script).st.L.NewFunction(func(*glua.LState) int { return 0 }))
	return s.(*script)
}

// runLoop times b.N iterations of the loop in one on_event call.
func runLoop(b *testing.B, s *script) {
	b.Helper()
	ev := setEvent("k", strconv.Itoa(b.N))
	b.ResetTimer()
	if err := s.Handle(context.Background(), ev); err != nil {
		b.Fatal(err)
	}
}

// floorNs measures the bare host call (best of 3 loops of 200k) once per run.
var floorNs = sync.OnceValue(func() float64 {
	s := loopScript(abitest.New(), `nop("k")`)
	defer s.Close(context.Background())
	const n = 200000
	best := time.Duration(1 << 62)
	for range 3 {
		start := time.Now()
		if err := s.Handle(context.Background(), setEvent("k", strconv.Itoa(n))); err != nil {
			panic(err)
		}
		best = min(best, time.Since(start))
	}
	return float64(best.Nanoseconds()) / n
})

// BenchmarkVerbs times each verb called from a Lua loop against
// abitest.Host; x-floor is the ratio to the engine's bare host call (a Go
// function that does nothing, same loop), measured in the same run.
func BenchmarkVerbs(b *testing.B) {
	floor := floorNs()
	for _, bc := range []struct {
		name, stmt string
		setup      func(h *abitest.Host)
	}{
		{"floor", `nop("k")`, nil},
		{"get", `ss.get("k")`, func(h *abitest.Host) { h.Put("k", []byte("value")) }},
		{"get_absent", `ss.get("absent")`, nil},
		{"set", `ss.set("k", "value")`, nil},
		{"set_options", `ss.set("k", "value", {nx = true, ttl = 1000})`, nil},
		{"del", `ss.del("absent")`, nil},
		{"vdel", `ss.vdel("absent", "value")`, nil},
		{"watch", `ss.watch("k")`, nil},
		{"unwatch", `ss.unwatch("k")`, nil},
		{"lock", `ss.lock("L", 3000)`, nil},
		{"unlock", `ss.unlock("L")`, nil},
		{"log", `ss.log("info", "message")`, nil},
		{"failure", `ss.get("")`, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := abitest.New()
			if bc.setup != nil {
				bc.setup(h)
			}
			s := loopScript(quietHost{h}, bc.stmt)
			defer s.Close(context.Background())
			runLoop(b, s)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/floor, "x-floor")
		})
	}
}

// BenchmarkBuiltins times the Lua operations whose implementation the
// memory account touches (the .. operator, string builders, captures) and
// plain VM loops (the instruction hook), each in a loop of b.N iterations
// in one on_event call.
func BenchmarkBuiltins(b *testing.B) {
	for _, bc := range []struct{ name, stmt string }{
		{"arith", `x = i * 2 + 1`},
		{"table_store", `t[i % 64 + 1] = i`},
		{"concat2", `x = "k" .. i`},
		{"concat5", `x = "a" .. i .. "b" .. i .. "c"`},
		{"format", `x = string.format("%s=%d", "k", i)`},
		{"sub", `x = ("thermostat1/setPoint"):sub(1, 11)`},
		{"match", `x = ("thermostat1/setPoint"):match("^(%w+)/")`},
		{"upper", `x = ("thermostat1"):upper()`},
		{"table_concat", `x = table.concat(t3, ",")`},
		{"pcall", `pcall(nop)`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := loopScript(quietHost{abitest.New()}, bc.stmt)
			defer s.Close(context.Background())
			if err := s.st.L.DoString(`t = {} t3 = {"a", "b", "c"}`); err != nil {
				b.Fatal(err)
			}
			runLoop(b, s)
		})
	}
}

// BenchmarkCompile50 parses and compiles a 50-line rule (no cache).
func BenchmarkCompile50(b *testing.B) {
	for b.Loop() {
		if _, err := compile("rule50.lua", []byte(rule50)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompileCached is Runtime.Compile of an unchanged rule.
func BenchmarkCompileCached(b *testing.B) {
	rt := New(Config{})
	p := compileRule(b, rt, "rule50.lua", rule50)
	for b.Loop() {
		compileRule(b, rt, "rule50.lua", rule50)
	}
	runtime.KeepAlive(p)
}

// BenchmarkStart builds a sandbox and runs the 50-line rule's top-level
// code from the cached chunk.
func BenchmarkStart(b *testing.B) {
	p := compileRule(b, New(Config{}), "rule50.lua", rule50)
	h := quietHost{abitest.New()}
	for b.Loop() {
		s, err := p.Start(context.Background(), h, abi.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		s.Close(context.Background())
	}
}

// BenchmarkHandle is one Handle of a trivial on_event, and of the 50-line
// rule (two ss calls).
func BenchmarkHandle(b *testing.B) {
	for name, src := range map[string]string{"trivial": "function on_event(ev) end", "rule50": rule50} {
		b.Run(name, func(b *testing.B) {
			p := compileRule(b, New(Config{}), name+".lua", src)
			s, err := p.Start(context.Background(), quietHost{abitest.New()}, abi.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			ev := abi.Event{Key: "thermostat1/temperature", Op: abi.OpSet, Value: []byte("18.5"), Version: "v"}
			for b.Loop() {
				if err := s.Handle(context.Background(), ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemoryPerRule reports the live heap of one started 50-line rule.
func BenchmarkMemoryPerRule(b *testing.B) {
	const rules = 100
	p := compileRule(b, New(Config{}), "rule50.lua", rule50)
	h := quietHost{abitest.New()}
	var perRule float64
	for b.Loop() {
		scripts := make([]abi.Script, rules)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range scripts {
			s, err := p.Start(context.Background(), h, abi.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			scripts[i] = s
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perRule = float64(after.HeapAlloc-before.HeapAlloc) / rules
		for _, s := range scripts {
			s.Close(context.Background())
		}
	}
	b.ReportMetric(perRule, "bytes/rule")
}

// BenchmarkBaseline is bare gopher-lua, the floors of Compile50, Start and
// Handle: parse+compile without our checks, a state of the same sizes with
// the same four libraries and nothing else, and a protected call of an
// empty function with a fresh event-sized table under a context.
func BenchmarkBaseline(b *testing.B) {
	b.Run("parse+compile", func(b *testing.B) {
		for b.Loop() {
			chunk, err := parse.Parse(strings.NewReader(rule50), "rule50.lua")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := glua.Compile(chunk, "rule50.lua"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("4-lib state", func(b *testing.B) {
		o := Config{}.withDefaults()
		for b.Loop() {
			L := glua.NewState(glua.Options{SkipOpenLibs: true, CallStackSize: o.CallStackSize, RegistrySize: o.RegistrySize, RegistryMaxSize: o.RegistryMaxSize})
			for _, open := range []glua.LGFunction{glua.OpenBase, glua.OpenTable, glua.OpenString, glua.OpenMath} {
				L.Push(L.NewFunction(open))
				L.Call(0, 0)
			}
			L.Close()
		}
	})
	b.Run("pcall", func(b *testing.B) {
		L := glua.NewState(glua.Options{SkipOpenLibs: true})
		defer L.Close()
		if err := L.DoString("function f(ev) end"); err != nil {
			b.Fatal(err)
		}
		fn := L.GetGlobal("f")
		for b.Loop() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			L.SetContext(ctx)
			L.Push(fn)
			L.Push(L.CreateTable(0, 5))
			if err := L.PCall(1, 0, nil); err != nil {
				b.Fatal(err)
			}
			L.RemoveContext()
			cancel()
		}
	})
}

// BenchmarkPattern compares string.match and string.gsub on a typical
// input with gopher-lua's own implementation (the baseline).
func BenchmarkPattern(b *testing.B) {
	const code = `local line = "thermostat1/setPoint = 21.5 ; unit = C"
for i = 1, N do
  local k, v = line:match("^%s*([%w/]+)%s*=%s*([%d%.]+)")
  local s = line:gsub("%s+", "")
end`
	for _, impl := range []string{"ours", "gopher-lua"} {
		b.Run(impl, func(b *testing.B) {
			L := newState(Config{}.withDefaults(), abitest.New(), 1<<30).L
			if impl == "gopher-lua" {
				L = glua.NewState(glua.Options{SkipOpenLibs: true})
				for _, open := range []glua.LGFunction{glua.OpenBase, glua.OpenString} {
					L.Push(L.NewFunction(open))
					L.Call(0, 0)
				}
			}
			defer L.Close()
			L.SetGlobal("N", glua.LNumber(b.N))
			b.ResetTimer()
			if err := L.DoString(code); err != nil {
				b.Fatal(err)
			}
		})
	}
}
