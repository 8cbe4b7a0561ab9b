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
// Errors from Host calls are *abi.Error values carrying an abi.Status (see
// abi.StatusOf), exactly as the other runtimes return them. An error
// returned by Handle fails the event; its status and message reach the
// host's log.
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
	"errors"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sync"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
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
		Plugins:         goplugin.PluginSet{wire.PluginName: &rulePlugin{rule: r}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			// Events carry store values, which may exceed gRPC's default
			// 4 MiB message limit.
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(math.MaxInt32))...)
		},
	})
}

// rulePlugin is the plugin side of the go-plugin plugin "rule".
type rulePlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	rule Rule
}

func (p *rulePlugin) GRPCServer(b *goplugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterRuleServer(s, &ruleServer{rule: p.rule, broker: b})
	return nil
}

func (p *rulePlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: a plugin has no client side")
}

// ruleServer serves the Rule service.
type ruleServer struct {
	pb.UnimplementedRuleServer
	rule   Rule
	broker *goplugin.GRPCBroker

	mu   sync.Mutex
	host *remoteHost // set by Init
}

// Init dials the host's Host service once, keeps the connection for the
// life of the process, and runs Rule.Init.
func (s *ruleServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != nil {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "init: already initialised")), nil
	}
	conn, err := s.broker.Dial(req.GetHostBrokerId())
	if err != nil {
		return wire.Result(abi.Errorf(abi.StatusInternal, "init: connect to the host (broker id %d): %v", req.GetHostBrokerId(), err)), nil
	}
	s.host = &remoteHost{c: pb.NewHostClient(conn)}
	if s.rule.Init == nil {
		return wire.Result(nil), nil
	}
	return wire.Result(protect("init", func() error { return s.rule.Init(ctx, s.host) })), nil
}

// Handle runs Rule.Handle for one event.
func (s *ruleServer) Handle(ctx context.Context, req *pb.HandleRequest) (*pb.Result, error) {
	s.mu.Lock()
	h := s.host
	s.mu.Unlock()
	if h == nil {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "handle: event before init")), nil
	}
	ev := wire.EventFromPB(req.GetEvent())
	return wire.Result(protect("handle", func() error { return s.rule.Handle(ctx, h, ev) })), nil
}

// protect runs f, turning a panic into a StatusInternal error (and its stack
// into stderr, which reaches the host's log).
func protect(call string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "%s panicked: %v\n%s", call, p, debug.Stack())
			err = abi.Errorf(abi.StatusInternal, "%s panicked: %v", call, p)
		}
	}()
	return f()
}

// logTimeout bounds a Log call, which has no context.
const logTimeout = 5 * time.Second

// remoteHost is the abi.Host served by the ssrun host.
type remoteHost struct {
	c pb.HostClient
}

var _ abi.Host = (*remoteHost)(nil)

// callErr is a failed host call (the connection, not the verb): TIMEOUT for
// a deadline or cancellation, INTERNAL otherwise.
func callErr(verb, key string, err error) error {
	st := abi.StatusInternal
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Canceled:
		st = abi.StatusTimeout
	}
	return abi.Errorf(st, "%s %q: host call failed: %v", verb, key, err)
}

// Get implements abi.Host.
func (h *remoteHost) Get(ctx context.Context, key string) (abi.Value, error) {
	res, err := h.c.Get(ctx, &pb.GetRequest{Key: []byte(key)})
	if err != nil {
		return abi.Value{}, callErr(abi.FnGet, key, err)
	}
	if err := wire.Err(res.GetResult()); err != nil {
		return abi.Value{}, err
	}
	v := abi.Value{Data: res.GetValue(), Version: string(res.GetVersion())}
	if v.Data == nil {
		v.Data = []byte{}
	}
	return v, nil
}

// Set implements abi.Host.
func (h *remoteHost) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	res, err := h.c.Set(ctx, &pb.SetRequest{Key: []byte(key), Value: value, Cond: pb.Condition(opts.Cond),
		TtlMs: wire.Millis(opts.TTL), Fence: []byte(opts.Fence)})
	if err != nil {
		return "", callErr(abi.FnSet, key, err)
	}
	return string(res.GetVersion()), wire.Err(res.GetResult())
}

// Del implements abi.Host.
func (h *remoteHost) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	res, err := h.c.Del(ctx, &pb.DelRequest{Key: []byte(key), Fence: []byte(opts.Fence)})
	if err != nil {
		return callErr(abi.FnDel, key, err)
	}
	return wire.Err(res)
}

// VDel implements abi.Host.
func (h *remoteHost) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	res, err := h.c.VDel(ctx, &pb.VDelRequest{Key: []byte(key), Value: value, Fence: []byte(opts.Fence)})
	if err != nil {
		return callErr(abi.FnVDel, key, err)
	}
	return wire.Err(res)
}

// Watch implements abi.Host.
func (h *remoteHost) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	res, err := h.c.Watch(ctx, &pb.WatchRequest{Key: []byte(key), Self: opts.Self})
	if err != nil {
		return callErr(abi.FnWatch, key, err)
	}
	return wire.Err(res)
}

// Unwatch implements abi.Host.
func (h *remoteHost) Unwatch(ctx context.Context, key string) error {
	res, err := h.c.Unwatch(ctx, &pb.UnwatchRequest{Key: []byte(key)})
	if err != nil {
		return callErr(abi.FnUnwatch, key, err)
	}
	return wire.Err(res)
}

// Lock implements abi.Host.
func (h *remoteHost) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	res, err := h.c.Lock(ctx, &pb.LockRequest{Name: []byte(name), TtlMs: wire.Millis(ttl), WaitMs: wire.Millis(opts.Wait)})
	if err != nil {
		return "", callErr(abi.FnLock, name, err)
	}
	if err := wire.Err(res.GetResult()); err != nil {
		return "", err
	}
	return string(res.GetToken()), nil
}

// Unlock implements abi.Host.
func (h *remoteHost) Unlock(ctx context.Context, name string) error {
	res, err := h.c.Unlock(ctx, &pb.UnlockRequest{Name: []byte(name)})
	if err != nil {
		return callErr(abi.FnUnlock, name, err)
	}
	return wire.Err(res)
}

// Log implements abi.Host. It waits for the host to take the line (at most
// logTimeout); if the host cannot be reached the line goes to stderr.
func (h *remoteHost) Log(level int32, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
	defer cancel()
	if _, err := h.c.Log(ctx, &pb.LogRequest{Level: level, Message: []byte(msg)}); err != nil {
		fmt.Fprintf(os.Stderr, "log (host call failed: %v): %s\n", err, msg)
	}
}
