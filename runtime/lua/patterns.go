package lua

import (
	"math"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// The verbs of key families (ABI revision 3).

// keys(pattern [, limit]) -> {key, ...} (sorted; #keys counts them) | nil, msg, code
func (m *module) keys(L *glua.LState) int {
	pattern := m.arg(L, abi.FnKeys, 1, "pattern")
	var opts abi.KeysOptions
	if L.GetTop() >= 2 && L.Get(2) != glua.LNil {
		n := float64(argNumber(L, abi.FnKeys, 2, "limit"))
		if n != math.Trunc(n) || n < 0 || n > abi.MaxKeysLimit {
			return fail(L, abi.Errorf(abi.StatusInvalid, "ss.keys: limit must be a whole number between 0 (the default, %d) and %d, got %v", abi.DefaultKeysLimit, abi.MaxKeysLimit, L.Get(2)))
		}
		opts.Limit = int(n)
	}
	keys, err := m.h.Keys(m.st.ctx(), pattern, opts)
	if err != nil {
		return fail(L, err)
	}
	size := int64(len(keys)) * 16 // each slot, roughly
	for _, k := range keys {
		size += int64(len(k))
	}
	m.st.reserve(L, "ss.keys", size) // the copies Lua gets
	t := L.CreateTable(len(keys), 0)
	for _, k := range keys {
		t.Append(glua.LString(k))
	}
	L.Push(t)
	return 1
}

// watch_pattern(pattern [, {self}]) -> true | nil, msg, code
func (m *module) watchPattern(L *glua.LState) int {
	pattern := m.arg(L, abi.FnWatchPattern, 1, "pattern")
	o := readOptions(L, abi.FnWatchPattern, 2, "self")
	opts := abi.WatchOptions{Self: o.boolean("self")}
	if o.err != nil {
		return fail(L, o.err)
	}
	if err := m.h.WatchPattern(m.st.ctx(), pattern, opts); err != nil {
		return fail(L, err)
	}
	L.Push(glua.LTrue)
	return 1
}

// unwatch_pattern(pattern) -> true | false (not watched) | nil, msg, code
func (m *module) unwatchPattern(L *glua.LState) int {
	pattern := m.arg(L, abi.FnUnwatchPattern, 1, "pattern")
	return boolResult(L, m.h.UnwatchPattern(m.st.ctx(), pattern))
}
