// Package abi is ssrun's contract between the host and user code, version 1.
// The same verbs reach every runtime: Lua rules (runtime/lua), WebAssembly
// modules (runtime/wasm) and native plugins (runtime/plugin). This package is
// the reference; each runtime has a test that proves every verb is wired, so
// documentation and runtimes cannot drift.
//
// # Verbs
//
// Keys are byte strings (any bytes, non-empty). Values are byte strings
// (empty allowed, distinct from absent). Versions and fencing tokens are
// opaque HLC text such as "001732000000000:00001:StateStore"; compare them
// only for equality.
//
//	verb     parameters                         results                     statuses besides OK
//	get      key                                value, version              NOT_FOUND
//	set      key, value, {nx|nex, ttl, fence}   version (new, or stored)    NOT_APPLIED (condition false; version = stored)
//	del      key, {fence}                       -                           NOT_FOUND (nothing removed)
//	vdel     key, value, {fence}                -                           NOT_FOUND (absent), NOT_APPLIED (value differs)
//	watch    key, {self}                        -                           -
//	unwatch  key                                -                           NOT_FOUND (not watched)
//	lock     name, ttl, {wait}                  fencing token               BUSY (held by another past wait)
//	unlock   name                               -                           NOT_FOUND (not held)
//	log      level, message                     -                           -
//	timer    name, delay, {every, payload}      -                           QUOTA (too many timers)   (revision 2)
//	cancel   name                               -                           NOT_FOUND (none armed)    (revision 2)
//	now      -                                  Unix milliseconds           -                         (revision 2)
//	keys     pattern, {limit}                   the matching keys, sorted   LIMIT (more match than limit)   (revision 3)
//	watch_pattern   pattern, {self}             -                           LIMIT (max_watched_keys)  (revision 3)
//	unwatch_pattern pattern                     -                           NOT_FOUND (not watched)   (revision 3)
//
// Any verb can also fail with INVALID (bad argument), DENIED (the rule's key
// permissions), TIMEOUT (the call's deadline), UNAVAILABLE (store offline),
// STORE_ERROR or INTERNAL; writes with TOO_LARGE (value size limit; also any
// call whose request exceeds the broker's maximum packet size: not sent), QUOTA
// (store key quota), FENCED (the store refused the fencing token) and
// LOCK_LOST (the fence names a lock this rule lost or never held).
//
//   - set: nx writes only if the key is absent; nex writes if absent or if the
//     stored value equals the new value (the lease-renewal primitive); ttl
//     expires the key (millisecond resolution); fence names a lock held by
//     this rule, whose current token the host attaches as the store's fencing
//     token (`__ft`).
//   - watch: the rule receives an event for every change of key. By default
//     a rule is not woken by its own writes; {self} asks for them too.
//     Watches are usually declared while the rule loads.
//   - lock: a lease on the key name, held with value "<client id>:<rule>"
//     and renewed by the host every ttl/3 while held. Its token is the lock
//     key's store version; it grows with every renewal. When a renewal fails
//     (the lease lapsed or was taken), the rule gets a LOCK_LOST event and
//     writes fenced with the lock fail locally with LOCK_LOST. Locking a lock
//     the rule holds returns the current token.
//   - unlock: stops renewal and deletes the lock key if it still holds this
//     rule's value (VDEL).
//   - log: levels are those of log/slog (-4 debug, 0 info, 4 warn, 8 error);
//     the line is tagged with the rule.
//   - timer: arms the rule's timer name to fire after delay (milliseconds;
//     zero fires at once), replacing a timer of that name, so re-arming
//     postpones it (the debounce idiom). With every, it fires again at each
//     previous deadline plus every (no drift); without, once. The payload
//     (bytes, empty allowed) is the value of its events. A timer belongs to
//     the rule, not to one version of it: it is kept in the state store
//     before timer returns and survives host restarts (even kill -9) and hot
//     reloads; deleting the rule's file drops its timers. Delivery is at
//     least once: a timer that fired may fire again if the host stops
//     before it has recorded the firing.
//   - cancel: disarms the rule's timer name; its pending firing is dropped.
//   - keys: the keys matching pattern, sorted bytewise, that the rule may
//     read (the rule's read permissions; keys under the host's reserved
//     prefix "$ssrun/" never). The pattern is the glob of the ACL's keyType
//     Pattern and of the store's SCAN: `*` any run of characters ('/'
//     included), `?` one character, `[a-z]`, `[!a-z]`, `\x` the character x.
//     A malformed pattern (`[`, a trailing `\`) is INVALID; a pattern that no
//     key the rule may read can match (its literal beginning is outside
//     every read permission, or under "$ssrun/") is DENIED. limit (default
//     DefaultKeysLimit, 1000; at most MaxKeysLimit, 100,000) bounds the
//     list: when more keys match, keys fails with LIMIT, never a cut list.
//     The host pages through the store (SCAN) and stops at limit+1 keys, so
//     memory stays bounded whatever the store holds.
//   - watch_pattern: the rule receives an event for every key matching
//     pattern (same glob, same permissions): at once a SET event (resync
//     set) for each key that exists, then every change of those keys, a SET
//     (resync set) for each key created later, found by the host's rescan
//     (every `rescan` of the rule's settings, 10 s by default, or at once
//     when a rule of the same host writes a matching key), and a DELETE when
//     one goes away. After a reconnect, a reload or a group's hand-over, the
//     rule gets what differs from what it last saw, as for watch. The keys
//     watched through patterns count against the rule's max_watched_keys
//     (10,000 by default): a pattern that would pass it fails with LIMIT at
//     the call, and a rescan that finds more keys watches none of the excess,
//     logs it and counts it (never a silent cut). Idempotent; {self} as for
//     watch.
//   - unwatch_pattern: stops the pattern's watch (its keys stay watched if an
//     exact watch or another pattern covers them).
//   - now: the host's clock, wall time in Unix milliseconds from the hybrid
//     logical clock it keeps with the store (so never behind a version the
//     host has seen); deadlines of TIMER events are on this clock.
//
// # Events
//
// A rule's handler receives one event at a time, in the order the host
// received the changes. Fields: key; op "SET", "DELETE", "LOCK_LOST" (key is
// then the lock name) or "TIMER" (revision 2; key is the timer's name);
// value (SET: the new value; TIMER: the timer's payload); version; resync
// (the event was synthesised after a reconnect because the key changed while
// the host was offline; intermediate changes may be missed); deadline (TIMER:
// when it was due, Unix milliseconds); late (TIMER: delivered after its
// deadline, because the host was down or the rule busy); coalesced (SET and
// DELETE: how many earlier changes of the key this event replaced while they
// waited in the rule's full mailbox; 0 for most events). Under overload the
// host conflates by key rather than dropping: a rule sees the latest value
// and version of every key it watches, possibly skipping intermediate ones,
// and a key's versions still arrive in increasing order.
//
// # Status codes
//
//	0 OK  1 NOT_FOUND  2 NOT_APPLIED  3 BUFFER_TOO_SMALL  4 INVALID  5 DENIED
//	6 FENCED  7 LOCK_LOST  8 BUSY  9 TIMEOUT  10 UNAVAILABLE  11 TOO_LARGE
//	12 QUOTA  13 STORE_ERROR  14 INTERNAL  15 LIMIT (revision 3)
//
// # Lua
//
//	local ss = require("ssrun")
//	ss.watch("thermostat1/setPoint")          -- at load
//	function on_event(ev) ... end             -- ev.key, ev.op, ev.value, ev.version, ev.resync, ev.coalesced
//
//	ss.get(key)                    -> value, version | nil (absent)
//	ss.set(key, value [, {nx=true | nex=true, ttl=ms, fence="lock"}])
//	                               -> true, version | false, stored_version (not applied)
//	ss.del(key [, {fence=...}])    -> 1 | 0
//	ss.vdel(key, value [, {fence=...}]) -> 1 | 0 | -1
//	ss.watch(key [, {self=true}])  -> true
//	ss.unwatch(key)                -> true | false
//	ss.lock(name, ttl_ms [, {wait=ms}]) -> token | false (busy)
//	ss.unlock(name)                -> true | false
//	ss.log(level, message)         level: "debug" | "info" | "warn" | "error"
//	ss.timer(name, delay_ms [, {every=ms, payload=string}]) -> true   (revision 2)
//	ss.cancel(name)                -> true | false (none armed)
//	ss.now()                       -> Unix milliseconds
//	ss.keys(pattern [, limit])     -> a sequence table of keys (#keys counts them)   (revision 3)
//	ss.watch_pattern(pattern [, {self=true}]) -> true
//	ss.unwatch_pattern(pattern)    -> true | false (not watched)
//	ss.json.encode(value), ss.json.decode(text)
//	                               TIMER events: ev.key (name), ev.value (payload), ev.deadline, ev.late
//
// Every other failure returns nil, message, code (code is the status name,
// e.g. "DENIED"). Arguments of the wrong type raise a Lua error.
//
// # WebAssembly binary contract
//
// Host functions are imported from module "ssrun". Pointers and lengths are
// i32 offsets into the guest's exported memory "memory"; durations are i64
// milliseconds. Every host function returns an i32 status. A pointer range
// outside memory is ABI misuse and traps the call.
//
//	get(key_ptr, key_len, out_ptr, out_cap, out_len_ptr) -> status
//	    result record: field value, field version
//	set(key_ptr, key_len, val_ptr, val_len, cond i32, ttl_ms i64,
//	    fence_ptr, fence_len, out_ptr, out_cap, out_len_ptr) -> status
//	    cond: 0 none, 1 NX, 2 NEX; fence_len 0 = no fence
//	    result record (OK and NOT_APPLIED): field version
//	del(key_ptr, key_len, fence_ptr, fence_len) -> status
//	vdel(key_ptr, key_len, val_ptr, val_len, fence_ptr, fence_len) -> status
//	watch(key_ptr, key_len, flags i32) -> status          flags bit 0: self
//	unwatch(key_ptr, key_len) -> status
//	lock(name_ptr, name_len, ttl_ms i64, wait_ms i64, out_ptr, out_cap, out_len_ptr) -> status
//	    result record: field token
//	unlock(name_ptr, name_len) -> status
//	log(level i32, msg_ptr, msg_len) -> status
//	result(out_ptr, out_cap, out_len_ptr) -> status
//	last_error(out_ptr, out_cap, out_len_ptr) -> status
//	timer(name_ptr, name_len, delay_ms i64, every_ms i64, payload_ptr, payload_len) -> status
//	cancel(name_ptr, name_len) -> status
//	now(out_ptr) -> status                               writes u64 little-endian Unix ms at out_ptr
//	    (timer, cancel and now: revision 2)
//	keys(pattern_ptr, pattern_len, limit i64, out_ptr, out_cap, out_len_ptr) -> status
//	    limit: 0 = DefaultKeysLimit, at most MaxKeysLimit (else INVALID)
//	    result record: u32 little-endian count, then count fields, one key
//	    each (AppendKeys)
//	watch_pattern(pattern_ptr, pattern_len, flags i32) -> status  flags bit 0: self
//	unwatch_pattern(pattern_ptr, pattern_len) -> status
//	    (keys, watch_pattern and unwatch_pattern: revision 3)
//
// Results. A verb with results writes a result record (a sequence of fields,
// each a u32 little-endian length followed by that many bytes; see
// AppendField) into out_ptr[0:out_cap] and its length, as u32 little-endian,
// at out_len_ptr. If the record is longer than out_cap, nothing is written to
// out_ptr, the needed length is written at out_len_ptr, and the call returns
// BUFFER_TOO_SMALL; the host keeps the record (and the verb's real status)
// until the guest's next verb call (`result` and `last_error` leave it in
// place), and `result` copies it into a larger buffer and returns the real
// status (or BUFFER_TOO_SMALL again). The store operation is never repeated.
// A status without a record (e.g. get's NOT_FOUND) writes nothing at
// out_len_ptr; `result` with no record kept returns INVALID. `last_error`
// copies the message of the last call that failed (plain UTF-8 text, not a
// record) the same way. The host never calls back into the guest during a
// host function, so guests need no re-entrancy.
//
// Guest exports:
//
//	memory                                  the linear memory
//	ssrun_abi_version() -> i32              must return Version (1)
//	ssrun_alloc(size i32) -> i32            a buffer of size bytes for the host to write into
//	                                        (0 = cannot; the event then fails)
//	ssrun_on_event(ptr i32, len i32) -> i32 handle the event record at ptr (see
//	                                        AppendEvent); 0 = handled, other = failed
//	_initialize                             optional (reactors, e.g. Go c-shared): run once
//	                                        at start; the place to call watch
//	ssrun_event_coalesced() -> i32          optional: return 1; the guest decodes the
//	                                        coalesced flag and count of an event record
//	                                        (see AppendEvent). Without it the host never
//	                                        sets them (the guest sees coalesced 0).
//
// The host calls ssrun_alloc for the event record, writes it, calls
// ssrun_on_event, and never touches that buffer again: the guest owns and
// frees it. The module is checked when it loads: every import from "ssrun"
// must be a v1 function with exactly the signature above, and the three
// exports must exist with these signatures; otherwise loading fails with an
// error naming the import or export. Loading then initialises one check
// instance, in which watch, unwatch, watch_pattern, unwatch_pattern, log,
// timer, cancel and now succeed (timers armed and patterns watched there
// are dropped) and the other verbs fail with
// UNAVAILABLE, calls ssrun_abi_version, which must return 1, and
// discards it; starting the rule initialises it again for real.
//
// Guests get WASI preview 1 with real clocks, real randomness and stdout and
// stderr sent to the log tagged with the rule; no filesystem, network or
// environment.
//
// # Versioning
//
// Additive only: a new verb is a new name, a signature never changes, a status
// code never changes meaning. Version stays 1 and Revision counts the
// additions; what a rule uses says what it needs:
//
//   - revision 2 (timers) added timer, cancel, now and the TIMER event. A
//     WebAssembly module built for revision 1 imports none of them and loads
//     unchanged, and never receives a TIMER record (only a rule that armed a
//     timer does). A module that imports them fails to load on a revision-1
//     host with an error naming the unknown import. A plugin built against
//     revision 1 keeps working; a revision-2 plugin calling timer on an
//     older host gets STATUS_INTERNAL ("unimplemented"). Lua rules see the
//     new functions in the ssrun module.
//   - revision 3 (key families) added keys, watch_pattern, unwatch_pattern
//     and the status LIMIT. Rules of revisions 1 and 2 load and run
//     unchanged: a module that does not import the new functions never
//     sees them, and a rule that never calls watch_pattern gets no event it
//     did not get before.
//   - the event field coalesced (Event.Coalesced) is additive and needs no
//     verb: Lua rules see ev.coalesced (0 on a host without it); plugins get
//     Event.coalesced (protobuf field 8, skipped by older plugins); a
//     WebAssembly module gets it only if it exports ssrun_event_coalesced
//     (the Go and AssemblyScript SDKs provide it), so a module built before
//     it gets the record it always got.
package abi
