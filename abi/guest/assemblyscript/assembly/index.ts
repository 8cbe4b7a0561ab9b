// ssrun guest SDK for AssemblyScript: rules built as WebAssembly reactors
// for ssrun ABI v1 (abi/doc.go in the ssrun repository, "WebAssembly binary
// contract").
//
// A rule's entry file declares its watches and its handler at top level
// (compiled into the reactor's _initialize) and re-exports the three ABI
// exports (and ssrun_event_coalesced, to see Event.coalesced):
//
//   import { Event, Status, handle, set, watch } from "<path>/abi/guest/assemblyscript/assembly";
//   export { ssrun_abi_version, ssrun_alloc, ssrun_on_event, ssrun_event_coalesced } from "<path>/abi/guest/assemblyscript/assembly";
//
//   watch("thermostat1/setPoint");
//   handle((ev: Event): Status => set("thermostat1/echo", ev.text()).status);
//
// Build it with this package's asconfig.json (see README.md): it exports the
// start function as _initialize and routes abort() to the host log.
//
// Keys, lock names, timer names, versions, tokens and log messages are strings; they
// cross the ABI as UTF-8. Values are bytes: every verb taking a value has a
// string form (UTF-8) and a Uint8Array form (binary). Every verb reports a
// Status, directly or as the `status` of its result; lastError() is the
// host's message for the most recent call (empty when it succeeded).

// ---------------------------------------------------------------------------
// Public API

/** ABI version this SDK speaks. */
export const ABI_VERSION: i32 = 1;

/** Result code of every call; the values are those of the ABI. */
export enum Status {
  OK = 0,
  NotFound = 1,
  NotApplied = 2,
  BufferTooSmall = 3,
  Invalid = 4,
  Denied = 5,
  Fenced = 6,
  LockLost = 7,
  Busy = 8,
  Timeout = 9,
  Unavailable = 10,
  TooLarge = 11,
  Quota = 12,
  StoreError = 13,
  Internal = 14,
  /**
   * A bound was reached: more keys match than keys' limit, or a pattern
   * watch would pass the rule's max_watched_keys (ABI revision 3).
   */
  Limit = 15,
}

const statusNames: string[] = [
  "OK", "NOT_FOUND", "NOT_APPLIED", "BUFFER_TOO_SMALL", "INVALID", "DENIED", "FENCED",
  "LOCK_LOST", "BUSY", "TIMEOUT", "UNAVAILABLE", "TOO_LARGE", "QUOTA", "STORE_ERROR", "INTERNAL", "LIMIT",
];

/** The ABI name of a status, e.g. "NOT_FOUND"; "STATUS_<n>" for unknown codes. */
export function statusName(s: Status): string {
  if (<i32>s >= 0 && <i32>s < statusNames.length) return statusNames[<i32>s];
  return "STATUS_" + (<i32>s).toString();
}

/** Kind of an event; the values are the event record's op codes. */
export enum Op {
  Set = 1,
  Delete = 2,
  LockLost = 3,
  /** The rule's timer named by the key fired (ABI revision 2). */
  Timer = 4,
}

/** The ABI name of an op: "SET", "DELETE", "LOCK_LOST" or "TIMER". */
export function opName(op: Op): string {
  switch (op) {
    case Op.Set: return "SET";
    case Op.Delete: return "DELETE";
    case Op.LockLost: return "LOCK_LOST";
    case Op.Timer: return "TIMER";
  }
  return "OP_" + (<i32>op).toString();
}

/** Log levels (those of Go's log/slog). */
export enum Level {
  Debug = -4,
  Info = 0,
  Warn = 4,
  Error = 8,
}

/** Write condition of set. */
export enum Condition {
  /** Always write. */
  None = 0,
  /** Write only if the key is absent. */
  NX = 1,
  /** Write if the key is absent or its value equals the new one. */
  NEX = 2,
}

/** Options of set, e.g. `{ cond: Condition.NX, ttl: 5000 }`. */
export class SetOptions {
  cond: Condition = Condition.None;
  /** Expire the key after this many milliseconds; 0 = never. */
  ttl: i64 = 0;
  /** Name of a lock held by this rule whose token fences the write; "" = none. */
  fence: string = "";
}

/** Options of del and vdel. */
export class DelOptions {
  /** As in SetOptions. */
  fence: string = "";
}

/** Options of watch. */
export class WatchOptions {
  /** Also deliver changes made by this rule's own writes. */
  self: bool = false;
}

/** Options of lock. */
export class LockOptions {
  /** Milliseconds to wait for a lock held by another holder; 0 = try once. */
  wait: i64 = 0;
}

/** Options of timer and timerBytes. */
export class TimerOptions {
  /**
   * When positive, fire again every this many milliseconds, each time from
   * the previous deadline (no drift); 0 = fire once.
   */
  every: i64 = 0;
  /** The value of the timer's events, as UTF-8 (timer only; timerBytes takes bytes). */
  payload: string = "";
}

/** One change delivered to the handler. */
export class Event {
  constructor(
    /** The watched key (the lock name for Op.LockLost, the timer name for Op.Timer). */
    public key: string,
    public op: Op,
    /**
     * The new value for Op.Set, the timer's payload for Op.Timer; empty
     * otherwise. It stays valid after the handler returns.
     */
    public value: Uint8Array,
    /** The store version (HLC text) of the change; "" when unknown. */
    public version: string,
    /** The event was synthesised after a reconnect; intermediate changes may be missed. */
    public resync: bool,
    /** Op.Timer: when the timer was due, Unix milliseconds of the host's clock (now()); 0 otherwise. */
    public deadline: i64 = 0,
    /** Op.Timer: it fired after its deadline (the host was down or the rule busy). */
    public late: bool = false,
    /**
     * Op.Set and Op.Delete: how many earlier changes of the key this one
     * replaced in the rule's full mailbox (0: none). Only a module that
     * re-exports ssrun_event_coalesced gets it; others always see 0.
     */
    public coalesced: i32 = 0,
  ) {}

  /** The value decoded as UTF-8. */
  text(): string {
    return decodeUTF8(this.value.dataStart, this.value.byteLength);
  }
}

// Results keep the UTF-8 bytes of their version (token) and decode them
// when it is first read: most rules branch on the status and never read
// it. _raw[_off:_off+_len] are the bytes while not decoded; the SDK sets
// them (they are not part of the API).

/** Result of get. */
export class GetResult {
  _raw: ArrayBuffer | null = null;
  _off: i32 = 0;
  _len: i32 = 0;
  private ver: string;

  constructor(
    public status: Status,
    /**
     * The value (empty unless status is OK). Its buffer (value.buffer)
     * also holds the version's bytes, after the value.
     */
    public value: Uint8Array,
    version: string,
  ) {
    this.ver = version;
  }

  /** The version of the value (HLC text); "" unless status is OK. */
  get version(): string {
    const raw = this._raw;
    if (raw) {
      this.ver = decodeUTF8(changetype<usize>(raw) + <usize>this._off, this._len);
      this._raw = null;
    }
    return this.ver;
  }

  get ok(): bool { return this.status == Status.OK; }

  /** The value decoded as UTF-8. */
  text(): string {
    return decodeUTF8(this.value.dataStart, this.value.byteLength);
  }
}

/** Result of set: the new version, or the stored one with Status.NotApplied. */
export class SetResult {
  _raw: ArrayBuffer | null = null;
  private ver: string;

  constructor(public status: Status, version: string) {
    this.ver = version;
  }

  /** The version written (HLC text), or the stored one with Status.NotApplied; "" otherwise. */
  get version(): string {
    const raw = this._raw;
    if (raw) {
      this.ver = decodeUTF8(changetype<usize>(raw), raw.byteLength);
      this._raw = null;
    }
    return this.ver;
  }

  get ok(): bool { return this.status == Status.OK; }
}

/** Result of lock: the fencing token. */
export class LockResult {
  _raw: ArrayBuffer | null = null;
  private tok: string;

  constructor(public status: Status, token: string) {
    this.tok = token;
  }

  /** The fencing token (its version); "" unless status is OK. */
  get token(): string {
    const raw = this._raw;
    if (raw) {
      this.tok = decodeUTF8(changetype<usize>(raw), raw.byteLength);
      this._raw = null;
    }
    return this.tok;
  }

  get ok(): bool { return this.status == Status.OK; }
}

/** Result of keys: the matching keys, sorted bytewise (empty unless status is OK). */
export class KeysResult {
  constructor(public status: Status, public keys: string[]) {}

  get ok(): bool { return this.status == Status.OK; }
}

/** The handler: return Status.OK when the event is handled. */
export type Handler = (ev: Event) => Status;

let handler: Handler | null = null;

/** Sets the function that receives every event. Call it at top level. */
export function handle(fn: Handler): void {
  handler = fn;
}

/**
 * The host's message for the most recent call; "" when it succeeded. A
 * failed call leaves its message with the host, and the first lastError()
 * after it fetches it (so a failure branched on by its status costs no
 * message).
 */
export function lastError(): string {
  if (errState == ERR_HOST) {
    errText = fetchLastError();
    if (errText.length == 0) errText = errVerb + ' "' + errKey + '": ' + statusName(errStatus);
    errState = ERR_TEXT;
  }
  return errState == ERR_NONE ? "" : errText;
}

/** Returns the value and version of key; Status.NotFound when absent. */
export function get(key: string): GetResult {
  const k = arg(key, 0), kn = argLen;
  const st = begin(host_get(k, kn, out, OUT_CAP, outLen));
  if (st != Status.OK) return new GetResult(fail("get", key, st), new Uint8Array(0), "");
  const r = result.reset(recPtr, recLen);
  if (!r.next()) return new GetResult(badRecord("get", key), new Uint8Array(0), "");
  const vp = r.start, vn = r.len;
  if (!r.next() || !r.done()) return new GetResult(badRecord("get", key), new Uint8Array(0), "");
  // One buffer: the value, then the version's bytes.
  const buf = new ArrayBuffer(vn + r.len);
  memory.copy(changetype<usize>(buf), vp, <usize>vn);
  memory.copy(changetype<usize>(buf) + <usize>vn, r.start, <usize>r.len);
  const res = new GetResult(Status.OK, Uint8Array.wrap(buf, 0, vn), "");
  res._raw = buf;
  res._off = vn;
  res._len = r.len;
  return res;
}

/** Writes key with a UTF-8 value and returns the new version (see setBytes). */
export function set(key: string, value: string, opts: SetOptions | null = null): SetResult {
  const k = arg(key, 0), kn = argLen;
  const v = arg(value, 1), vn = argLen;
  return setRaw(key, k, kn, v, vn, opts);
}

/**
 * Writes key and returns the new version. When opts.cond stops the write
 * the status is Status.NotApplied and the version is the stored one.
 */
export function setBytes(key: string, value: Uint8Array, opts: SetOptions | null = null): SetResult {
  const k = arg(key, 0), kn = argLen;
  return setRaw(key, k, kn, value.dataStart, value.byteLength, opts);
}

/** Removes key; Status.NotFound when it was absent. */
export function del(key: string, opts: DelOptions | null = null): Status {
  const k = arg(key, 0), kn = argLen;
  const f = arg(opts ? opts.fence : "", 2), fn = argLen;
  return status("del", key, host_del(k, kn, f, fn));
}

/** Removes key if its value equals value (UTF-8); see vdelBytes. */
export function vdel(key: string, value: string, opts: DelOptions | null = null): Status {
  const k = arg(key, 0), kn = argLen;
  const v = arg(value, 1), vn = argLen;
  return vdelRaw(key, k, kn, v, vn, opts);
}

/**
 * Removes key if its value equals value; Status.NotFound when absent,
 * Status.NotApplied when the value differs.
 */
export function vdelBytes(key: string, value: Uint8Array, opts: DelOptions | null = null): Status {
  const k = arg(key, 0), kn = argLen;
  return vdelRaw(key, k, kn, value.dataStart, value.byteLength, opts);
}

/** Delivers changes of key to the handler (not this rule's own writes, unless opts.self). */
export function watch(key: string, opts: WatchOptions | null = null): Status {
  const k = arg(key, 0), kn = argLen;
  const flags: i32 = opts && opts.self ? 1 : 0;
  return status("watch", key, host_watch(k, kn, flags));
}

/** Stops delivering changes of key; Status.NotFound when not watched. */
export function unwatch(key: string): Status {
  const k = arg(key, 0), kn = argLen;
  return status("unwatch", key, host_unwatch(k, kn));
}

/**
 * Acquires the lease name for ttl milliseconds (renewed by the host while
 * held) and returns its fencing token; Status.Busy when another holder
 * keeps it past opts.wait.
 */
export function lock(name: string, ttl: i64, opts: LockOptions | null = null): LockResult {
  const n = arg(name, 0), nn = argLen;
  const st = begin(host_lock(n, nn, ttl, opts ? opts.wait : 0, out, OUT_CAP, outLen));
  if (st != Status.OK) return new LockResult(fail("lock", name, st), "");
  const r = result.reset(recPtr, recLen);
  if (!r.next() || !r.done()) return new LockResult(badRecord("lock", name), "");
  const res = new LockResult(Status.OK, "");
  res._raw = copyBuffer(r.start, r.len);
  return res;
}

/** Releases the lease; Status.NotFound when this rule does not hold it. */
export function unlock(name: string): Status {
  const n = arg(name, 0), nn = argLen;
  return status("unlock", name, host_unlock(n, nn));
}

/** Writes a log line tagged with the rule. */
export function log(level: Level, msg: string): Status {
  const m = arg(msg, 0), mn = argLen;
  return status("log", "", host_log(level, m, mn));
}

/**
 * Arms the rule's timer name to fire after delay milliseconds (0: at once)
 * with a UTF-8 payload (opts.payload); see timerBytes.
 */
export function timer(name: string, delay: i64, opts: TimerOptions | null = null): Status {
  const n = arg(name, 0), nn = argLen;
  const p = arg(opts ? opts.payload : "", 1), pn = argLen;
  return timerRaw(name, n, nn, delay, opts ? opts.every : 0, p, pn);
}

/**
 * Arms the rule's timer name to fire after delay milliseconds (0: at once),
 * then every opts.every milliseconds if positive, each time from the
 * previous deadline (no drift); opts.payload is ignored. Arming a name that
 * is armed replaces that timer, so re-arming on each change postpones it
 * (debounce). When it fires the handler gets an Event with op Op.Timer,
 * the name as key, payload as value, its deadline and late. The timer is
 * kept in the state store before the call returns and survives restarts and
 * reloads. Status.Invalid for an empty name or a negative duration,
 * Status.Quota when the rule has too many timers, Status.TooLarge when the
 * payload exceeds the rule's value limit. (ABI revision 2: a rule that never
 * calls timer, cancel or now does not import them.)
 */
export function timerBytes(name: string, delay: i64, payload: Uint8Array, opts: TimerOptions | null = null): Status {
  const n = arg(name, 0), nn = argLen;
  return timerRaw(name, n, nn, delay, opts ? opts.every : 0, payload.dataStart, payload.byteLength);
}

/** Disarms the rule's timer name; Status.NotFound when none is armed. */
export function cancel(name: string): Status {
  const n = arg(name, 0), nn = argLen;
  return status("cancel", name, host_cancel(n, nn));
}

/**
 * The host's clock in Unix milliseconds: wall time from the hybrid logical
 * clock the host keeps with the store, the clock of timer deadlines.
 */
export function now(): i64 {
  const st = host_now(out);
  if (st != Status.OK) throw new Error("now: " + statusName(<Status>st)); // a host breaking the ABI
  errState = ERR_NONE;
  return load<i64>(out);
}

// Key families (ABI revision 3). A rule that never calls keys,
// watchPattern or unwatchPattern does not import them, so it also loads on
// a host of revisions 1 and 2. A pattern is the glob of the ACL's keyType
// Pattern: `*` any run of characters ('/' included), `?` one character,
// `[a-z]`, `[!a-z]`, and `\x` for x itself.

/**
 * Returns the keys matching pattern, sorted bytewise, that the rule may
 * read, decoded as UTF-8. limit bounds the list (0: the default of 1000;
 * at most 100000): when more keys match the status is Status.Limit and the
 * list empty, never cut. Status.Invalid for a malformed pattern or a limit
 * out of range, Status.Denied for a pattern no key the rule may read can
 * match.
 */
export function keys(pattern: string, limit: i64 = 0): KeysResult {
  const p = arg(pattern, 0), pn = argLen;
  const st = begin(host_keys(p, pn, limit, out, OUT_CAP, outLen));
  if (st != Status.OK) return new KeysResult(fail("keys", pattern, st), new Array<string>(0));
  // The record: a u32 count, then one field per key.
  if (recLen < 4) return new KeysResult(badRecord("keys", pattern), new Array<string>(0));
  const n = load<u32>(recPtr);
  const r = result.reset(recPtr + 4, recLen - 4);
  const list = new Array<string>(0);
  let ok = <u64>n <= <u64>(r.left / 4); // each key takes 4 bytes at least
  for (let i: u32 = 0; ok && i < n; i++) {
    ok = r.next();
    if (ok) list.push(r.text());
  }
  if (!ok || !r.done()) return new KeysResult(badRecord("keys", pattern), new Array<string>(0));
  return new KeysResult(Status.OK, list);
}

/**
 * Delivers changes of every key matching pattern to the handler: an
 * Op.Set event (resync set) for each key that exists when it is called and
 * for each key created later, every change of those keys, and an
 * Op.Delete when one goes away; not this rule's own writes, unless
 * opts.self. Status.Limit when the rule would watch more than its
 * max_watched_keys keys.
 */
export function watchPattern(pattern: string, opts: WatchOptions | null = null): Status {
  const p = arg(pattern, 0), pn = argLen;
  const flags: i32 = opts && opts.self ? 1 : 0;
  return status("watch_pattern", pattern, host_watch_pattern(p, pn, flags));
}

/** Stops watchPattern's deliveries; Status.NotFound when the pattern is not watched. */
export function unwatchPattern(pattern: string): Status {
  const p = arg(pattern, 0), pn = argLen;
  return status("unwatch_pattern", pattern, host_unwatch_pattern(p, pn));
}

// ---------------------------------------------------------------------------
// ABI exports: re-export these three from the rule's entry file.

/** Export ssrun_abi_version: the ABI version the module was built for. */
export function ssrun_abi_version(): i32 {
  return ABI_VERSION;
}

// pending is the buffer handed out by ssrun_alloc for the next event record.
// It is pinned: the garbage collector neither frees nor moves it until
// ssrun_on_event has taken it and the handler has returned (the event's
// value is a view of it and keeps it alive after that).
let pending: usize = 0;

/** Export ssrun_alloc: a pinned buffer of size bytes for the host's event record. */
export function ssrun_alloc(size: i32): usize {
  if (size <= 0) return 0;
  if (pending) {
    __unpin(pending); // an earlier record never delivered
    pending = 0;
  }
  pending = __pin(changetype<usize>(new ArrayBuffer(size)));
  return pending;
}

/** Export ssrun_event_coalesced: this SDK decodes Event.coalesced (abi.ExportCoalesced). */
export function ssrun_event_coalesced(): i32 {
  return 1;
}

/** Export ssrun_on_event: decodes the event record and runs the handler. */
export function ssrun_on_event(p: usize, len: i32): i32 {
  if (!pending || p != pending || len < 0 || len > changetype<ArrayBuffer>(p).byteLength) {
    logLine(Level.Error, "ssrun: event record of " + len.toString() + " bytes not in a buffer from ssrun_alloc");
    return -1;
  }
  const buf = changetype<ArrayBuffer>(p);
  const rc = dispatch(buf, len);
  pending = 0;
  __unpin(p);
  return rc;
}

/**
 * abort() of this SDK: logs the message at error level and traps. The
 * asconfig.json of this package selects it (`--use abort=...`), so a
 * module needs no "env" import.
 */
// @ts-ignore: decorator
@global
export function ssrunAbort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  if (!aborting) {
    aborting = true;
    const m = message ? message : "abort";
    const f = fileName ? fileName : "?";
    logLine(Level.Error, "abort: " + m + " at " + f + ":" + line.toString() + ":" + column.toString());
  }
  unreachable();
}

// ---------------------------------------------------------------------------
// Internals

import { asciiDecode, asciiEncode } from "./ascii";

@external("ssrun", "get")
declare function host_get(keyPtr: usize, keyLen: i32, outPtr: usize, outCap: i32, outLenPtr: usize): i32;

@external("ssrun", "set")
declare function host_set(keyPtr: usize, keyLen: i32, valPtr: usize, valLen: i32, cond: i32, ttlMs: i64,
  fencePtr: usize, fenceLen: i32, outPtr: usize, outCap: i32, outLenPtr: usize): i32;

@external("ssrun", "del")
declare function host_del(keyPtr: usize, keyLen: i32, fencePtr: usize, fenceLen: i32): i32;

@external("ssrun", "vdel")
declare function host_vdel(keyPtr: usize, keyLen: i32, valPtr: usize, valLen: i32, fencePtr: usize, fenceLen: i32): i32;

@external("ssrun", "watch")
declare function host_watch(keyPtr: usize, keyLen: i32, flags: i32): i32;

@external("ssrun", "unwatch")
declare function host_unwatch(keyPtr: usize, keyLen: i32): i32;

@external("ssrun", "lock")
declare function host_lock(namePtr: usize, nameLen: i32, ttlMs: i64, waitMs: i64, outPtr: usize, outCap: i32, outLenPtr: usize): i32;

@external("ssrun", "unlock")
declare function host_unlock(namePtr: usize, nameLen: i32): i32;

@external("ssrun", "log")
declare function host_log(level: i32, msgPtr: usize, msgLen: i32): i32;

@external("ssrun", "result")
declare function host_result(outPtr: usize, outCap: i32, outLenPtr: usize): i32;

@external("ssrun", "last_error")
declare function host_last_error(outPtr: usize, outCap: i32, outLenPtr: usize): i32;

// Revision 2. AssemblyScript imports a declared function only if the
// module calls it, so a rule without timers loads on a revision-1 host.

@external("ssrun", "timer")
declare function host_timer(namePtr: usize, nameLen: i32, delayMs: i64, everyMs: i64, payloadPtr: usize, payloadLen: i32): i32;

@external("ssrun", "cancel")
declare function host_cancel(namePtr: usize, nameLen: i32): i32;

@external("ssrun", "now")
declare function host_now(outPtr: usize): i32;

// Revision 3, imported only if the module calls them, as revision 2's.

@external("ssrun", "keys")
declare function host_keys(patternPtr: usize, patternLen: i32, limit: i64, outPtr: usize, outCap: i32, outLenPtr: usize): i32;

@external("ssrun", "watch_pattern")
declare function host_watch_pattern(patternPtr: usize, patternLen: i32, flags: i32): i32;

@external("ssrun", "unwatch_pattern")
declare function host_unwatch_pattern(patternPtr: usize, patternLen: i32): i32;

// The shared result buffer and its length word live in static memory, out
// of the collector's reach. Larger results take the BUFFER_TOO_SMALL path.
const OUT_CAP: i32 = 16 << 10;
const out: usize = memory.data(OUT_CAP);
const outLen: usize = memory.data(4);

// The most recent call's failure: none, left with the host (its verb, key
// and status kept for the message should the host have none), or its
// message in errText.
const ERR_NONE = 0;
const ERR_HOST = 1;
const ERR_TEXT = 2;
let errState = ERR_NONE;
let errText: string = "";
let errVerb: string = "";
let errKey: string = "";
let errStatus: Status = Status.OK;

let aborting = false;

// Call arguments (keys, names, text values and payloads, fences, log
// messages) are encoded as UTF-8 one after the other into a static area,
// outside the collector's reach, so that a call allocates nothing for
// them; an argument that does not fit gets a buffer of its own (spill0-2,
// kept reachable until the next call, which drops them). ARG_CAP plus 16
// bytes of slack for the whole-vector stores of asciiEncode.
const ARG_CAP: i32 = 4 << 10;
const args: usize = memory.data(ARG_CAP + 16, 16);
let argUsed: i32 = 0;
let argLen: i32 = 0;
let spill0: ArrayBuffer | null = null;
let spill1: ArrayBuffer | null = null;
let spill2: ArrayBuffer | null = null;
let spilled = false;

// arg encodes s as argument number slot (0 first: it starts a call's
// arguments) and returns its address; argLen is its length in bytes.
// Unpaired surrogates become U+FFFD.
function arg(s: string, slot: i32): usize {
  if (slot == 0) {
    argUsed = 0;
    if (spilled) {
      spill0 = spill1 = spill2 = null;
      spilled = false;
    }
  }
  const n = s.length;
  const p = args + <usize>argUsed;
  if (n <= ARG_CAP - argUsed && asciiEncode(changetype<usize>(s), n, p)) {
    argLen = n;
    argUsed += n;
    return p;
  }
  if (n <= (ARG_CAP - argUsed) / 3) { // at most 3 bytes per unit
    argLen = <i32>String.UTF8.encodeUnsafe(changetype<usize>(s), n, p, false, String.UTF8.ErrorMode.REPLACE);
    argUsed += argLen;
    return p;
  }
  const b = utf8(s);
  spilled = true;
  if (slot == 0) spill0 = b;
  else if (slot == 1) spill1 = b;
  else spill2 = b;
  argLen = b.byteLength;
  return changetype<usize>(b);
}

// The result record of the last verb: in `out` or in recBuf (kept
// reachable while it is read).
let recPtr: usize = 0;
let recLen: i32 = 0;
let recBuf: ArrayBuffer | null = null;

// utf8 encodes s; unpaired surrogates become U+FFFD.
function utf8(s: string): ArrayBuffer {
  return String.UTF8.encode(s, false, String.UTF8.ErrorMode.REPLACE);
}

// decodeUTF8 decodes n bytes at p as UTF-8 the way Go does: each byte
// that does not start a valid sequence (bad, overlong, surrogate, too
// large, truncated) becomes U+FFFD. (String.UTF8.decode garbles invalid
// input.)
function decodeUTF8(p: usize, n: i32): string {
  const a = asciiDecode(p, n);
  if (a !== null) return a;
  const buf = new ArrayBuffer(n << 1); // at most one UTF-16 unit per byte
  const start = changetype<usize>(buf);
  let o = start;
  let i = 0;
  while (i < n) {
    const c = <u32>load<u8>(p + <usize>i);
    let cp: u32 = 0xfffd;
    let w = 1;
    if (c < 0x80) {
      cp = c;
    } else if (c >= 0xc2 && c <= 0xf4) {
      // sequence length and the range of its second byte
      const len = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
      const lo: u32 = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
      const hi: u32 = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
      let v = c & (0x7f >> len);
      let ok = i + len <= n;
      for (let k = 1; ok && k < len; k++) {
        const b = <u32>load<u8>(p + <usize>(i + k));
        ok = k == 1 ? b >= lo && b <= hi : (b & 0xc0) == 0x80;
        v = (v << 6) | (b & 0x3f);
      }
      if (ok) {
        cp = v;
        w = len;
      }
    }
    if (cp >= 0x10000) {
      cp -= 0x10000;
      store<u16>(o, <u16>(0xd800 | (cp >> 10)));
      store<u16>(o, <u16>(0xdc00 | (cp & 0x3ff)), 2);
      o += 4;
    } else {
      store<u16>(o, <u16>cp);
      o += 2;
    }
    i += w;
  }
  return String.UTF16.decodeUnsafe(start, o - start);
}

// @ts-ignore: decorator
@inline
function ptr(b: ArrayBuffer): usize {
  return changetype<usize>(b);
}

function copyBuffer(p: usize, n: i32): ArrayBuffer {
  const b = new ArrayBuffer(n);
  memory.copy(changetype<usize>(b), p, <usize>n);
  return b;
}

// begin takes a verb's status: it clears the last error and locates the
// verb's result record, fetching it with `result` into a buffer of its own
// when `out` was too small. It returns the verb's real status.
function begin(st: i32): Status {
  errState = ERR_NONE;
  recBuf = null;
  if (st == Status.BufferTooSmall) return fetchResult();
  recPtr = out;
  recLen = min(<i32>load<u32>(outLen), OUT_CAP);
  return <Status>st;
}

// fetchResult is begin's BUFFER_TOO_SMALL path, apart so that the common
// path has no loop (each loop entered costs a check of the call's
// deadline).
function fetchResult(): Status {
  let st: i32;
  do {
    const n = <i32>load<u32>(outLen);
    const big = new ArrayBuffer(n);
    recBuf = big;
    st = host_result(changetype<usize>(big), n, outLen);
    recPtr = changetype<usize>(big);
    recLen = min(<i32>load<u32>(outLen), n);
  } while (st == Status.BufferTooSmall);
  return <Status>st;
}

// fail records that a verb (on key) returned st, its message left with the
// host, and returns st.
function fail(verb: string, key: string, st: Status): Status {
  errState = ERR_HOST;
  errVerb = verb;
  errKey = key;
  errStatus = st;
  return st;
}

// fetchLastError returns the host's message of the last failed call; ""
// if it has none.
function fetchLastError(): string {
  const s = host_last_error(out, OUT_CAP, outLen);
  if (s == Status.OK) return decodeUTF8(out, min(<i32>load<u32>(outLen), OUT_CAP));
  if (s == Status.BufferTooSmall) {
    const n = <i32>load<u32>(outLen);
    const big = new ArrayBuffer(n);
    if (host_last_error(changetype<usize>(big), n, outLen) == Status.OK) {
      return decodeUTF8(changetype<usize>(big), min(<i32>load<u32>(outLen), n));
    }
  }
  return "";
}

// status is begin and fail for verbs without results.
function status(verb: string, key: string, st: i32): Status {
  errState = ERR_NONE;
  if (st == Status.OK) return Status.OK;
  return fail(verb, key, <Status>st);
}

function badRecord(verb: string, key: string): Status {
  errText = verb + ' "' + key + '": malformed result record';
  errState = ERR_TEXT;
  return Status.Internal;
}

// setRaw, vdelRaw and timerRaw make the call of their verb with the key
// (name) and value (payload) encoded by the caller, in this order.
function setRaw(key: string, k: usize, kn: i32, vp: usize, vn: i32, opts: SetOptions | null): SetResult {
  const f = arg(opts ? opts.fence : "", 2), fn = argLen;
  const st = begin(host_set(k, kn, vp, vn, opts ? opts.cond : Condition.None, opts ? opts.ttl : 0, f, fn, out, OUT_CAP, outLen));
  if (st != Status.OK && st != Status.NotApplied) return new SetResult(fail("set", key, st), "");
  const r = result.reset(recPtr, recLen);
  if (!r.next() || !r.done()) return new SetResult(badRecord("set", key), "");
  const res = new SetResult(st, "");
  res._raw = copyBuffer(r.start, r.len);
  if (st == Status.NotApplied) fail("set", key, st);
  return res;
}

function timerRaw(name: string, n: usize, nn: i32, delay: i64, every: i64, pp: usize, pn: i32): Status {
  return status("timer", name, host_timer(n, nn, delay, every, pp, pn));
}

function vdelRaw(key: string, k: usize, kn: i32, vp: usize, vn: i32, opts: DelOptions | null): Status {
  const f = arg(opts ? opts.fence : "", 2), fn = argLen;
  return status("vdel", key, host_vdel(k, kn, vp, vn, f, fn));
}

// Reader walks the fields of a record (u32 little-endian length, bytes).
class Reader {
  start: usize = 0;
  len: i32 = 0;
  word: i64 = 0;
  count: i32 = 0;
  constructor(private p: usize, public left: i32) {}

  // reset starts reading the record of len bytes at p.
  reset(p: usize, len: i32): Reader {
    this.p = p;
    this.left = len;
    this.start = 0;
    this.len = 0;
    this.word = 0;
    this.count = 0;
    return this;
  }

  // next steps to the next field; false when the record is malformed.
  next(): bool {
    if (this.left < 4) return false;
    const n = load<u32>(this.p);
    if (<u64>n > <u64>(this.left - 4)) return false;
    this.start = this.p + 4;
    this.len = <i32>n;
    this.p += 4 + <usize>n;
    this.left -= 4 + <i32>n;
    return true;
  }

  done(): bool {
    return this.left == 0;
  }

  // u64 reads a little-endian u64 into word, leaving the current field in
  // place; false when fewer than 8 bytes are left.
  u64(): bool {
    if (this.left < 8) return false;
    this.word = load<i64>(this.p);
    this.p += 8;
    this.left -= 8;
    return true;
  }

  // u32 reads a little-endian u32 (at most 2^31-1 kept) into count, like u64.
  u32(): bool {
    if (this.left < 4) return false;
    this.count = <i32>min<u32>(load<u32>(this.p), <u32>i32.MAX_VALUE);
    this.p += 4;
    this.left -= 4;
    return true;
  }

  text(): string {
    return decodeUTF8(this.start, this.len);
  }
}

// The readers of verb results and of event records, allocated once (a
// class instance is a heap object in AssemblyScript).
const result = new Reader(0, 0);
const event = new Reader(0, 0);

function logLine(level: Level, msg: string): void {
  const m = utf8(msg);
  host_log(level, ptr(m), m.byteLength);
}

// dispatch decodes an event record (abi.AppendEvent) and runs the handler.
function dispatch(buf: ArrayBuffer, len: i32): i32 {
  const p = changetype<usize>(buf);
  const r = event.reset(p + 4, len - 4);
  let problem = "";
  if (len < 4) {
    problem = "event header needs 4 bytes, have " + len.toString();
  } else {
    const op = load<u8>(p);
    // flags: bit 0 resync; bit 1 late, on TIMER only; bit 2 coalesced, on SET and DELETE only
    const allowed: u8 = op == <u8>Op.Timer ? 3 : op == <u8>Op.Set || op == <u8>Op.Delete ? 5 : 1;
    if (op < <u8>Op.Set || op > <u8>Op.Timer) {
      problem = "unknown op code " + op.toString();
    } else if ((load<u8>(p, 1) & ~allowed) != 0 || load<u16>(p, 2) != 0) {
      problem = "reserved event header bits set";
    } else if (!r.next()) {
      problem = "event key: malformed field";
    }
  }
  if (problem.length == 0) {
    const op = <Op>load<u8>(p);
    const key = r.text();
    if (!r.next()) {
      problem = "event value: malformed field";
    } else {
      const hasValue = op == Op.Set || op == Op.Timer;
      const value = hasValue ? Uint8Array.wrap(buf, <i32>(r.start - p), r.len) : new Uint8Array(0);
      if (!hasValue && r.len != 0) {
        problem = opName(op) + " event carries a value";
      } else if (!r.next()) {
        problem = "event version: malformed field";
      } else if (op == Op.Timer && !r.u64()) {
        problem = "TIMER event without its 8-byte deadline";
      } else if ((load<u8>(p, 1) & 4) != 0 && !r.u32()) {
        problem = "coalesced event without its 4-byte count";
      } else if (!r.done()) {
        problem = r.left.toString() + " trailing bytes after event";
      } else {
        const h = handler;
        if (!h) {
          logLine(Level.Error, "ssrun: no handler: call handle() at top level");
          return -1;
        }
        const flags = load<u8>(p, 1);
        const ev = new Event(key, op, value, r.text(), (flags & 1) != 0, r.word, (flags & 2) != 0, r.count);
        const st = h(ev);
        if (st != Status.OK) {
          let msg = "handler: " + statusName(st);
          const le = lastError();
          if (le.length > 0) msg += ": " + le;
          logLine(Level.Error, msg);
        }
        return st;
      }
    }
  }
  logLine(Level.Error, "ssrun: malformed event record: " + problem);
  return -1;
}
