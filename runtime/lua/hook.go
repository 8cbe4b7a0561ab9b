package lua

import (
	"context"
)

// callContext is the context a call's Lua code runs under
// (LState.SetContext): the call's deadline, and the cancellation that stop
// uses.
type callContext struct {
	context.Context
	cancel context.CancelCauseFunc
}

// ctx returns the context of the call in progress, for the code that runs
// on the rule's behalf (host verbs, builtins); between calls it is
// context.Background().
func (st *state) ctx() context.Context {
	if st.call != nil {
		return st.call.Context
	}
	return context.Background()
}

// stop ends the call in progress with cause (it wraps abi.ErrMemory or
// abi.ErrTimeout): its context is cancelled, so the VM raises an error
// before its next instruction, host verbs in progress return, and pcall
// and xpcall let the error through (see protect.go).
func (st *state) stop(cause error) {
	if st.call != nil {
		st.call.cancel(cause)
	}
}

// stopped reports whether the call in progress has been stopped (its
// deadline passed, or stop was called).
func (st *state) stopped() bool {
	return st.call != nil && st.call.Context.Err() != nil
}
