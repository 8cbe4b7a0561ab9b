// Package plugin runs ssrun rules as native plugins: executables, each in
// its own process, started with hashicorp/go-plugin over gRPC and speaking
// ABI v1 (package abi) like Lua and WebAssembly rules. It implements
// abi.Runtime with Kind "plugin". Package sdk is the matching plugin side
// for Go; proto/ssrun/plugin/v1/plugin.proto is the contract for any other
// language.
//
// Compile checks the file: its SHA-256 must equal the one configured in
// Config.Checksums (if any; the error names the file and both hashes), and
// it must be a regular, non-empty, executable file. Start copies the
// content into the runtime's working directory (so the file in the rules
// folder may be replaced while the plugin runs, and every restart runs
// exactly the compiled content) and launches it: go-plugin with the gRPC
// protocol only, automatic mTLS, a managed client (go-plugin's
// CleanupClients kills it at program exit), and a handshake whose magic
// cookie is SSRUN_PLUGIN and whose protocol version is abi.Version. The host then serves the ABI (get, set,
// del, vdel, watch, unwatch, lock, unlock, log, since revision 2 timer,
// cancel and now, and since revision 3 keys, watch_pattern and
// unwatch_pattern), backed by the rule's abi.Host, on ONE go-plugin broker
// connection per process, whose id it sends in the Init call; the plugin
// dials it once and keeps it. Init runs the plugin's initialisation (where
// it declares its watches) under the call timeout; then the host opens the
// process's session (Rule.Session, session.go); Start returns once both
// succeeded. The proto only grows (plugin.proto, Revisions): a plugin built
// before a revision keeps working, and one calling a verb its host lacks
// gets StatusInternal naming gRPC's Unimplemented.
//
// Events. Handle sends one event at a time with a deadline of
// abi.Limits.CallTimeout, down the process's session: one bidirectional
// gRPC stream, opened once per process (its messages on a raw channel, see
// below), on which the event goes down, the
// host calls its handler makes come up and their replies go down (each call
// served in a goroutine of its own, as the Host service serves concurrent
// RPCs), and the handler's result comes up last. Calls made outside an
// event (in Init, or from a goroutine after its event ended) use the Host
// service. A plugin built before the session refuses it (gRPC's
// Unimplemented) and gets one Handle call per event, its host calls going
// to the Host service, as before; both ways fail alike. Failures are
// *Error values:
//   - the plugin returned an error: abi.ErrCrashed (abi.ErrTimeout when its
//     status is TIMEOUT), with the plugin's status and message; a panic in
//     a Go handler is recovered by the SDK and arrives as StatusInternal;
//   - no answer within the deadline (a handler or a host call that takes
//     too long): abi.ErrTimeout; the process is killed (its state is
//     unknown) and restarted, with a new session;
//   - the caller's context ended: its error; the plugin is told to cancel
//     the handler and the process stays;
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
// Runtime.Close closes every script still running and removes the working
// directory.
//
// Process trees. On Linux a plugin runs under a reaper (package
// internal/reaper): the host's own executable run again as a small
// supervisor, in a process group of its own, marked a child subreaper so
// that every process below the plugin that is orphaned, including those
// that call setsid or double-fork to leave its process group and session,
// is handed to the reaper rather than to init. Whenever the plugin process
// ends (it exits or crashes, is killed after a handler timeout, or is
// stopped by Script.Close for a reload or a removal, or Runtime.Close),
// the reaper SIGKILLs every process left below it; and since the reaper
// gets a parent-death signal when the host dies, even by SIGKILL, it does
// the same then.
// So no process a plugin started outlives the plugin, nor the host. What
// is out of reach: processes that are not descendants (started on the
// plugin's behalf by another service, e.g. systemd-run or a container
// runtime), processes of another user (setuid programs: kill fails), and
// the plugin's descendants (not the plugin itself, which has a
// parent-death signal) when the reaper is SIGKILLed by someone else. The
// reaper needs /proc and costs one small process per running plugin;
// calls do not go through it. Elsewhere (macOS, BSD, Windows) there is no
// reaper: only the plugin process itself is killed, its descendants may
// survive it, and a plugin whose host is killed without closing keeps
// running.
//
// Working directory. Each Runtime makes one directory "ssrun-plugins-*"
// under Config.ExecDir (default os.TempDir()) when it starts its first
// plugin, for the binary copies and the plugins' unix sockets, and writes
// nothing anywhere else (unless ExecDir is too long for unix socket paths:
// then the sockets go to os.TempDir()). On Linux the directory holds an
// owner lock (flock(2)) for the runtime's life: if the host dies without
// closing, its reapers remove the directory, and New removes every such
// directory under ExecDir whose owner lock nobody holds, which is never a
// live runtime's, whatever pid namespace it runs in. Directories without
// the lock (made by older versions) are left alone.
//
// Output. Lines the plugin writes to stdout and stderr after the handshake
// reach abi.Host.Log (tagged with the rule by the host) at info and warn
// level. What reaches the process's original stderr (fd 2) instead, such as
// a Go crash, the output of processes it starts, or go-plugin's own hclog
// lines, reaches abi.Host.Log too (see rawStderr); a plugin's output never
// reaches Config.Logger, which gets only the runtime's reports and
// go-plugin's host-side diagnostics. Output written straight to fd 1 after
// the handshake is dropped.
//
// Raw channel. Unless the plugin predates it, a session does not travel on
// its gRPC stream but on a raw channel: a unix socket the host makes for the
// process in a private (0700) directory (go-plugin's socket directory for
// it) and offers in the Init call with a random 32-byte token (both inside
// the mTLS connection). The plugin dials it, sends the token, and answers
// the session's opening with SessionReady.raw; the host accepts the first
// connection bringing the token (compared in constant time), closes the
// others and the socket, and from then on both ends send the session's
// messages there, each framed as its length (uvarint) and bytes, at most
// 64 MiB (wire.MaxFrame: a longer one ends the session). Its end is the
// stream's, with the same outcomes (the process died: abi.ErrCrashed, and
// a restart opens a new one). A plugin that predates it ignores the offer
// and its session stays on the stream; one that cannot dial says so on
// stderr and stays there too.
//
// Who reads the raw channel. No goroutine of either end reads it on its
// own (with a plugin built with this SDK; one built before keeps a reader
// goroutine of its own, which the host's side serves just the same): the
// goroutine that waits for a message reads the socket itself
// (wire.Conn.RecvContext, which a context interrupts without losing a
// partly read frame), and hands the messages that are someone else's to
// them. In the host, that is the exchange waiting for its event's
// SessionDone; it serves the calls it reads in goroutines, except a call
// the plugin marked alone (HostCall.alone: no other call of the session in
// flight), which it serves itself before reading on; while such a call is
// in flight the plugin sends its other calls on the gRPC stream, which the
// host always reads, so a call never waits behind another. In the plugin,
// the session's loop reads events and runs each handler itself, and a host
// call waiting for its reply reads until it comes. SessionCancel travels
// on the gRPC stream (InitRequest.session_wake, SessionReady.wake), which
// a goroutine of the plugin always reads: a handler that makes no host
// call learns of its cancellation, and the loop, held by a cancelled
// handler, passes to a new goroutine.
//
// Writes at the end. sdk.SetAtEnd keeps a write for the event's
// SessionDone (SessionDone.writes, to a host that offers
// InitRequest.done_writes); Handle applies them, in order, before it
// returns. The first that fails fails the event with its status (as the
// handler returning that set's error would) and the rest are not applied;
// the process died before SessionDone: they are lost with the event.
//
// Costs (see bench_test.go, BenchmarkSession): an event and each ABI verb
// its handler calls are one message each way on the open session: on the
// raw channel, one write and one read of the socket, with no TLS, no HTTP/2
// framing and no goroutine hand-off in ssrun's code for an event whose
// handler calls the host one call at a time; what is left is the wake-up
// of a thread in the process each message reaches, tens of microseconds on
// a loaded machine. On the gRPC stream (a plugin built before the raw channel),
// each message is one HTTP/2 frame: both ends use static flow-control
// windows (wire.Window), since gRPC's dynamic window adds a window update,
// a BDP ping and its acknowledgement to almost every message of a session.
// Batch work per event rather than calling the host in tight loops, and
// make a handler's last writes with sdk.SetAtEnd.
package plugin
