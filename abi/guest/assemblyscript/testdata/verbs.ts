// The test rule of the AssemblyScript SDK (verbs_test.go): its handler runs
// the command named by the event key with the arguments in the event value
// (fields as in abi.AppendField) and logs a "report ..." line at info level
// for the test to check. Build it from abi/guest/assemblyscript with
//
//   npm ci && npm run build:test
//
// and commit testdata/verbs.wasm.

import * as ss from "../assembly/index";
import { benchLoop } from "./bench";
export { ssrun_abi_version, ssrun_alloc, ssrun_on_event, ssrun_event_coalesced } from "../assembly/index";

// kept is an event value held across events.
let kept: Uint8Array = new Uint8Array(0);

// echoAll: report every event (set by the command "echo-all"; the fuzz
// test sends arbitrary records).
let echoAll = false;

if (ss.watch("init/watched", { self: true } as ss.WatchOptions) != ss.Status.OK) {
  throw new Error("watch at load: " + ss.lastError());
}
ss.handle(run);

function run(ev: ss.Event): ss.Status {
  if (echoAll || ev.key == "event") {
    report("event op=" + ss.opName(ev.op) + " key=" + ev.key + " value=" + show(ev.value) +
      " text=" + ev.text() + " version=" + ev.version + " resync=" + (ev.resync ? "true" : "false") +
      " deadline=" + ev.deadline.toString() + " late=" + (ev.late ? "true" : "false") +
      (ev.coalesced != 0 ? " coalesced=" + ev.coalesced.toString() : ""));
    return ss.Status.OK;
  }
  const cmd = ev.key;
  if (cmd == "noop") return ss.Status.OK;
  if (cmd == "echo-all") {
    echoAll = true;
    return ss.Status.OK;
  }
  if (cmd == "keep") {
    kept = ev.value;
    return ss.Status.OK;
  }
  if (cmd == "kept") { // after a full collection and some garbage
    __collect();
    for (let i = 0; i < 1000; i++) new Uint8Array(1000);
    report("kept value=" + show(kept));
    return ss.Status.OK;
  }
  if (cmd == "verb") { // package bench's verb loops: value "<verb> <n>"
    const w = text(ev.value).split(" ");
    return w.length == 2 ? benchLoop(w[0], I32.parseInt(w[1])) : ss.Status.Invalid;
  }
  const a = fields(ev.value);
  if (cmd == "get") {
    const r = ss.get(text(a[0]));
    reportStatus("get", r.status, "value=" + show(r.value) + " text=" + r.text() + " version=" + r.version);
  } else if (cmd == "set" || cmd == "setBytes") {
    const o: ss.SetOptions = {
      cond: <ss.Condition>I32.parseInt(text(a[2])), ttl: I64.parseInt(text(a[3])), fence: text(a[4]),
    };
    const r = cmd == "set" ? ss.set(text(a[0]), text(a[1]), o) : ss.setBytes(text(a[0]), a[1], o);
    reportStatus(cmd, r.status, "version=" + r.version);
  } else if (cmd == "set-default") { // no options
    reportStatus(cmd, ss.set(text(a[0]), text(a[1])).status, "");
  } else if (cmd == "del") {
    reportStatus(cmd, ss.del(text(a[0]), { fence: text(a[1]) } as ss.DelOptions), "");
  } else if (cmd == "vdel") {
    reportStatus(cmd, ss.vdel(text(a[0]), text(a[1]), { fence: text(a[2]) } as ss.DelOptions), "");
  } else if (cmd == "vdelBytes") {
    reportStatus(cmd, ss.vdelBytes(text(a[0]), a[1], { fence: text(a[2]) } as ss.DelOptions), "");
  } else if (cmd == "watch") {
    reportStatus(cmd, ss.watch(text(a[0]), { self: text(a[1]) == "self" } as ss.WatchOptions), "");
  } else if (cmd == "unwatch") {
    reportStatus(cmd, ss.unwatch(text(a[0])), "");
  } else if (cmd == "lock") {
    const r = ss.lock(text(a[0]), I64.parseInt(text(a[1])), { wait: I64.parseInt(text(a[2])) } as ss.LockOptions);
    reportStatus(cmd, r.status, "token=" + r.token);
  } else if (cmd == "unlock") {
    reportStatus(cmd, ss.unlock(text(a[0])), "");
  } else if (cmd == "log") {
    reportStatus(cmd, ss.log(<ss.Level>I32.parseInt(text(a[0])), text(a[1])), "");
  } else if (cmd == "timer") { // the shared cases of internal/ruletest: binary payload, Go durations, Go's report
    const st = ss.timerBytes(text(a[0]), millis(text(a[1])), a[3], { every: millis(text(a[2])) } as ss.TimerOptions);
    reportShared(cmd, st, "");
  } else if (cmd == "timer-text") { // timer with a UTF-8 payload; durations in ms
    const o: ss.TimerOptions = { every: I64.parseInt(text(a[2])), payload: text(a[3]) };
    reportStatus(cmd, ss.timer(text(a[0]), I64.parseInt(text(a[1])), o), "");
  } else if (cmd == "timer-default") { // no options
    reportStatus(cmd, ss.timer(text(a[0]), I64.parseInt(text(a[1]))), "");
  } else if (cmd == "cancel") {
    reportShared(cmd, ss.cancel(text(a[0])), "");
  } else if (cmd == "now") {
    const ms = ss.now();
    reportShared(cmd, ss.Status.OK, "ms=" + ms.toString());
  } else if (cmd == "keys") { // the shared cases of internal/ruletest (PatternCases)
    const r = ss.keys(text(a[0]), I64.parseInt(text(a[1])));
    let list = "[";
    for (let i = 0; i < r.keys.length; i++) {
      if (i > 0) list += " ";
      list += quote(r.keys[i]);
    }
    reportShared(cmd, r.status, "n=" + r.keys.length.toString() + " keys=" + list + "]");
  } else if (cmd == "watch_pattern") {
    reportShared(cmd, ss.watchPattern(text(a[0]), { self: text(a[1]) == "self" } as ss.WatchOptions), "");
  } else if (cmd == "unwatch_pattern") {
    reportShared(cmd, ss.unwatchPattern(text(a[0])), "");
  } else if (cmd == "fail") { // fail the event with the status of a failed get
    ss.get("absent");
    return <ss.Status>I32.parseInt(text(a[0]));
  } else if (cmd == "abort") {
    throw new Error("the rule aborts");
  } else {
    report("unknown command " + cmd);
    return ss.Status.Invalid;
  }
  return ss.Status.OK;
}

function report(line: string): void {
  ss.log(ss.Level.Info, "report " + line);
}

// reportStatus reports a verb's status with lastError() and its results.
function reportStatus(verb: string, st: ss.Status, results: string): void {
  let line = verb + " status=" + ss.statusName(st) + " msg=" + ss.lastError();
  if (results.length > 0) line += " " + results;
  report(line);
}

// reportShared reports a verb as internal/ruletest.Report does: the
// message quoted as Go's %q quotes ASCII (other characters as they are).
function reportShared(verb: string, st: ss.Status, results: string): void {
  let line = verb + " status=" + ss.statusName(st) + " msg=" + quote(ss.lastError());
  if (results.length > 0) line += " " + results;
  report(line);
}

function quote(s: string): string {
  const hex = "0123456789abcdef";
  let q = '"';
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c == 0x22) q += '\\"';
    else if (c == 0x5c) q += "\\\\";
    else if (c == 0x0a) q += "\\n";
    else if (c == 0x0d) q += "\\r";
    else if (c == 0x09) q += "\\t";
    else if (c == 0x07) q += "\\a";
    else if (c == 0x08) q += "\\b";
    else if (c == 0x0c) q += "\\f";
    else if (c == 0x0b) q += "\\v";
    else if (c < 0x20 || c == 0x7f) q += "\\x" + hex.charAt(c >> 4) + hex.charAt(c & 15);
    else q += String.fromCharCode(c);
  }
  return q + '"';
}

// millis parses the Go durations the shared cases use ("1500ms", "-1ms",
// "30s", "2m", "1h") to milliseconds; anything else aborts.
function millis(d: string): i64 {
  const units = ["ms", "s", "m", "h"];
  const scale: i64[] = [1, 1000, 60000, 3600000];
  for (let i = 0; i < units.length; i++) {
    const u = units[i];
    if (d.endsWith(u)) {
      const n = d.slice(0, d.length - u.length);
      const digits = n.startsWith("-") ? n.slice(1) : n;
      let ok = digits.length > 0;
      for (let k = 0; k < digits.length; k++) ok = ok && digits.charCodeAt(k) >= 0x30 && digits.charCodeAt(k) <= 0x39;
      if (ok) return I64.parseInt(n) * scale[i];
    }
  }
  throw new Error("unsupported duration " + d);
}

function text(b: Uint8Array): string {
  return String.UTF8.decodeUnsafe(b.dataStart, <usize>b.length);
}

// fields splits the event value into its length-prefixed fields.
function fields(b: Uint8Array): Uint8Array[] {
  const out = new Array<Uint8Array>();
  let i = 0;
  while (i + 4 <= b.length) {
    const n = <i32>load<u32>(b.dataStart + <usize>i);
    out.push(b.subarray(i + 4, i + 4 + n));
    i += 4 + n;
  }
  return out;
}

// show prints bytes: hex up to 64 bytes, else the length and FNV-1a.
function show(b: Uint8Array): string {
  const digits = "0123456789abcdef";
  if (b.length > 64) {
    let h: u32 = 2166136261;
    for (let i = 0; i < b.length; i++) h = (h ^ b[i]) * 16777619;
    return b.length.toString() + "B:" + h.toString(16);
  }
  let s = "x";
  for (let i = 0; i < b.length; i++) s += digits.charAt(b[i] >> 4) + digits.charAt(b[i] & 15);
  return s;
}
