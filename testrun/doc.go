// Package testrun runs table-driven tests of rules (`ssrun test`): a YAML
// file next to the rules (NAME.test.yaml or NAME_test.yaml) gives cases,
// each an initial store, a sequence of steps (a key set or deleted from
// outside, virtual time advancing, the store going down and up, a lock
// lost, or taken by another host so that the holder's fenced writes fail
// with FENCED) and after each step what is expected: store contents, the writes
// the rules made, log lines, pending timers and rule statuses.
//
// The engine is an in-memory host (world.go): the rules run in their real
// runtimes (Lua, WebAssembly, plugin) through the same abi.Host contract
// as under ssrun dev, but the store, the watches, the locks and the timers
// are simulated in one goroutine. Events are delivered one at a time and a
// step ends when no event, due timer or due expiry is left, so a test
// never waits on the wall clock and two runs of a case make the same calls
// in the same order. The clock is virtual: it starts at the file's start
// (2026-01-01T00:00:00Z by default) and moves only with advance steps;
// timers, key expiry (set with a TTL) and every rule's now() read it. Lua's
// math.random is seeded by the case's seed (0 unless given) when the Lua
// runtime is built with Rand (seed.go). The
// host's behaviours a rule relies on are kept: a rule is not woken by its
// own writes unless it watches with self, a chain of rules triggering each
// other is damped after host.DefaultMaxHops, permissions and max_value
// come from the rules' host.RuleConfig (ssrun.yaml), a lock is its key,
// written with the holder's value and the token as its version, and a lock
// held by another holder is waited for on the virtual clock (lockwait.go),
// writes under a lost lock fail with LOCK_LOST, and a store that is down fails every call with
// UNAVAILABLE and resyncs the watched keys that changed when it returns.
//
// Files: spec.go (the format and its checks), world.go (the in-memory host
// and the event loop), lockwait.go (locks as keys, and waiting for them),
// fence.go (the fence step), seed.go (seeded random), expect.go (comparing a step's outcome), report.go
// (go test-like output), run.go (finding and running files), trace.go (the
// trace format of `ssrun record`), trace_host.go (the records of a trace
// recorded inside a host, and HostRecorder, the host.Recorder that writes
// them), replay.go (`ssrun replay`: the rules run in the same in-memory host
// against a trace, and the writes they make), replay_host.go (the replay of
// a host trace: each rule's requests answered from the recorded replies).
package testrun
