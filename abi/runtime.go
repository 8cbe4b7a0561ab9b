package abi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Runtime compiles and runs rules of one kind (Lua, WebAssembly, plugin). The
// host drives it; a runtime never imports the host or the store client.
type Runtime interface {
	// Kind names the runtime: "lua", "wasm" or "plugin".
	Kind() string
	// Compile checks and compiles the rule named name (its file path) from
	// src. A rule that cannot run fails here with a *CompileError, never
	// later. Compile must be safe for concurrent use.
	Compile(ctx context.Context, name string, src []byte) (Program, error)
	// Close releases the runtime; programs and scripts must be closed first.
	Close(ctx context.Context) error
}

// Program is a compiled rule, ready to start any number of times. A rule
// whose concurrency is above 1 (the host's per-key concurrency) runs that
// many Scripts of one Program at once, each with its own Host, and each
// called by one goroutine at a time: the Scripts must share no state.
type Program interface {
	// Start instantiates the rule bound to h and runs its initialisation,
	// during which the rule declares its watches through h.Watch. The
	// initialisation runs under lim like an event handler.
	Start(ctx context.Context, h Host, lim Limits) (Script, error)
}

// Script is a running rule.
type Script interface {
	// Handle delivers one event and returns when the rule has handled it.
	// The host never calls Handle concurrently on one Script. An error
	// means the call failed (ErrTimeout, ErrMemory, ErrCrashed, or the
	// rule's own error); the Script stays usable for the next event (a
	// runtime replaces a broken instance itself).
	Handle(ctx context.Context, ev Event) error
	// Close stops the rule and frees its resources.
	Close(ctx context.Context) error
}

// Limits bound one rule's handler calls.
type Limits struct {
	// CallTimeout bounds each handler call and the initialisation;
	// DefaultCallTimeout when zero.
	CallTimeout time.Duration
	// MemoryBytes caps the rule's memory: WASM linear memory (rounded down
	// to 64 KiB pages), what a Lua rule's state holds (estimated; see
	// runtime/lua). DefaultMemoryBytes when zero.
	MemoryBytes int64
}

// Defaults for zero Limits fields.
const (
	DefaultCallTimeout = time.Second
	DefaultMemoryBytes = 64 << 20
)

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.CallTimeout <= 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	return l
}

// Handler failures. Runtimes wrap them with what happened.
var (
	// ErrTimeout: the call ran past Limits.CallTimeout and was stopped.
	ErrTimeout = errors.New("handler exceeded its deadline")
	// ErrMemory: the call exceeded Limits.MemoryBytes and was stopped.
	ErrMemory = errors.New("handler exceeded its memory limit")
	// ErrCrashed: the rule panicked, trapped or raised an error.
	ErrCrashed = errors.New("handler failed")
	// ErrRaised: the rule raised an error of its own (Lua's error() or a
	// failed assert, a runtime error in its code), as opposed to a crash of
	// the sandbox. It wraps ErrCrashed, so errors.Is(err, ErrCrashed) holds
	// for it too; the host reports it as kind "error", not "crash".
	ErrRaised = fmt.Errorf("%w: the rule raised an error", ErrCrashed)
)

// CompileError is a rule that does not compile or load, with its position.
type CompileError struct {
	File string
	Line int // 1-based; 0 when the error has no line (a WASM module)
	Msg  string
}

func (e *CompileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}
