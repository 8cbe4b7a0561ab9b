package lua

import (
	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// The time verbs of ABI revision 2: ss.timer, ss.cancel and ss.now. A
// timer's firing reaches on_event as a TIMER event (eventTable).

// timer(name, delay_ms [, {every=ms, payload=string}]) -> true | nil, msg, code
//
// delay_ms and every must be whole numbers of milliseconds >= 0 (every = 0,
// the default, fires once); anything else fails with INVALID before the
// host is called, as the other verbs' durations do.
func (m *module) timer(L *glua.LState) int {
	name := m.arg(L, abi.FnTimer, 1, "name")
	delay := argNumber(L, abi.FnTimer, 2, "delay_ms")
	o := readOptions(L, abi.FnTimer, 3, "every", "payload")
	opts := abi.TimerOptions{Every: o.millis("every", false)}
	payload := o.bytes("payload")
	delayD := o.toMillis("delay_ms", delay, false)
	if o.err != nil {
		return fail(L, o.err)
	}
	if !m.st.tryReserve(int64(len(payload))) { // the host copies it
		m.st.reserve(L, "ss."+abi.FnTimer, int64(len(payload)))
	}
	opts.Payload = []byte(payload)
	if err := m.h.Timer(m.st.ctx(), name, delayD, opts); err != nil {
		return fail(L, err)
	}
	L.Push(glua.LTrue)
	return 1
}

// cancel(name) -> true | false (none armed) | nil, msg, code
func (m *module) cancel(L *glua.LState) int {
	name := m.arg(L, abi.FnCancel, 1, "name")
	return boolResult(L, m.h.Cancel(m.st.ctx(), name))
}

// now() -> the host's clock in Unix milliseconds (a whole number: Lua's
// doubles hold such numbers exactly until the year 287,396)
func (m *module) now(L *glua.LState) int {
	L.Push(glua.LNumber(m.h.Now()))
	return 1
}

// bytes returns option name, a string (a number is converted as tostring
// does); absent or nil is "".
func (o *options) bytes(name string) string {
	switch v := o.get(name).(type) {
	case *glua.LNilType:
		return ""
	case glua.LString:
		return string(v)
	case glua.LNumber:
		return v.String()
	default:
		o.L.RaiseError("ss.%s: option '%s' must be a string, got %s", o.fn, name, v.Type())
		return ""
	}
}
