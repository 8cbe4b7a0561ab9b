// Package testrun runs table-driven tests of rules (`ssrun test`): a YAML
// file next to the rules (NAME.test.yaml or NAME_test.yaml) gives cases,
// each an initial store, a sequence of steps (a key set or deleted from
// outside, virtual time advancing, the store going down and up, a lock
// lost, or taken by another host so that the holder's fenced writes fail
// with FENCED) and after each step what is expected: store contents, the
// writes the rules made, log lines, pending timers and rule statuses.
//
// A case runs on the real host (package host), as ssrun dev runs it: the
// same binding, permissions, reserved prefix, echo suppression, loop
// damping, leases, timers, resync, limits and defaults. It is connected
// through the store client (protocol.NewLocal, package inproc) to a state
// store in the same process (package store), and the host, the client and
// the store share a virtual clock (clock.Virtual): it starts at the
// file's start (2026-01-01T00:00:00Z by default) and moves only with
// advance steps, stopping at each clock call of the host (a timer, a lease
// renewal, the end of a lock wait) and each key's expiry on the way. The
// host is serial (host.Config.Serial): one handler at a time, in the
// order their events were queued, and a step ends when the host is idle,
// so a test never waits on the wall clock and two runs of a case make the
// same calls in the same order. Steps act from outside the host: a second
// client of the same store writes, the host's own connection goes down and
// up, and another client takes a lock's key. Lua's math.random is seeded
// by the case's seed (0 unless given) when the Lua runtime is built with
// Rand (seed.go). testrun itself only reads cases and traces, drives the
// steps, compares expectations and prints results.
//
// Files: spec.go (the format and its checks), engine.go (the host of a
// case on the in-process store and the virtual clock, the steps that need
// more than a write, and what the host is seen to do), run.go (finding
// and running files, and the steps), expect.go (comparing a step's
// outcome), report.go (go test-like output), seed.go (seeded random),
// rulebuild.go (rules built from sources), trace.go (the trace format of
// `ssrun record`), trace_host.go (the records of a trace recorded inside a
// host, and HostRecorder, the host.Recorder that writes them), replay.go
// (`ssrun replay` of a trace of ssrun record: the rules on the engine of
// a case, driven by the trace), replay_host.go (the replay of a host
// trace: each rule's requests answered from the recorded replies).
package testrun
