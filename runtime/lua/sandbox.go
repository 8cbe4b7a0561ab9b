package lua

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// removedGlobals are base functions gopher-lua registers that a rule must
// not have: filesystem and code loading, process-wide GC, environments,
// module system, debug output to stdout.
var removedGlobals = []string{
	"dofile", "loadfile", "load", "loadstring", // load code (or files)
	"collectgarbage",     // runs a process-wide runtime.GC
	"getfenv", "setfenv", // reach other functions' environments
	"module",     // package system (require is replaced)
	"newproxy",   // undocumented userdata factory
	"_printregs", // dumps registers to stdout
}

// state is one sandboxed gopher-lua state of a Script, with what its Go
// builtins need: the memory account and the call in progress.
type state struct {
	L    *glua.LState
	acct account
	// instructions counts VM instructions since the last tick (hook.go).
	instructions int
	// call is the call in progress (nil between calls).
	call *callContext
	// panicked is the first Go panic of the call in progress that pcall or
	// xpcall let through.
	panicked *panicInfo
	// concatFn is the builtin .. chains call (concat.go); strMeta is the
	// strings' metatable, which the rule may fill but not replace.
	concatFn *glua.LFunction
	strMeta  glua.LValue
	// patterns is what the rule's load did wrong with patterns (patterns.go).
	patterns patternLoad
}

// newState returns a state with only the base, table, string and math
// libraries (minus removedGlobals), print routed to h.Log, require serving
// the ssrun module alone, and the builtins replaced that allocate
// (strlib.go), ignore the deadline or catch the end of a call
// (builtins.go, protect.go). limit is the rule's memory limit.
func newState(opts Config, h abi.Host, limit int64) *state {
	L := glua.NewState(glua.Options{
		SkipOpenLibs:    true,
		CallStackSize:   opts.CallStackSize,
		RegistrySize:    opts.RegistrySize,
		RegistryMaxSize: opts.RegistryMaxSize,
	})
	st := &state{L: L, acct: newAccount(limit)}
	for _, lib := range []struct {
		name string
		open glua.LGFunction
	}{
		{glua.BaseLibName, glua.OpenBase},
		{glua.TabLibName, glua.OpenTable},
		{glua.StringLibName, glua.OpenString},
		{glua.MathLibName, glua.OpenMath},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(glua.LString(lib.name))
		L.Call(1, 0)
	}
	for _, name := range removedGlobals {
		L.SetGlobal(name, glua.LNil)
	}
	st.concatFn = L.NewFunction(st.concat)
	st.strMeta = L.GetMetatable(glua.LString(""))

	mod := newModule(L, st, h)
	L.SetGlobal("require", L.NewFunction(func(L *glua.LState) int {
		name := L.CheckString(1)
		if name != abi.ImportModule {
			L.RaiseError("module '%s' not available", name)
		}
		L.Push(mod)
		return 1
	}))
	L.SetGlobal("print", L.NewFunction(func(L *glua.LState) int {
		parts := make([]string, L.GetTop())
		size := int64(0)
		for i := range parts {
			parts[i] = L.ToStringMeta(L.Get(i + 1)).String()
			size += int64(len(parts[i]) + 1)
		}
		st.reserve(L, "print", size)
		h.Log(abi.LevelInfo, strings.Join(parts, "\t"))
		return 0
	}))
	// error and a failing assert copy a string message to prefix it with
	// the position; require names the module in its error.
	for name, arg := range map[string]int{"error": 1, "assert": 2, "require": 1} {
		orig := L.GetGlobal(name).(*glua.LFunction).GFunction
		L.SetGlobal(name, L.NewFunction(func(L *glua.LState) int {
			if s, ok := L.Get(arg).(glua.LString); ok && (name != "assert" || !L.ToBool(1)) {
				st.reserve(L, name, int64(len(s)))
			}
			if name == "error" {
				errorLevel(L)
			}
			return orig(L)
		}))
	}
	L.SetGlobal("pcall", L.NewFunction(st.pcall))
	L.SetGlobal("xpcall", L.NewFunction(st.xpcall))

	mathLib := L.GetGlobal(glua.MathLibName).(*glua.LTable)
	// math.random draws from Go's process-wide source unless opts.Rand
	// gives the state its own; reseeding the process-wide source would
	// touch every rule (it is a no-op since Go 1.24 unless GODEBUG says
	// otherwise), so randomseed does nothing.
	var r *rand.Rand
	if opts.Rand != nil {
		r = opts.Rand(h)
	}
	mathLib.RawSetString("randomseed", L.NewFunction(func(*glua.LState) int { return 0 }))
	mathLib.RawSetString("random", L.NewFunction(mathRandom(r)))

	str := L.GetGlobal(glua.StringLibName).(*glua.LTable)
	for name, fn := range map[string]glua.LGFunction{
		"rep":     st.strRep,
		"sub":     st.strSub,
		"reverse": st.strReverse,
		"upper":   st.strUpper,
		"lower":   st.strLower,
		"format":  st.strFormat,
		"find":    func(L *glua.LState) int { return st.strFind(L, true) },
		"match":   func(L *glua.LState) int { return st.strFind(L, false) },
		"gmatch":  st.strGmatch,
		"gsub":    st.strGsub,
	} {
		str.RawSetString(name, L.NewFunction(fn))
	}
	str.RawSetString("gfind", str.RawGetString("gmatch"))
	tab := L.GetGlobal(glua.TabLibName).(*glua.LTable)
	tab.RawSetString("concat", L.NewFunction(st.tableConcat(tab.RawGetString("concat").(*glua.LFunction).GFunction)))
	tab.RawSetString("sort", L.NewFunction(st.tableSort))
	return st
}

// checkFormat applies Lua 5.1's rules to a string.format template, which
// gopher-lua hands to Go's fmt as is: flags, at most two digits of width and
// of precision, and one of Lua's conversions. This keeps one directive from
// asking for a megabyte of padding and rules out fmt's own syntax (%[n],
// %*d, %v...).
func checkFormat(f string) error {
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		if i++; i < len(f) && f[i] == '%' {
			continue
		}
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		if digits(f, &i) > 2 {
			return errors.New("invalid format (width too long)")
		}
		if i < len(f) && f[i] == '.' {
			i++
			if digits(f, &i) > 2 {
				return errors.New("invalid format (precision too long)")
			}
		}
		if i == len(f) {
			return errors.New("invalid conversion '%' at the end of the format")
		}
		if strings.IndexByte("cdiouxXeEfgGqs", f[i]) < 0 {
			return fmt.Errorf("invalid option '%%%c'", f[i])
		}
	}
	return nil
}

// digits advances *i past decimal digits in f and returns how many.
func digits(f string, i *int) int {
	n := 0
	for *i < len(f) && f[*i] >= '0' && f[*i] <= '9' {
		*i++
		n++
	}
	return n
}

// errorLevel makes error(msg, level) name the position Lua 5.1 names.
// gopher-lua takes the position of stack frame level-1, skipping error's
// own frame only when that is frame 0: level 1 is the function that called
// error, as in Lua, but level 2 is that function again instead of its
// caller (so a helper's error(msg, 2) blamed the helper's line). Frame
// `level` is the right one for every level above 1.
func errorLevel(L *glua.LState) {
	if n, ok := L.Get(2).(glua.LNumber); ok && n >= 2 && n == glua.LNumber(int(n)) {
		L.Replace(2, n+1)
	}
}
