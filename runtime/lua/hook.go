package lua

import (
	"context"
)

// hookInterval is how many VM instructions of a rule run between two
// memory checks (state.tick): about 0.1 ms of Lua, against ~0.3 µs per
// check. They are counted across calls, so a rule that grows its tables a
// little in each of many short calls is checked too.
const hookInterval = 8192

// callContext is the context a call's Lua code runs under (LState.SetContext).
// gopher-lua's VM selects on ctx.Done() before every instruction, which
// makes Done the VM's only instruction hook: every hookInterval calls it
// runs the state's memory check, on the goroutine running the state. Only
// the VM may call Done: code that hands the call's context to anything
// else (a host verb, which may watch it from another goroutine) passes the
// embedded Context (state.ctx).
type callContext struct {
	context.Context // the call's deadline, cancelled with a cause by stop
	cancel          context.CancelCauseFunc
	done            <-chan struct{}
	st              *state
}

func newCallContext(ctx context.Context, cancel context.CancelCauseFunc, st *state) *callContext {
	return &callContext{Context: ctx, cancel: cancel, done: ctx.Done(), st: st}
}

// Done counts one VM instruction and returns the call's done channel.
func (c *callContext) Done() <-chan struct{} {
	if c.st.instructions++; c.st.instructions >= hookInterval {
		c.st.instructions = 0
		c.st.tick()
	}
	return c.done
}

// ctx returns the context of the call in progress, for code other than the
// VM (host verbs, builtins): without the hook. Between calls it is
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
