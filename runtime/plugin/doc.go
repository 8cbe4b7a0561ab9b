// Package plugin runs ssrun rules as native plugins: executables, each in
// its own process, started with hashicorp/go-plugin over gRPC and speaking
// ABI v1 (package abi) like Lua and WebAssembly rules. It implements
// abi.Runtime with Kind "plugin". Package sdk is the matching plugin side
// for Go; proto/ssrun/plugin/v1/plugin.proto is the contract for any other
// language.
//
// Compile checks the file: its SHA-256 must equal the one configured in
// Options.Checksums (if any; the error names the file and both hashes), and
// it must be a regular, non-empty, executable file. Start copies the
// content into Options.ExecDir (so the file in the rules folder may be
// replaced while the plugin runs, and every restart runs exactly the
// compiled content) and launches it: go-plugin with the gRPC protocol only,
// automatic mTLS, a managed client (go-plugin's CleanupClients kills it at
// program exit), and a handshake whose magic cookie is SSRUN_PLUGIN and whose
// protocol version is abi.Version. The host then serves the ABI (get, set,
// del, vdel, watch, unwatch, lock, unlock, log), backed by the rule's
// abi.Host, on ONE go-plugin broker connection per process, whose id it
// sends in the Init call; the plugin dials it once and keeps it. Init runs
// the plugin's initialisation (where it declares its watches) under the
// call timeout; Start returns once it succeeded.
//
// Events. Handle sends one event per unary call with a deadline of
// abi.Limits.CallTimeout. Failures are *Error values:
//   - the plugin returned an error: abi.ErrCrashed (abi.ErrTimeout when its
//     status is TIMEOUT), with the plugin's status and message; a panic in
//     a Go handler is recovered by the SDK and arrives as StatusInternal;
//   - no answer within the deadline: abi.ErrTimeout; the process is killed
//     (its state is unknown) and restarted;
//   - the process died during the call: abi.ErrCrashed; the event is lost
//     (not redelivered), logged and counted (Stats.Lost).
//
// Lifecycle. A supervisor goroutine per script watches the process. When
// it exits for any reason other than Close (a crash, kill -9, a kill after
// a timeout) it is reported (an error log naming the plugin, pid and exit
// status) and restarted after a backoff: 100 ms, doubling up to 30 s, back
// to 100 ms once a process ran for a minute. The new process runs Init
// again, re-declaring its watches (abi.Host.Watch is idempotent). While the
// plugin is down, Handle waits for the restart, bounded by its ctx, so events
// stay in the host's bounded mailbox (and beyond its bound are counted as
// dropped by the host); if a restart attempt fails meanwhile, Handle fails
// with abi.ErrCrashed. Script.Close asks the process to exit (go-plugin's
// shutdown call) and kills it after 2 s or when Close's ctx ends;
// Runtime.Close closes every script still running and removes the copied
// binaries. No process outlives Close; on Linux a plugin also dies with its
// host when the host is killed without closing (a parent-death signal).
//
// Output. Lines the plugin writes to stdout and stderr after the handshake
// reach abi.Host.Log (tagged with the rule by the host) at info and warn
// level; go-plugin's diagnostics and anything the plugin writes to its
// original stderr (such as a Go panic) go to Options.Logger.
//
// Costs (see bench_test.go): a plugin call is a gRPC round trip over a unix
// socket, around a hundred microseconds, as much as a state-store request,
// and each ABI verb called from the plugin is one more. Batch work per
// event rather than calling the host in tight loops.
package plugin
