// Package sdk turns a Go program into an ssrun native plugin: a rule that
// runs in its own process, started and supervised by ssrun's plugin runtime
// (runtime/plugin) over hashicorp/go-plugin and gRPC, and calling the same
// ABI v1 verbs as Lua and WebAssembly rules (see package abi).
//
//	func main() {
//		sdk.Serve(sdk.Rule{
//			Init: func(ctx context.Context, h sdk.Host) error {
//				return h.Watch(ctx, "sensor/1", abi.WatchOptions{})
//			},
//			Handle: func(ctx context.Context, h sdk.Host, ev abi.Event) error {
//				_, err := h.Set(ctx, "copy/"+ev.Key, ev.Value, abi.SetOptions{})
//				return err
//			},
//		})
//	}
//
// Build it with `go build -o rules/<name> .` and drop the executable into the
// rules folder. The host runs it with the handshake of this package; started
// by hand it prints a notice and exits.
//
// Calls. Init runs once per process start, before any event, and is where a
// rule declares its watches (after a crash or a timeout the host starts a
// new process and Init runs again; Host.Watch is idempotent). Handle gets
// one event at a time. Both run under the rule's call deadline (ctx); pass
// ctx to the Host calls. A handler that overruns the deadline is killed with
// its process and the process restarted, so keep state that must survive in
// the store, not in memory. A panic in Init or Handle is recovered and
// fails that call with StatusInternal; the process stays up.
//
// Host calls made from Handle while its event runs travel with the event,
// on the one stream the host keeps open to the plugin process; calls made
// from Init, or from a goroutine after Handle returned, are separate RPCs.
// The Host passed to Handle may be used from several goroutines at once.
//
// SetAtEnd is a set whose answer the handler does not wait for: see its
// doc.
//
// Errors from Host calls are *abi.Error values carrying an abi.Status (see
// abi.StatusOf), exactly as the other runtimes return them. An error
// returned by Handle fails the event; its status and message reach the
// host's log.
//
// Timers (ABI revision 2). Host.Timer arms a named timer (re-arming
// replaces it; opts.Every repeats it from each deadline) and Host.Cancel
// disarms it; when it fires, Handle gets an abi.OpTimer event with the
// timer's name as Key, its payload as Value, Deadline (Unix ms) and Late.
// Timers are kept by the host in the state store, so they outlive the
// plugin process: a timer armed before a crash still fires. Durations are
// sent in whole milliseconds, a positive one below 1 ms as 1 ms. Host.Now
// is the host's clock in Unix ms. On a host older than revision 2, Timer
// and Cancel fail with StatusInternal (the host answers gRPC's
// Unimplemented) and Now returns the plugin's own wall clock.
//
// Key families (ABI revision 3). Host.Keys lists the keys matching a glob
// pattern (`*`, `?`, `[a-z]`, `\x`), sorted, that the rule may read, at
// most opts.Limit of them (abi.DefaultKeysLimit when 0, at most
// abi.MaxKeysLimit): when more match it fails with abi.StatusLimit, never
// with a cut list. Host.WatchPattern delivers the changes of every key
// matching a pattern, those that exist (an abi.OpSet event each) and those
// created later, and an abi.OpDelete when one goes away; StatusLimit when
// the rule would watch more than its max_watched_keys keys.
// Host.UnwatchPattern stops it. A malformed pattern or a limit out of
// range is abi.StatusInvalid. On a host older than revision 3 they fail
// with StatusInternal (the host answers gRPC's Unimplemented).
//
// Output. Lines the plugin writes to stdout and stderr reach the host's log,
// tagged with the rule, at info and warn level, and so does what processes
// it starts write to the stderr they inherit. The plugin ignores SIGINT
// (the host owns its shutdown).
//
// Processes. On Linux, every process the plugin starts, directly or not,
// even in a new session or as a double-forked daemon, is killed (SIGKILL)
// when the plugin process ends, for whatever reason, and when the host
// ends; stop them yourself before returning if they need a clean shutdown.
package sdk

import (
	"context"
	"fmt"
	"math"
	"os"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/guest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
)

// Host is what a rule calls: exactly the verbs of abi.Host, served by the
// ssrun host over the plugin's connection.
type Host = abi.Host

// Rule is a plugin's code.
type Rule struct {
	// Init runs once per process start, before any event; declare watches
	// here. Optional.
	Init func(ctx context.Context, h Host) error
	// Handle handles one event. Required.
	Handle func(ctx context.Context, h Host, ev abi.Event) error
}

// Serve runs the plugin until the host stops it. Call it from main; it
// returns when the host has shut the plugin down. A Rule without Handle is a
// programming error: Serve reports it on stderr and exits with status 1.
func Serve(r Rule) {
	if r.Handle == nil {
		fmt.Fprintln(os.Stderr, "sdk.Serve: Rule.Handle is nil")
		os.Exit(1)
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         goplugin.PluginSet{wire.PluginName: guest.New(r.Init, r.Handle)},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			// Events carry store values, which may exceed gRPC's default
			// 4 MiB message limit; static flow-control windows spare every
			// message of the session a BDP ping (wire.Window).
			opts = append(opts, wire.ServerOptions()...)
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(math.MaxInt32))...)
		},
	})
}

// SetAtEnd sets key to value like h.Set, but without waiting for the
// answer when h is the Host given to Handle and its event still runs: the
// write then travels with the event's end, and the host applies it, after
// every other call of the event and with the event's other SetAtEnd writes
// in the order they were made, before the event counts as handled. It
// returns nil at once (value is copied); the first of these writes that
// fails fails the event, with that write's status and message (the host
// logs it as any failed event), and the writes after it are not applied.
// Should the plugin process die before its handler returns, they are lost
// with the event. Anywhere else (in Init, in a goroutine after its event
// ended, on an ssrun older than SetAtEnd, or with a Host that is not the
// plugin's, e.g. in a unit test) it is h.Set, now, and returns its error.
//
// Use it for a handler's last writes, whose versions and errors it does
// not need: each saves a round trip to the host per event.
func SetAtEnd(ctx context.Context, h Host, key string, value []byte, opts abi.SetOptions) error {
	if a, ok := h.(interface {
		SetAtEnd(ctx context.Context, key string, value []byte, opts abi.SetOptions) error
	}); ok {
		return a.SetAtEnd(ctx, key, value, opts)
	}
	_, err := h.Set(ctx, key, value, opts)
	return err
}
