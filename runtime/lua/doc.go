// Package lua runs ssrun rules written in Lua 5.1 on gopher-lua. It
// implements abi.Runtime, abi.Program and abi.Script and gives each rule the
// ABI v1 Lua surface of package abi ("# Lua").
//
// # The ssrun module
//
//	local ss = require("ssrun")
//	ss.watch("thermostat1/setPoint")          -- at load
//	function on_event(ev) ... end             -- ev.key, ev.op, ev.value, ev.version, ev.resync, ev.coalesced
//
// A rule's top-level code runs once when it starts (and again whenever its
// state is rebuilt, see below) and must define a global function on_event,
// which receives one event table at a time: key, op ("SET", "DELETE",
// "LOCK_LOST" or "TIMER"), value (a string for SET and TIMER, else nil),
// version (a string, "" when unknown), resync (a boolean) and coalesced (how
// many earlier changes of the key this one replaced in the rule's full
// mailbox, see abi.Event.Coalesced; 0 for most events). A TIMER event
// (one of the rule's timers fired; key is its name, value its payload, ""
// when it has none) also has deadline, when it was due in Unix
// milliseconds, and late, true when it fired after that (the host was down
// or the rule busy); other events have neither.
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
//	ss.timer(name, delay_ms [, {every=ms, payload=string}]) -> true
//	ss.cancel(name)                -> true | false (none armed)
//	ss.now()                       -> the host's clock, Unix milliseconds
//
// Every other outcome returns nil, message, code, where code is the status
// name ("DENIED", "LOCK_LOST", "TIMEOUT", ...). Bad option values also fail
// this way with "INVALID" before the host is called: an unknown option key,
// nx and nex together, a ttl, wait, delay_ms or every that is not a whole
// number of milliseconds >= 0 (the lock ttl must be > 0), an empty fence
// name, an unknown log level.
//
// Timers (ABI revision 2) belong to the rule and are kept by the host in
// the state store: ss.timer arms the rule's timer name to fire after
// delay_ms (0: at once), replacing one of that name (re-arming postpones
// it: the debounce idiom), then, with every > 0, again at each previous
// deadline plus every; its firing is a TIMER event. Too many timers fail
// with "QUOTA", a payload larger than the rule's value limit with
// "TOO_LARGE". ss.now is a whole number (exact in Lua's doubles); TIMER
// deadlines are on the same clock.
//
// Keys, values and messages are Lua strings, byte for byte (any bytes,
// including NUL); a number is accepted too and converted as tostring does.
// Arguments of any other type, options that are not a table, and option
// values of the wrong type (nx="yes", ttl="5") raise a Lua error naming the
// function and the argument, e.g. "ss.get: bad argument #1 'key' (string
// expected, got nil)".
//
// Also in the module: ss.debug, ss.info, ss.warn and ss.error(message),
// shorthands for ss.log; ss.status, the status codes by name
// (ss.status.NOT_FOUND == 1); and ss.json (below).
//
// # JSON
//
//	ss.json.encode(value)  -> text
//	ss.json.decode(text)   -> value | nil, message
//	ss.json.null           JSON null (a userdata; tostring gives "null")
//	ss.json.array_mt       the metatable that marks a table as an array
//
// decode makes tables of arrays and objects, strings (invalid UTF-8 becomes
// U+FFFD, as in encoding/json), numbers (Lua's doubles: integers are exact
// up to 2^53), booleans, and ss.json.null for null, so that a null keeps
// its place in an array ([1,null,3] has length 3), an object keeps its key,
// and decode("null") is not mistaken for a failure. Arrays it makes have
// ss.json.array_mt as metatable, so "[]" encodes back as "[]". Duplicate
// keys: the last wins. Bad text returns nil and a message with the byte
// offset ("ss.json.decode: invalid character '}' looking for beginning of
// value at offset 5"), and so do nesting deeper than MaxJSONDepth (200),
// a number out of range of a double and text after the value.
//
// encode writes nil and ss.json.null as null; numbers whole and below 1e21
// as integers ("12"), others in the shortest form that reads back the
// same; strings escaped (", \, control characters, U+2028 and U+2029; not
// /, <, > or &). A table is an array when its keys are exactly 1..n (n >
// 0) or when its metatable is ss.json.array_mt (then its keys must be
// indices; missing ones are null); any other table is an object: number
// keys become their tostring text, and members are sorted by key, so equal
// tables encode to equal text (ss.set's nex relies on that). So an empty
// table is {}: write setmetatable({}, ss.json.array_mt) for []. encode
// raises a Lua error, naming where the value is ("ss.json.encode: cannot
// encode a function at a.b[3]"), for a cycle, nesting deeper than
// MaxJSONDepth, a function, a userdata other than ss.json.null, NaN or an
// infinity, a string that is not valid UTF-8, a key that is neither a
// string nor a number, and two keys with the same text (1 and "1"); wrap
// it in pcall to recover.
//
// Both run under the rule's limits: they look at the deadline every 1024
// values (a huge table cannot slip it), and what they build (decoded
// tables and strings, encode's output as it grows) is reserved in the
// memory account before it is allocated, so hostile text (deep nesting,
// "[],[],..." that makes a table of ~100 bytes per 3 bytes of text) is
// refused or stopped at the limit.
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
// string.find, match, gmatch and gsub are replaced (see Patterns), and so
// are the builtins that build strings (see Memory), pcall and xpcall (see
// Limits and failures), table.sort (it stops at the deadline; a nil
// comparator is allowed, as in Lua) and math.random (Lua 5.1's errors,
// "bad argument #1 to random (interval is empty)", instead of Go's panic).
// math.randomseed does nothing (math.random uses Go's process-wide source,
// or the generator Config.Rand gives the script: ssrun test seeds it).
// xpcall runs its handler once the failed function has returned, not where
// the error was raised (without the debug library a rule cannot tell), and
// string.format ignores extra arguments, as Lua does, where gopher-lua
// appended "%!(EXTRA ...)".
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
// Compile rewrites every .. chain into a call of a builtin (see Memory);
// the call takes two registers more than gopher-lua's OP_CONCAT, so a flat
// chain compiles up to 197 operands instead of 199 ("register overflow";
// parentheses split a chain). Compiled chunks are cached by rule name and content while a Program uses
// them, and shared read-only by all its Scripts. Program.Start builds a
// state (about 75 KB live for a 50-line rule) and runs the top-level code;
// an error there, or a missing on_event, fails Start with an *Error naming
// file and line.
//
// Compile also refuses a call of a function the ssrun module does not have
// (ss.sett for ss.set), wherever it is, with an *abi.CompileError naming
// file and line: such a call would fail only when it runs, maybe at some
// event in production. It sees calls on a name bound to require("ssrun")
// (respecting scopes) and on require("ssrun") itself; it leaves alone names
// the rule adds to the module, names the rule also reads without calling
// (a test before a call: if ss.future then ss.future() end), the module
// reached any other way, and the fields of ss.json and ss.status (vet.go).
//
// # Limits and failures
//
// Every call into Lua (the top-level code and each on_event) runs under
// abi.Limits and returns an *Error naming file and line when it fails:
//
//   - abi.Limits.CallTimeout is the call's deadline; gopher-lua checks it at
//     every instruction, so `while true do end` stops (abi.ErrTimeout), and
//     the Go builtins that can run long check it too (table.sort, the
//     pattern functions) or are linear in what the memory limit allows. A
//     call that returns after its deadline is a timeout as well. The state
//     is kept: the next event is handled normally.
//   - abi.Limits.MemoryBytes caps what the rule's state holds (see Memory);
//     past it the call fails with abi.ErrMemory and the state is discarded.
//   - pcall and xpcall catch errors, not the end of a call: once its
//     deadline has passed or its memory limit stopped it, the error goes
//     through them, and the line reported is where it was raised (inside
//     the protected function). `return pcall(function() while true do end
//     end)` is a timeout at the loop's line.
//   - A Lua error (error(), a bad argument, "stack overflow") fails the call
//     with abi.ErrCrashed and keeps the state.
//   - A Go panic inside gopher-lua (bug #282: `local function g(...) return
//     g(1, ...) end g()` makes its error handler index -1) is recovered,
//     also through pcall; the call fails with abi.ErrCrashed at the rule's
//     innermost line and the state is discarded.
//
// A discarded state is rebuilt from the compiled chunk at the next Handle;
// the rule's top-level code runs again, so its globals start afresh and its
// watches are declared again (harmless: Host.Watch is idempotent).
//
// Deep recursion is bounded by Config.CallStackSize ("stack overflow") and
// the value stack by Config.RegistryMaxSize ("registry overflow").
//
// # Memory
//
// abi.Limits.MemoryBytes is the most a rule's state may hold: the strings,
// tables and functions reachable from its globals, registry and value
// stack (compiled code, shared by a rule's states, is not counted), as
// estimated by this package (within a factor of two of the Go heap for
// common shapes; see TestStateBytesEstimate). gopher-lua cannot account
// memory, so the package does, per rule and on the rule's own goroutine:
//
//   - Everything that builds a string sizes it first and reserves it in the
//     rule's account: the .. operator (Compile rewrites every .. chain into
//     a call of a builtin that joins exactly as gopher-lua's OP_CONCAT, see
//     concat.go), string.format, rep, gsub, sub, upper, lower, reverse,
//     pattern captures, table.concat, print, error, the arguments of the
//     ss verbs, what ss.get returns and what ss.json builds. When a reservation would take the
//     rule past its limit, the state is measured (garbage does not count)
//     and, if it still would, the call fails with abi.ErrMemory at the
//     rule's line before anything is allocated. One expression cannot
//     build past the limit, however many operands it has.
//   - What the VM allocates itself (tables growing, closures) cannot be
//     seen as it happens. Every 8192 instructions of the rule (counted
//     across its calls) it reads the process heap (runtime/metrics); when
//     it has grown enough since the rule was last measured that the rule
//     could be past its limit (the live heap after a collection, or all
//     allocation past 2 x MemoryBytes + 64 MiB), the rule measures itself,
//     and is stopped if it is over. A table can therefore grow past the
//     limit by what it gains until the next collection (or that allocation
//     backstop), and the instructions left until the next check, before it
//     is stopped; growth at the end of a call is seen by the rule's next
//     calls.
//   - Only the rule that holds the memory is stopped: a call blocked in a
//     host verb (ss.lock waiting) runs no instruction, so it never measures
//     itself nor is blamed for another rule's memory.
//
// Measuring costs time linear in the state (stopping early once past the
// limit), so a rule that keeps building strings while holding nearly its
// whole limit is measured often and runs slowly. string.sub and pattern
// captures of a string longer than 64 bytes return copies, as in Lua,
// instead of slices that would keep the whole string alive.
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
// A Go builtin runs to its end (or to its own deadline check): the longest
// ones are linear in the memory limit (string.rep or string.upper of tens
// of MiB take tens of milliseconds). One assignment to a far integer key
// makes gopher-lua fill a table's array with nils up to it in a single
// instruction; the package lowers glua.MaxArrayIndex from 64 Mi to 4 Mi so
// that this array is at most 64 MiB (t[6e7] = 1 allocated 1 GiB), at the
// price that gopher-lua's # and ipairs do not see elements past the 4 Mi-th
// (they go to the hash part). The memory estimate of a small table with
// string keys can be off by up to a factor of two either way: gopher-lua
// sizes its map for 32 keys or for its constructor's, which cannot be seen.
// gopher-lua miscompiles an assignment to a field of a literal, ("x").k =
// v: it stores into whichever register the constant's index names (a local
// table, if one is there); a rule has no reason to do this, but the rewrite
// of .. can change which register that is.
package lua
