package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
)

// Error is a failed call into a rule: its load (the top-level chunk, run by
// Start) or an on_event call, with the position in the rule when known. It
// unwraps to abi.ErrRaised (the rule raised an error; it wraps
// abi.ErrCrashed), abi.ErrCrashed (gopher-lua panicked), abi.ErrTimeout or
// abi.ErrMemory.
type Error struct {
	Call      string // "load" or "on_event"
	File      string // the rule's name
	Line      int    // 1-based; 0 when unknown
	Msg       string
	Traceback string // the Lua stack traceback, when there is one
	Err       error
}

// Error returns "file:line: call: message" (without the line when unknown).
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Call, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Call, e.Msg)
}

// Unwrap returns abi.ErrRaised, abi.ErrCrashed, abi.ErrTimeout or abi.ErrMemory.
func (e *Error) Unwrap() error { return e.Err }

// Calls into a rule.
const (
	callLoad    = "load"
	callOnEvent = "on_event"
)

// script is a running rule: one sandboxed state, used by one call at a time.
type script struct {
	mu     sync.Mutex
	prog   *program
	host   abi.Host
	lim    abi.Limits
	st     *state // nil after a crash or memory overrun: rebuilt by the next Handle
	closed bool
}

// Handle calls on_event(ev). If the previous call left no usable state
// (gopher-lua panicked or the memory limit was hit), a fresh state is
// loaded first from the compiled chunk: its top-level code runs again,
// re-declaring its watches (Host.Watch is idempotent) and resetting its
// globals.
func (s *script) Handle(ctx context.Context, ev abi.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("lua: handle %s: %w", s.prog.name, ErrClosed)
	}
	if s.st == nil {
		if err := s.load(ctx); err != nil {
			return err
		}
	}
	st := s.st
	fn := st.onEvent()
	if fn.Type() != glua.LTFunction {
		return &Error{Call: callOnEvent, File: s.prog.name, Msg: fmt.Sprintf("global on_event is a %s, not a function", fn.Type()), Err: abi.ErrCrashed}
	}
	return s.call(ctx, st, callOnEvent, fn, eventTable(st.L, ev))
}

// Close frees the rule's state. A Handle in progress finishes first.
func (s *script) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.st != nil {
		s.st.L.Close()
	}
	s.closed, s.st = true, nil
	return nil
}

// load builds a fresh state and runs the chunk's top-level code in it.
func (s *script) load(ctx context.Context) error {
	st := newState(s.prog.opts, s.host, s.lim.MemoryBytes)
	s.st = st
	st.patterns.loading = true
	err := s.call(ctx, st, callLoad, st.mainFunction(s.prog.proto))
	st.patterns.loading = false
	if err == nil {
		err = st.patterns.refusal(s.prog.name)
	}
	if err != nil {
		s.st = nil
		return err
	}
	if fn := st.onEvent(); fn.Type() != glua.LTFunction {
		s.st = nil
		return &Error{Call: callLoad, File: s.prog.name, Msg: "the rule defines no global function on_event(ev)", Err: abi.ErrCrashed}
	}
	return nil
}

// call runs fn(args...) in st under the limits: a deadline, the memory
// account (account.go), and a recover for gopher-lua's own panics (#282).
// When the state cannot be trusted afterwards (a panic, or the memory
// limit), it is dropped (s.st = nil) so the next Handle rebuilds it. A call
// that returns after its deadline has passed is a timeout, however it
// returns.
func (s *script) call(ctx context.Context, st *state, what string, fn glua.LValue, args ...glua.LValue) (err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tctx, cancelT := context.WithTimeoutCause(ctx, s.lim.CallTimeout, abi.ErrTimeout)
	defer cancelT()

	L := st.L
	st.call, st.panicked = newCallContext(tctx, cancel, st), nil
	defer func() {
		st.call = nil
		if rcv := recover(); rcv != nil { // escaped PCall: the state is broken
			s.st = nil
			err = &Error{Call: what, File: s.prog.name, Line: panicLine(L, s.prog.name), Msg: fmt.Sprintf("gopher-lua panicked: %v (state discarded)", rcv), Err: abi.ErrCrashed}
		}
	}()
	L.SetContext(st.call)
	L.Push(fn)
	for _, a := range args {
		L.Push(a)
	}
	perr := L.PCall(len(args), 0, nil)
	L.RemoveContext()
	if perr == nil && tctx.Err() == nil {
		return nil
	}

	e := &Error{Call: what, File: s.prog.name, Err: abi.ErrCrashed}
	var apiErr *glua.ApiError
	switch {
	case perr == nil: // returned after its deadline
	case errors.As(perr, &apiErr):
		e.Msg, e.Traceback = errorText(apiErr.Object), apiErr.StackTrace
		if p := st.panicked; p != nil && apiErr.Type == glua.ApiErrorPanic {
			e.Msg, e.Traceback = p.msg, p.traceback // where pcall let it through from
		}
	default:
		e.Msg = perr.Error()
	}
	e.Line, e.Msg = position(s.prog.name, e.Msg, e.Traceback)
	switch cause := context.Cause(tctx); {
	case errors.Is(cause, abi.ErrMemory):
		s.st = nil
		e.Err = abi.ErrMemory
		e.Msg = cause.Error() + " (state discarded)"
	case errors.Is(cause, abi.ErrTimeout):
		e.Err = abi.ErrTimeout
		e.Msg = fmt.Sprintf("%v (%v)", abi.ErrTimeout, s.lim.CallTimeout)
		if perr == nil {
			e.Msg += "; it returned after that"
		}
	case cause != nil:
		e.Err = abi.ErrTimeout
		e.Msg = fmt.Sprintf("call stopped: %v", cause)
	case apiErr != nil && apiErr.Type == glua.ApiErrorPanic:
		s.st = nil // a Go panic inside gopher-lua, recovered by PCall
		e.Msg = fmt.Sprintf("gopher-lua panicked: %s (state discarded)", e.Msg)
	case apiErr != nil:
		e.Err = abi.ErrRaised // error(), assert, a runtime error: the rule's own
	}
	return e
}

// panicLine returns the innermost line of file on L's call stack, or 0:
// after a panic that escaped PCall the stack is still there, but may be
// inconsistent (#282 leaves a function entered that has not run an
// instruction: its line is where it is defined), so each frame is read
// under recover.
func panicLine(L *glua.LState, file string) int {
	for level := 0; level <= L.Options.CallStackSize; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			return 0
		}
		if line := frameLine(L, dbg, file); line > 0 {
			return line
		}
	}
	return 0
}

// frameLine returns the current line of the function of dbg if it is in
// file (where it is defined if it has not started), else 0.
func frameLine(L *glua.LState, dbg *glua.Debug, file string) (line int) {
	defer func() {
		if recover() != nil && line < 0 {
			line = -line
		}
	}()
	if _, err := L.GetInfo("S", dbg, glua.LNil); err != nil || dbg.Source != file {
		return 0
	}
	line = -dbg.LineDefined // the answer if reading the current line panics
	if _, err := L.GetInfo("l", dbg, glua.LNil); err != nil || dbg.CurrentLine <= 0 {
		return -line
	}
	return dbg.CurrentLine
}

// onEvent returns the global on_event. The lookup is raw: outside a call,
// no metamethod of the rule may run (an __index on _G could recurse
// without a recover to catch it).
func (st *state) onEvent() glua.LValue {
	return st.L.G.Global.RawGetString("on_event")
}

// errorText returns the message of a Lua error value.
func errorText(v glua.LValue) string {
	switch v := v.(type) {
	case glua.LString:
		return string(v)
	case glua.LNumber:
		return v.String()
	}
	return fmt.Sprintf("(error object is a %s value)", v.Type())
}

// position splits "file:line: msg" (as Lua prefixes error messages) into
// line and msg; when msg has no position, the line is the innermost one of
// file in the traceback.
func position(file, msg, traceback string) (int, string) {
	if rest, ok := strings.CutPrefix(msg, file+":"); ok {
		if num, text, ok := strings.Cut(rest, ":"); ok {
			if line, err := strconv.Atoi(num); err == nil && line > 0 {
				return line, strings.TrimPrefix(text, " ")
			}
		}
	}
	for l := range strings.Lines(traceback) {
		if rest, ok := strings.CutPrefix(strings.TrimLeft(l, "\t"), file+":"); ok {
			if num, _, ok := strings.Cut(rest, ":"); ok {
				if line, err := strconv.Atoi(num); err == nil && line > 0 {
					return line, msg
				}
			}
		}
	}
	return 0, msg
}

// eventTable returns ev as the table on_event receives.
func eventTable(L *glua.LState, ev abi.Event) *glua.LTable {
	t := L.CreateTable(0, 8)
	t.RawSetString("key", glua.LString(ev.Key))
	t.RawSetString("op", glua.LString(ev.Op))
	switch ev.Op {
	case abi.OpSet:
		t.RawSetString("value", glua.LString(ev.Value))
	case abi.OpTimer: // the payload ("" when empty), when it was due, whether late
		t.RawSetString("value", glua.LString(ev.Value))
		t.RawSetString("deadline", glua.LNumber(ev.Deadline))
		t.RawSetString("late", glua.LBool(ev.Late))
	}
	t.RawSetString("version", glua.LString(ev.Version))
	t.RawSetString("resync", glua.LBool(ev.Resync))
	t.RawSetString("coalesced", glua.LNumber(ev.Coalesced))
	return t
}
