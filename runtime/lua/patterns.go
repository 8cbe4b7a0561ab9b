package lua

import (
	"errors"
	"math"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// The verbs of key families (ABI revision 3).

// patternLoad is a state's record of the first watch_pattern its rule's
// load made that the host refused as INVALID or DENIED: a bad pattern, or
// one outside the rule's permissions, is a mistake in the rule, so the
// load fails with it, naming the file and line (ssrun check, dev and run
// refuse the rule), though the call returned nil, message, code as any
// verb does.
type patternLoad struct {
	loading bool // the rule's top-level chunk runs
	line    int
	err     error
}

// refused notes err of a watch_pattern at the rule's current line, if it
// is the first such refusal of its load.
func (p *patternLoad) refused(L *glua.LState, err error) {
	st := abi.StatusOf(err)
	if !p.loading || p.err != nil || (st != abi.StatusInvalid && st != abi.StatusDenied) {
		return
	}
	p.err = err
	if dbg, ok := L.GetStack(1); ok {
		if _, gerr := L.GetInfo("l", dbg, glua.LNil); gerr == nil {
			p.line = dbg.CurrentLine
		}
	}
}

// refusal is the load's error for the refusal noted, or nil.
func (p *patternLoad) refusal(file string) error {
	if p.err == nil {
		return nil
	}
	return &Error{Call: callLoad, File: file, Line: p.line, Msg: p.err.Error(), Err: errors.Join(abi.ErrRaised, p.err)}
}

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
		m.st.patterns.refused(L, err)
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
