package lua

import (
	glua "github.com/yuin/gopher-lua"
)

// pcall and xpcall replace the base library's. They catch what Lua code
// raises, as Lua's do, but not the end of the call: once its deadline has
// passed or its memory limit stopped it (state.stopped), the error goes
// through them unchanged, keeping the position where it was raised (inside
// the protected function, not after it). A Go panic inside gopher-lua goes
// through too, as a panic, so the call fails and its state is rebuilt
// (state.panicked keeps its position). gopher-lua's pcall caught all three,
// so `return pcall(function() while true do end end)` returned success
// after the deadline.

// panicInfo is a Go panic inside gopher-lua that pcall or xpcall let
// through: the message and the Lua traceback where it happened.
type panicInfo struct {
	msg, traceback string
}

// pcall(f, ...) -> true, f's results | false, error
func (st *state) pcall(L *glua.LState) int {
	L.CheckAny(1)
	v := L.Get(1)
	if v.Type() != glua.LTFunction && L.GetMetaField(v, "__call").Type() != glua.LTFunction {
		L.Push(glua.LFalse)
		L.Push(glua.LString("attempt to call a " + v.Type().String() + " value"))
		return 2
	}
	nargs := L.GetTop() - 1
	if err := L.PCall(nargs, glua.MultRet, nil); err != nil {
		st.rethrow(L, err)
		L.Push(glua.LFalse)
		L.Push(errorObject(err))
		return 2
	}
	L.Insert(glua.LTrue, 1)
	return L.GetTop()
}

// xpcall(f, handler) -> true, f's results | false, handler(error)
//
// The handler runs once f's frames are gone (Lua 5.1 runs it where the error
// was raised; without the debug library a rule cannot tell), so a stopped
// call or a Go panic never reaches it. An error in the handler is what
// xpcall returns, as in gopher-lua.
func (st *state) xpcall(L *glua.LState) int {
	fn := L.CheckFunction(1)
	handler := L.CheckFunction(2)
	top := L.GetTop()
	L.Push(fn)
	if err := L.PCall(0, glua.MultRet, nil); err != nil {
		st.rethrow(L, err)
		L.Push(handler)
		L.Push(errorObject(err))
		if err := L.PCall(1, 1, nil); err != nil {
			st.rethrow(L, err)
			L.Push(errorObject(err))
		}
		L.Insert(glua.LFalse, L.GetTop())
		return 2
	}
	L.Insert(glua.LTrue, top+1)
	return L.GetTop() - top
}

// rethrow raises err again, unchanged, when the call is stopped or err is a
// Go panic; otherwise it returns and the caller reports err to Lua.
func (st *state) rethrow(L *glua.LState, err error) {
	aerr, ok := err.(*glua.ApiError)
	if ok && aerr.Type == glua.ApiErrorPanic {
		if st.panicked == nil {
			st.panicked = &panicInfo{msg: errorText(aerr.Object), traceback: aerr.StackTrace}
		}
		panic(errorText(aerr.Object))
	}
	if st.stopped() {
		L.Error(errorObject(err), 0)
	}
}

// errorObject returns the Lua value a PCall error carries.
func errorObject(err error) glua.LValue {
	if aerr, ok := err.(*glua.ApiError); ok {
		return aerr.Object
	}
	return glua.LString(err.Error())
}
