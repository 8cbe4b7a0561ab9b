package lua

import (
	"errors"
	"fmt"
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
// builtins need to stop the call they run in.
type state struct {
	L *glua.LState
	// limit is Limits.MemoryBytes: no single builtin result may be larger.
	limit int64
	// call is the call in progress (nil between calls).
	call *callContext
	// panicked is the first Go panic of the call in progress that pcall or
	// xpcall let through.
	panicked *panicInfo
	// concatFn is the builtin .. chains call (concat.go).
	concatFn *glua.LFunction
}

// newState returns a state with only the base, table, string and math
// libraries (minus removedGlobals), print routed to h.Log, require serving
// the ssrun module alone, size caps on the builtins that allocate their
// whole result in one step, and the builtins replaced that ignore the
// deadline or catch the end of a call (builtins.go, protect.go).
func newState(opts Options, h abi.Host, limit int64) *state {
	L := glua.NewState(glua.Options{
		SkipOpenLibs:    true,
		CallStackSize:   opts.CallStackSize,
		RegistrySize:    opts.RegistrySize,
		RegistryMaxSize: opts.RegistryMaxSize,
	})
	st := &state{L: L, limit: limit}
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

	mod := newModule(L, st, h)
	L.SetGlobal("require", L.NewFunction(func(L *glua.LState) int {
		name := L.CheckString(1)
		if name != ModuleName {
			L.RaiseError("module '%s' not available", name)
		}
		L.Push(mod)
		return 1
	}))
	L.SetGlobal("print", L.NewFunction(func(L *glua.LState) int {
		parts := make([]string, L.GetTop())
		for i := range parts {
			parts[i] = L.ToStringMeta(L.Get(i + 1)).String()
		}
		h.Log(abi.LevelInfo, strings.Join(parts, "\t"))
		return 0
	}))
	// math.random draws from Go's process-wide source; reseeding it would
	// touch every rule (it is a no-op since Go 1.24 unless GODEBUG says
	// otherwise), so randomseed does nothing.
	math := L.GetGlobal(glua.MathLibName).(*glua.LTable)
	math.RawSetString("randomseed", L.NewFunction(func(*glua.LState) int { return 0 }))
	math.RawSetString("random", L.NewFunction(mathRandom))
	L.SetGlobal("pcall", L.NewFunction(st.pcall))
	L.SetGlobal("xpcall", L.NewFunction(st.xpcall))

	str := L.GetGlobal(glua.StringLibName).(*glua.LTable)
	wrap(L, str, "rep", func(L *glua.LState, orig glua.LGFunction) int {
		s, n := L.CheckString(1), L.CheckInt(2)
		if n > 0 && len(s) > 0 && int64(n) > st.limit/int64(len(s)) {
			st.tooLarge(L, "string.rep", fmt.Sprintf("%d x %d bytes", n, len(s)))
		}
		return orig(L)
	})
	wrap(L, str, "format", func(L *glua.LState, orig glua.LGFunction) int {
		if err := checkFormat(L.CheckString(1)); err != nil {
			L.RaiseError("string.format: %v", err)
		}
		return orig(L)
	})
	str.RawSetString("find", L.NewFunction(func(L *glua.LState) int { return strFind(L, true) }))
	str.RawSetString("match", L.NewFunction(func(L *glua.LState) int { return strFind(L, false) }))
	str.RawSetString("gmatch", L.NewFunction(strGmatch))
	str.RawSetString("gfind", str.RawGetString("gmatch"))
	str.RawSetString("gsub", L.NewFunction(st.strGsub))
	tab := L.GetGlobal(glua.TabLibName).(*glua.LTable)
	wrap(L, tab, "concat", func(L *glua.LState, orig glua.LGFunction) int {
		if size := concatSize(L); size > st.limit {
			st.tooLarge(L, "table.concat", fmt.Sprintf("%d bytes", size))
		}
		return orig(L)
	})
	tab.RawSetString("sort", L.NewFunction(st.tableSort))
	return st
}

// wrap replaces the Go function name of lib by one that runs check first;
// check calls orig to run the original with the same arguments.
func wrap(L *glua.LState, lib *glua.LTable, name string, check func(L *glua.LState, orig glua.LGFunction) int) {
	orig := lib.RawGetString(name).(*glua.LFunction).GFunction
	lib.RawSetString(name, L.NewFunction(func(L *glua.LState) int { return check(L, orig) }))
}

// tooLarge fails the call in progress with abi.ErrMemory: a builtin was
// asked for a result larger than the rule's whole memory limit.
func (st *state) tooLarge(L *glua.LState, fn, what string) {
	msg := fmt.Sprintf("%s: result of %s exceeds the rule's memory limit of %d bytes", fn, what, st.limit)
	st.stop(fmt.Errorf("%w: %s", abi.ErrMemory, msg))
	L.RaiseError("%s", msg)
}

// concatSize returns an upper bound of the length table.concat would build
// from its arguments, computed as table.concat reads them; it stops at the
// first element table.concat rejects.
func concatSize(L *glua.LState) int64 {
	tbl := L.CheckTable(1)
	sep := int64(len(L.OptString(2, "")))
	n := tbl.Len()
	i, j := max(min(L.OptInt(3, 1), n), 1), min(L.OptInt(4, n), n)
	var size int64
	for k := i; k <= j; k++ {
		switch v := tbl.RawGetInt(k).(type) {
		case glua.LString:
			size += int64(len(v))
		case glua.LNumber:
			size += 24 // "%.14g" is shorter
		default:
			return size
		}
		if k < j {
			size += sep
		}
	}
	return size
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
