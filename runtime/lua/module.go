package lua

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// logLevels maps ss.log's level names to abi levels.
var logLevels = map[string]int32{"debug": abi.LevelDebug, "info": abi.LevelInfo, "warn": abi.LevelWarn, "error": abi.LevelError}

// maxMillis is the largest millisecond count a time.Duration holds.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// module implements the ssrun Lua module of one state on top of its Host.
type module struct {
	st *state
	h  abi.Host
}

// newModule returns the ssrun module table for L: one function per
// abi.Verbs() entry, the log shorthands and the status table.
func newModule(L *glua.LState, st *state, h abi.Host) *glua.LTable {
	m := &module{st: st, h: h}
	t := L.NewTable()
	for name, fn := range map[string]glua.LGFunction{
		abi.FnGet:     m.get,
		abi.FnSet:     m.set,
		abi.FnDel:     m.del,
		abi.FnVDel:    m.vdel,
		abi.FnWatch:   m.watch,
		abi.FnUnwatch: m.unwatch,
		abi.FnLock:    m.lock,
		abi.FnUnlock:  m.unlock,
		abi.FnLog:     m.log,
		abi.FnTimer:   m.timer,
		abi.FnCancel:  m.cancel,
		abi.FnNow:     m.now,

		abi.FnKeys:           m.keys,
		abi.FnWatchPattern:   m.watchPattern,
		abi.FnUnwatchPattern: m.unwatchPattern,
	} {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, level := range logLevels {
		t.RawSetString(name, L.NewFunction(func(L *glua.LState) int {
			m.h.Log(level, m.arg(L, name, 1, "message"))
			L.Push(glua.LTrue)
			return 1
		}))
	}
	status := L.NewTable()
	for _, s := range abi.Statuses() {
		status.RawSetString(s.String(), glua.LNumber(s))
	}
	t.RawSetString("status", status)
	t.RawSetString("json", newJSON(L, st))
	return t
}

// get(key) -> value, version | nil (absent) | nil, msg, code
func (m *module) get(L *glua.LState) int {
	key := m.arg(L, abi.FnGet, 1, "key")
	v, err := m.h.Get(m.st.ctx(), key)
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		m.st.reserve(L, "ss.get", int64(len(v.Data)+len(v.Version))) // the copies Lua gets
		L.Push(glua.LString(v.Data))
		L.Push(glua.LString(v.Version))
		return 2
	case abi.StatusNotFound:
		L.Push(glua.LNil)
		return 1
	}
	return fail(L, err)
}

// set(key, value [, {nx|nex, ttl, fence}]) -> true, version | false, stored_version | nil, msg, code
func (m *module) set(L *glua.LState) int {
	key := m.arg(L, abi.FnSet, 1, "key")
	value := m.arg(L, abi.FnSet, 2, "value")
	o := readOptions(L, abi.FnSet, 3, "nx", "nex", "ttl", "fence")
	var opts abi.SetOptions
	nx, nex := o.boolean("nx"), o.boolean("nex")
	switch {
	case nx && nex:
		o.invalid("options nx and nex exclude each other")
	case nx:
		opts.Cond = abi.CondNX
	case nex:
		opts.Cond = abi.CondNEX
	}
	opts.TTL = o.millis("ttl", false)
	opts.Fence = o.fence()
	if o.err != nil {
		return fail(L, o.err)
	}
	version, err := m.h.Set(m.st.ctx(), key, []byte(value), opts)
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		L.Push(glua.LTrue)
		L.Push(glua.LString(version))
		return 2
	case abi.StatusNotApplied:
		L.Push(glua.LFalse)
		L.Push(glua.LString(version))
		return 2
	}
	return fail(L, err)
}

// del(key [, {fence}]) -> 1 | 0 (absent) | nil, msg, code
func (m *module) del(L *glua.LState) int {
	key := m.arg(L, abi.FnDel, 1, "key")
	o := readOptions(L, abi.FnDel, 2, "fence")
	opts := abi.DelOptions{Fence: o.fence()}
	if o.err != nil {
		return fail(L, o.err)
	}
	err := m.h.Del(m.st.ctx(), key, opts)
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		L.Push(glua.LNumber(1))
		return 1
	case abi.StatusNotFound:
		L.Push(glua.LNumber(0))
		return 1
	}
	return fail(L, err)
}

// vdel(key, value [, {fence}]) -> 1 | 0 (absent) | -1 (value differs) | nil, msg, code
func (m *module) vdel(L *glua.LState) int {
	key := m.arg(L, abi.FnVDel, 1, "key")
	value := m.arg(L, abi.FnVDel, 2, "value")
	o := readOptions(L, abi.FnVDel, 3, "fence")
	opts := abi.DelOptions{Fence: o.fence()}
	if o.err != nil {
		return fail(L, o.err)
	}
	err := m.h.VDel(m.st.ctx(), key, []byte(value), opts)
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		L.Push(glua.LNumber(1))
		return 1
	case abi.StatusNotFound:
		L.Push(glua.LNumber(0))
		return 1
	case abi.StatusNotApplied:
		L.Push(glua.LNumber(-1))
		return 1
	}
	return fail(L, err)
}

// watch(key [, {self}]) -> true | nil, msg, code
func (m *module) watch(L *glua.LState) int {
	key := m.arg(L, abi.FnWatch, 1, "key")
	o := readOptions(L, abi.FnWatch, 2, "self")
	opts := abi.WatchOptions{Self: o.boolean("self")}
	if o.err != nil {
		return fail(L, o.err)
	}
	if err := m.h.Watch(m.st.ctx(), key, opts); err != nil {
		return fail(L, err)
	}
	L.Push(glua.LTrue)
	return 1
}

// unwatch(key) -> true | false (not watched) | nil, msg, code
func (m *module) unwatch(L *glua.LState) int {
	key := m.arg(L, abi.FnUnwatch, 1, "key")
	return boolResult(L, m.h.Unwatch(m.st.ctx(), key))
}

// lock(name, ttl_ms [, {wait}]) -> token | false (busy) | nil, msg, code
func (m *module) lock(L *glua.LState) int {
	name := m.arg(L, abi.FnLock, 1, "name")
	ttl := argNumber(L, abi.FnLock, 2, "ttl_ms")
	o := readOptions(L, abi.FnLock, 3, "wait")
	var opts abi.LockOptions
	opts.Wait = o.millis("wait", false)
	ttlD := o.toMillis("ttl_ms", ttl, true)
	if o.err != nil {
		return fail(L, o.err)
	}
	token, err := m.h.Lock(m.st.ctx(), name, ttlD, opts)
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		L.Push(glua.LString(token))
		return 1
	case abi.StatusBusy:
		L.Push(glua.LFalse)
		return 1
	}
	return fail(L, err)
}

// unlock(name) -> true | false (not held) | nil, msg, code
func (m *module) unlock(L *glua.LState) int {
	name := m.arg(L, abi.FnUnlock, 1, "name")
	return boolResult(L, m.h.Unlock(m.st.ctx(), name))
}

// log(level, message) -> true | nil, msg, "INVALID" (unknown level)
func (m *module) log(L *glua.LState) int {
	name := m.arg(L, abi.FnLog, 1, "level")
	msg := m.arg(L, abi.FnLog, 2, "message")
	level, ok := logLevels[name]
	if !ok {
		return fail(L, abi.Errorf(abi.StatusInvalid, "ss.log: unknown level %q (want debug, info, warn or error)", name))
	}
	m.h.Log(level, msg)
	L.Push(glua.LTrue)
	return 1
}

// boolResult returns true for OK, false for NOT_FOUND, else the failure.
func boolResult(L *glua.LState, err error) int {
	switch abi.StatusOf(err) {
	case abi.StatusOK:
		L.Push(glua.LTrue)
		return 1
	case abi.StatusNotFound:
		L.Push(glua.LFalse)
		return 1
	}
	return fail(L, err)
}

// fail returns nil, message, status name.
func fail(L *glua.LState, err error) int {
	L.Push(glua.LNil)
	L.Push(glua.LString(err.Error()))
	L.Push(glua.LString(abi.StatusOf(err).String()))
	return 3
}

// arg is argString for the string arguments the host gets: they are
// reserved in the rule's memory account, as the host copies them (a value,
// a key, a log line).
func (m *module) arg(L *glua.LState, fn string, n int, name string) string {
	s := argString(L, fn, n, name)
	if !m.st.tryReserve(int64(len(s))) {
		m.st.reserve(L, "ss."+fn, int64(len(s)))
	}
	return s
}

// argString returns argument n of ss.<fn>: a string, or a number converted
// as tostring does. Any other type raises a Lua error.
func argString(L *glua.LState, fn string, n int, name string) string {
	switch v := L.Get(n).(type) {
	case glua.LString:
		return string(v)
	case glua.LNumber:
		return v.String()
	}
	L.RaiseError("ss.%s: bad argument #%d '%s' (string expected, got %s)", fn, n, name, L.Get(n).Type())
	return ""
}

// argNumber returns argument n of ss.<fn>, which must be a number.
func argNumber(L *glua.LState, fn string, n int, name string) glua.LNumber {
	v, ok := L.Get(n).(glua.LNumber)
	if !ok {
		L.RaiseError("ss.%s: bad argument #%d '%s' (number expected, got %s)", fn, n, name, L.Get(n).Type())
	}
	return v
}

// options reads an option table. Wrong types raise a Lua error at once;
// bad values (unknown keys, out of range) are kept in err, an INVALID
// failure the verb returns instead of calling the host.
type options struct {
	L   *glua.LState
	fn  string
	t   *glua.LTable // nil when the argument is absent
	err error
}

// readOptions returns the option table at argument n of ss.<fn>, which
// must be absent, nil or a table whose keys are all in names.
func readOptions(L *glua.LState, fn string, n int, names ...string) *options {
	o := &options{L: L, fn: fn}
	switch v := L.Get(n).(type) {
	case *glua.LNilType:
		return o
	case *glua.LTable:
		o.t = v
	default:
		L.RaiseError("ss.%s: bad argument #%d 'options' (table expected, got %s)", fn, n, v.Type())
	}
	o.t.ForEach(func(k, _ glua.LValue) {
		if s, ok := k.(glua.LString); ok && slices.Contains(names, string(s)) {
			return
		}
		key := "[" + k.String() + "]"
		if s, ok := k.(glua.LString); ok {
			key = fmt.Sprintf("%q", string(s))
		}
		o.invalid("unknown option %s (want %s)", key, strings.Join(names, ", "))
	})
	return o
}

// invalid records an INVALID failure (the first one wins).
func (o *options) invalid(format string, args ...any) {
	if o.err == nil {
		o.err = abi.Errorf(abi.StatusInvalid, "ss.%s: %s", o.fn, fmt.Sprintf(format, args...))
	}
}

// get returns option name, or nil.
func (o *options) get(name string) glua.LValue {
	if o.t == nil {
		return glua.LNil
	}
	return o.t.RawGetString(name)
}

// boolean returns option name: absent or nil is false.
func (o *options) boolean(name string) bool {
	switch v := o.get(name).(type) {
	case *glua.LNilType:
		return false
	case glua.LBool:
		return bool(v)
	default:
		o.L.RaiseError("ss.%s: option '%s' must be a boolean, got %s", o.fn, name, v.Type())
		return false
	}
}

// millis returns option name, a whole number of milliseconds >= 0;
// absent or nil is 0.
func (o *options) millis(name string, positive bool) time.Duration {
	switch v := o.get(name).(type) {
	case *glua.LNilType:
		return 0
	case glua.LNumber:
		return o.toMillis(name, v, positive)
	default:
		o.L.RaiseError("ss.%s: option '%s' must be a number of milliseconds, got %s", o.fn, name, v.Type())
		return 0
	}
}

// toMillis converts v to a duration, recording an INVALID failure unless
// it is a whole number of milliseconds >= 0 (> 0 when positive).
func (o *options) toMillis(name string, v glua.LNumber, positive bool) time.Duration {
	f := float64(v)
	switch {
	case f != math.Trunc(f) || math.IsInf(f, 0): // NaN fails the first test too
		o.invalid("%s must be a whole number of milliseconds, got %v", name, v)
	case positive && f <= 0:
		o.invalid("%s must be > 0, got %v", name, v)
	case f < 0:
		o.invalid("%s must be >= 0, got %v", name, v)
	case f > float64(maxMillis):
		o.invalid("%s of %v ms is too long", name, v)
	default:
		return time.Duration(f) * time.Millisecond
	}
	return 0
}

// fence returns the fence option: absent or nil is "", else a non-empty
// lock name.
func (o *options) fence() string {
	switch v := o.get("fence").(type) {
	case *glua.LNilType:
		return ""
	case glua.LString:
		if v == "" {
			o.invalid("option 'fence' must name a lock, got \"\"")
		}
		return string(v)
	default:
		o.L.RaiseError("ss.%s: option 'fence' must be a lock name (string), got %s", o.fn, v.Type())
		return ""
	}
}
