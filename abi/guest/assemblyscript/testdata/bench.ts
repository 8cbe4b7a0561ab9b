// The verb loops of package bench's BenchmarkVerbs, so that the
// AssemblyScript SDK is measured on the same table as the Lua, Go and
// plugin rules: the same calls with the same outcomes as
// bench/testdata/wasmrule/verbs.go (a NOT_FOUND or NOT_APPLIED where that
// is the outcome), and the same floor, a bare last_error call with an
// empty buffer. The verb is looked up once per loop, not per call, so that
// the floor and each verb's time exclude the lookup.

import * as ss from "../assembly/index";

@external("ssrun", "last_error")
declare function rawLastError(outPtr: usize, outCap: u32, outLenPtr: usize): i32;

const rawLen = memory.data(4);

@external("ssrun", "get")
declare function rawGet(keyPtr: usize, keyLen: i32, outPtr: usize, outCap: i32, outLenPtr: usize): i32;

const rawOut = memory.data(64);

const verbs = ["floor", "get", "set", "del", "vdel", "watch", "unwatch", "lock", "unlock", "log", "timer", "cancel", "now",
  // Where a get's time goes: the bare host call, an allocation (a
  // Uint8Array is two), the decoding of a version.
  "raw-get", "alloc", "text",
  // Revision 3: keys lists bench/k; unwatch_pattern meets NOT_FOUND.
  "keys", "watch_pattern", "unwatch_pattern"];

// benchLoop calls verb n times: Status.OK when every call had its expected
// outcome, else the first other status (Status.Invalid for an unknown
// verb).
export function benchLoop(verb: string, n: i32): ss.Status {
  const value = "0123456789abcdef";
  let st = ss.Status.OK;
  let i = 0;
  switch (verbs.indexOf(verb)) {
    case 0: for (; i < n; i++) rawLastError(0, 0, rawLen); break;
    case 1: for (; i < n && st == ss.Status.OK; i++) st = ss.get("bench/k").status; break;
    case 2: for (; i < n && st == ss.Status.OK; i++) st = ss.set("bench/k", value).status; break;
    case 3: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.del("absent"), ss.Status.NotFound); break;
    case 4: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.vdel("bench/k", "other"), ss.Status.NotApplied); break;
    case 5: for (; i < n && st == ss.Status.OK; i++) st = ss.watch("bench/w"); break;
    case 6: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.unwatch("bench/u"), ss.Status.NotFound); break;
    case 7: for (; i < n && st == ss.Status.OK; i++) st = ss.lock("bench/l", 60000).status; break;
    case 8: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.unlock("bench/u"), ss.Status.NotFound); break;
    case 9: for (; i < n && st == ss.Status.OK; i++) st = ss.log(ss.Level.Debug, "bench"); break;
    case 10: for (; i < n && st == ss.Status.OK; i++) st = ss.timer("bench/t", 60000); break;
    case 11: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.cancel("bench/c"), ss.Status.NotFound); break;
    case 12: for (; i < n; i++) ss.now(); break;
    case 13: {
      const k = String.UTF8.encode("bench/k");
      for (; i < n && st == ss.Status.OK; i++) st = <ss.Status>rawGet(changetype<usize>(k), k.byteLength, rawOut, 64, rawLen);
      break;
    }
    case 14: for (; i < n; i++) new Uint8Array(16); break;
    case 15: {
      const r = new ss.GetResult(ss.Status.OK, Uint8Array.wrap(String.UTF8.encode("000000000000001:00000:abitest")), "");
      for (; i < n; i++) r.text();
      break;
    }
    case 16: for (; i < n && st == ss.Status.OK; i++) st = ss.keys("bench/*").status; break;
    case 17: for (; i < n && st == ss.Status.OK; i++) st = ss.watchPattern("bench/p*"); break;
    case 18: for (; i < n && st == ss.Status.OK; i++) st = expect(ss.unwatchPattern("bench/none*"), ss.Status.NotFound); break;
    default: return ss.Status.Invalid;
  }
  return st;
}

// expect treats the status want as the expected outcome.
function expect(st: ss.Status, want: ss.Status): ss.Status {
  return st == want ? ss.Status.OK : st;
}
