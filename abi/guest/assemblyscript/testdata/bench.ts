// The verb loops of package bench's BenchmarkVerbs, so that the
// AssemblyScript SDK is measured on the same table as the Lua, Go and
// plugin rules: the same calls with the same outcomes as
// bench/testdata/wasmrule/verbs.go (a NOT_FOUND or NOT_APPLIED where that
// is the outcome), and the same floor, a bare last_error call with an
// empty buffer.

import * as ss from "../assembly/index";

@external("ssrun", "last_error")
declare function rawLastError(outPtr: usize, outCap: u32, outLenPtr: usize): i32;

const rawLen = memory.data(4);

// benchLoop calls verb n times: Status.OK when every call had its expected
// outcome, else the first other status (Status.Invalid for an unknown
// verb).
export function benchLoop(verb: string, n: i32): ss.Status {
  const value = "0123456789abcdef";
  for (let i = 0; i < n; i++) {
    let st = ss.Status.OK;
    if (verb == "floor") rawLastError(0, 0, rawLen);
    else if (verb == "get") st = ss.get("bench/k").status;
    else if (verb == "set") st = ss.set("bench/k", value).status;
    else if (verb == "del") st = expect(ss.del("absent"), ss.Status.NotFound);
    else if (verb == "vdel") st = expect(ss.vdel("bench/k", "other"), ss.Status.NotApplied);
    else if (verb == "watch") st = ss.watch("bench/w");
    else if (verb == "unwatch") st = expect(ss.unwatch("bench/u"), ss.Status.NotFound);
    else if (verb == "lock") st = ss.lock("bench/l", 60000).status;
    else if (verb == "unlock") st = expect(ss.unlock("bench/u"), ss.Status.NotFound);
    else if (verb == "log") st = ss.log(ss.Level.Debug, "bench");
    else if (verb == "timer") st = ss.timer("bench/t", 60000);
    else if (verb == "cancel") st = expect(ss.cancel("bench/c"), ss.Status.NotFound);
    else if (verb == "now") ss.now();
    else return ss.Status.Invalid;
    if (st != ss.Status.OK) return st;
  }
  return ss.Status.OK;
}

// expect treats the status want as the expected outcome.
function expect(st: ss.Status, want: ss.Status): ss.Status {
  return st == want ? ss.Status.OK : st;
}
