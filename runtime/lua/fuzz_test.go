package lua

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// FuzzRule feeds arbitrary source to Compile, Start and Handle under short
// limits: nothing may panic, and every error is an *abi.CompileError or an
// *Error wrapping one of the abi handler sentinels.
func FuzzRule(f *testing.F) {
	for _, seed := range []string{
		rule50,
		"function on_event(ev) end",
		`local ss = require("ssrun") ss.watch("k") function on_event(ev) ss.set(ev.key, ev.value or "", {ttl = 5}) end`,
		`local ss = require("ssrun") function on_event(ev) print(ss.get(ev.key)) ss.del(ev.key) ss.vdel("a", "b", {fence = "L"}) end`,
		`local ss = require("ssrun") function on_event(ev) local t = ss.lock("L", 100, {wait = 1}) ss.unlock("L") ss.log("warn", tostring(t)) end`,
		`function on_event(ev) error({}) end`,
		`function on_event(ev) while true do end end`,
		`function on_event(ev) local s = "x" while true do s = s .. s end end`,
		`function on_event(ev) local t = {} for i = 1, 1e9 do t[i] = i end end`,
		`function on_event(ev) string.rep("x", 1e12) end`,
		`function on_event(ev) return table.concat({string.rep("x", 1e6)}, "", 1, 1) .. string.format("%5.2f", 1) end`,
		crash282 + "\nfunction on_event() end",
		"function on_event(ev) " + crash282 + " end",
		`local function f(n) return f(n + 1) + 1 end function on_event() f(1) end`,
		`function on_event(ev) return unpack({}, 1, 1e6) end`,
		`function on_event(ev) return string.byte(string.rep("x", 1e5), 1, -1) end`,
		`setmetatable(_G, {__index = function(t, k) return k end}) function on_event() return undefined .. 1 end`,
		`function on_event(ev) local s = ("x"):rep(100) return s:find("(x*)*y"), s:gsub("x", "%0%0") end`,
		`function on_event(ev) return pcall(function() while true do end end) end`,
		`function on_event(ev) return xpcall(function() local s = ("x"):rep(1e7) return s .. s .. s end, print) end`,
		`function on_event(ev) local a = ("x"):rep(1e6) return string.format("%s%s%q%-99s", a, a, a, a) end`,
		`local t = {} for i = 1, 1e5 do t[i] = -i end function on_event(ev) table.sort(t, math.min) end`,
		`local mt = {__concat = function(a, b) return {} end} function on_event(ev) return setmetatable({}, mt) .. "x" .. 1 end`,
		`keep = {} function on_event(ev) for i = 1, 1000 do keep[#keep + 1] = {i} end end`,
		`function on_event(ev) local t = {} t[6e7] = 1 return math.random(0) end`,
		`local ss = require("ssrun") function on_event(ev) ss.timer(ev.key, 0, {every = 10, payload = ev.value}) ss.cancel("x") return ss.now() end`,
		`local ss = require("ssrun") function on_event(ev) return ss.json.decode(ss.json.encode({ev.key, {ev.value or ss.json.null}, n = ss.now()})) end`,
		`local ss = require("ssrun") function on_event(ev) local t = {} t.t = t return pcall(ss.json.encode, t), ss.json.decode(("["):rep(1e5)) end`,
		"x = = 1",
		"local t = {{{{{{{{{{",
		"goto l",
		"return",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		ctx := context.Background()
		// A small registry reaches gopher-lua's #282 panic in milliseconds.
		rt := New(Config{RegistrySize: 256, RegistryMaxSize: 4096})
		p, err := rt.Compile(ctx, "fuzz.lua", []byte(src))
		if err != nil {
			var ce *abi.CompileError
			if !errors.As(err, &ce) || ce.File != "fuzz.lua" {
				t.Fatalf("compile error %v (%T) is not an *abi.CompileError", err, err)
			}
			return
		}
		h := abitest.New()
		lim := abi.Limits{CallTimeout: 20 * time.Millisecond, MemoryBytes: 16 << 20}
		s, err := p.Start(ctx, h, lim)
		checkRuleError(t, err)
		if err != nil {
			return
		}
		defer s.Close(ctx)
		for _, ev := range []abi.Event{
			{Key: "k", Op: abi.OpSet, Value: []byte("v\x00"), Version: "1"},
			{Key: "k", Op: abi.OpDelete, Resync: true},
			{Key: "L", Op: abi.OpLockLost},
			{Key: "t", Op: abi.OpTimer, Value: []byte(`{"a":[1]}`), Deadline: 1700000000000, Late: true},
		} {
			checkRuleError(t, s.Handle(ctx, ev))
		}
	})
}

func checkRuleError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var e *Error
	if !errors.As(err, &e) || !(errors.Is(err, abi.ErrCrashed) || errors.Is(err, abi.ErrTimeout) || errors.Is(err, abi.ErrMemory)) {
		t.Fatalf("error %v (%T) is not an *Error wrapping an abi handler sentinel", err, err)
	}
}
