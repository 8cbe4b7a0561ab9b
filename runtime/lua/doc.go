// Package lua runs ssrun rules written in Lua 5.1 on gopher-lua. It
// implements abi.Runtime, abi.Program and abi.Script and gives each rule the
// ABI v1 Lua surface of package abi ("# Lua").
//
// # The ssrun module
//
//	local ss = require("ssrun")
//	ss.watch("thermostat1/setPoint")          -- at load
//	function on_event(ev) ... end             -- ev.key, ev.op, ev.value, ev.version, ev.resync
//
// A rule's top-level code runs once when it starts (and again whenever its
// state is rebuilt, see below) and must define a global function on_event,
// which receives one event table at a time: key, op ("SET", "DELETE" or
// "LOCK_LOST"), value (a string for SET, else nil), version (a string, ""
// when unknown) and resync (a boolean).
//
// The functions mirror the verbs exactly as abi documents them:
//
//	ss.get(key)                    -> value, version | nil (absent)
//	ss.set(key, value [, {nx=true | nex=true, ttl=ms, fence="lock"}])
//	                               -> true, version | false, stored_version (not applied)
//	ss.del(key [, {fence=...}])    -> 1 | 0 (absent)
//	ss.vdel(key, value [, {fence=...}]) -> 1 | 0 (absent) | -1 (value differs)
//	ss.watch(key [, {self=true}])  -> true
//	ss.unwatch(key)                -> true | false (not watched)
//	ss.lock(name, ttl_ms [, {wait=ms}]) -> token | false (busy)
//	ss.unlock(name)                -> true | false (not held)
//	ss.log(level, message)         -> true; level "debug" | "info" | "warn" | "error"
//
// Every other outcome returns nil, message, code, where code is the status
// name ("DENIED", "LOCK_LOST", "TIMEOUT", ...). Bad option values also fail
// this way with "INVALID" before the host is called: an unknown option key,
// nx and nex together, a ttl or wait that is not a whole number of
// milliseconds >= 0 (the lock ttl must be > 0), an empty fence name, an
// unknown log level.
//
// Keys, values and messages are Lua strings, byte for byte (any bytes,
// including NUL); a number is accepted too and converted as tostring does.
// Arguments of any other type, options that are not a table, and option
// values of the wrong type (nx="yes", ttl="5") raise a Lua error naming the
// function and the argument, e.g. "ss.get: bad argument #1 'key' (string
// expected, got nil)".
//
// Also in the module: ss.debug, ss.info, ss.warn and ss.error(message),
// shorthands for ss.log; and ss.status, the status codes by name
// (ss.status.NOT_FOUND == 1).
//
// # Sandbox
//
// Each Script has its own gopher-lua state (so patching string, which is
// every string's metatable, stays inside one rule) with only the base,
// table, string and math libraries. Removed: io, os, debug, package,
// channel, coroutine, dofile, loadfile, load, loadstring, collectgarbage,
// getfenv, setfenv, module, newproxy and _printregs. require returns the
// ssrun module and raises "module 'x' not available" for any other name.
// print writes its arguments, tab-separated, to the host log at info level.
// string.find, match, gmatch and gsub are replaced (see Patterns).
// math.randomseed does nothing (math.random uses Go's process-wide source).
//
// coroutine is left out on purpose: gopher-lua ties a coroutine to the
// context of the call that created it, so a coroutine kept in a global
// fails with "context canceled" in every later event; and each coroutine is
// a whole extra state (its own value and call stacks). Handlers that run one
// event at a time do not need it.
//
// # Compiling and starting
//
// Runtime.Compile parses and compiles a rule once; syntax errors are
// *abi.CompileError values with the line. Sources are limited to
// MaxSourceBytes and to MaxSyntaxDepth nested brackets and blocks.
// Compiled chunks are cached by rule name and content while a Program uses
// them, and shared read-only by all its Scripts. Program.Start builds a
// state (about 75 KB live for a 50-line rule) and runs the top-level code;
// an error there, or a missing on_event, fails Start with an *Error naming
// file and line.
//
// # Limits and failures
//
// Every call into Lua (the top-level code and each on_event) runs under
// abi.Limits and returns an *Error naming file and line when it fails:
//
//   - abi.Limits.CallTimeout is the call's deadline; gopher-lua checks it at
//     every instruction, so `while true do end` stops (abi.ErrTimeout). The
//     state is kept: the next event is handled normally.
//   - A Lua error (error(), a bad argument, "stack overflow") fails the call
//     with abi.ErrCrashed and keeps the state.
//   - A Go panic inside gopher-lua (bug #282: `local function g(...) return
//     g(1, ...) end g()` makes its error handler index -1) is recovered;
//     the call fails with abi.ErrCrashed and the state is discarded.
//   - abi.Limits.MemoryBytes is enforced approximately (abi.ErrMemory, state
//     discarded), see below.
//
// A discarded state is rebuilt from the compiled chunk at the next Handle;
// the rule's top-level code runs again, so its globals start afresh and its
// watches are declared again (harmless: Host.Watch is idempotent).
//
// Deep recursion is bounded by Options.CallStackSize ("stack overflow") and
// the value stack by Options.RegistryMaxSize ("registry overflow").
//
// # Memory (approximate)
//
// gopher-lua has no allocation accounting and no hook into its VM, so the
// memory limit is two approximations:
//
//   - Builtins that build a result in one step refuse a result larger than
//     MemoryBytes: string.rep, table.concat and the .. operator fail the
//     call with abi.ErrMemory before allocating (Compile rewrites every ..
//     chain into a call of a builtin that joins exactly as gopher-lua's
//     OP_CONCAT, see concat.go); string.format allows at most two digits of
//     width and precision, as Lua 5.1 does.
//   - While a call runs longer than a millisecond, a watchdog samples the
//     Go heap (runtime/metrics) every millisecond and cancels the call when
//     the live heap (as of the last garbage collection) has grown by more
//     than MemoryBytes since the call began, or when all allocation has
//     grown by more than 4 x MemoryBytes + 64 MiB (a bomb that outruns the
//     collector). The readings are the whole process's: garbage churn does
//     not count, but memory another rule keeps reachable does, so only the
//     longest-running watched call is stopped and the others are re-based
//     (a bomb runs until stopped; well-behaved calls are short). A
//     long-running well-behaved call that overlaps a newer rule's bomb can
//     still be blamed first. A reading can be a few MB high under heavy
//     churn, so keep limits well above that, and a call can overshoot by
//     what it allocates until the next collection or in one builtin.
//
// # Patterns
//
// string.find, match, gmatch and gsub are this package's own
// implementation of Lua 5.1 patterns (pattern.go), not gopher-lua's: that
// one backtracks without bound inside Go code, which no deadline can stop
// (("a?"):rep(20)..("a"):rep(20) ran for minutes), and its gsub copies the
// whole subject once per match. Ours checks the call's context as it goes,
// limits nesting like Lua 5.2 ("pattern too complex", 200 levels) and builds
// gsub's result in one pass under the memory limit. Semantics are Lua
// 5.1's, including its lazy errors (a malformed pattern fails only when the
// matcher reaches the bad part) and %f.
//
// # Known limitations
//
// Go code cannot be interrupted: a single builtin call runs to its end
// whatever the deadline. With the caps above, the slowest are linear in
// the memory limit (string.rep or string.upper of tens of MiB take tens of
// milliseconds) and table.sort with the default comparison, n log n in the
// table's length.
package lua
