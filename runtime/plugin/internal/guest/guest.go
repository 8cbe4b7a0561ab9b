// Package guest is the plugin side of the protocol between runtime/plugin
// and a plugin, behind package sdk: the go-plugin plugin whose Rule service
// runs a rule's Init and Handle, and the abi.Host the rule calls, served by
// the host over the connection Init dials. It is a package of its own so
// that the runtime's tests can serve a rule in their own process with
// exactly the code a plugin binary runs (see the runtime's
// inprocess_test.go).
package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// New returns the plugin side of the go-plugin plugin wire.PluginName for
// a rule (sdk.Rule): init, if not nil, runs once per process start, before
// any event; handle, not nil, handles one event.
func New(init func(ctx context.Context, h abi.Host) error, handle func(ctx context.Context, h abi.Host, ev abi.Event) error) *Plugin {
	return &Plugin{rule: rule{init: init, handle: handle}}
}

// rule is a plugin's code.
type rule struct {
	init   func(ctx context.Context, h abi.Host) error
	handle func(ctx context.Context, h abi.Host, ev abi.Event) error
}

// Plugin is the plugin side of the go-plugin plugin wire.PluginName: it
// serves a rule's Rule service on every server go-plugin gives it (one in
// a plugin process).
type Plugin struct {
	goplugin.NetRPCUnsupportedPlugin
	rule rule

	// Stderr receives a panic's stack and the log lines the host could not
	// take. Default: the process's stderr, which a plugin process sends to
	// the host.
	Stderr io.Writer

	mu      sync.Mutex
	servers []*ruleServer
}

// GRPCServer implements goplugin.GRPCPlugin: it registers the Rule service.
func (p *Plugin) GRPCServer(b *goplugin.GRPCBroker, s *grpc.Server) error {
	rs := &ruleServer{rule: p.rule, broker: b, stderr: p.Stderr}
	p.mu.Lock()
	p.servers = append(p.servers, rs)
	p.mu.Unlock()
	pb.RegisterRuleServer(s, rs)
	return nil
}

// GRPCClient implements goplugin.GRPCPlugin: a plugin has no client side.
func (p *Plugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("sdk: a plugin has no client side")
}

// Close closes the connections to the host that Init dialed. A plugin
// process does not need it, since they end with the process; a test that
// serves a rule in its own process does, once the host side is gone.
func (p *Plugin) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, rs := range p.servers {
		rs.close()
	}
}

// ruleServer serves the Rule service.
type ruleServer struct {
	pb.UnimplementedRuleServer
	rule   rule
	broker *goplugin.GRPCBroker
	stderr io.Writer // Plugin.Stderr

	mu   sync.Mutex
	conn *grpc.ClientConn // to the host's Host service, dialed by Init
	host *remoteHost      // set by Init

	rawSocket   string // the raw session channel Init offered, if any
	rawToken    []byte //
	sessionWake bool   // what the host does (InitRequest): SessionCancel on the stream on request
	doneWrites  bool   // and applies SessionDone.writes
}

// close closes the connection to the host, if Init dialed it.
func (s *ruleServer) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		_ = s.conn.Close()
	}
}

// Init dials the host's Host service once, keeps the connection for the
// life of the process, and runs the rule's init.
func (s *ruleServer) Init(ctx context.Context, req *pb.InitRequest) (*pb.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.host != nil {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "init: already initialised")), nil
	}
	conn, err := s.broker.DialWithOptions(req.GetHostBrokerId(), wire.DialOptions()...)
	if err != nil {
		return wire.Result(abi.Errorf(abi.StatusInternal, "init: connect to the host (broker id %d): %v", req.GetHostBrokerId(), err)), nil
	}
	s.conn, s.host = conn, &remoteHost{c: pb.NewHostClient(conn), stderr: s.stderr}
	s.rawSocket, s.rawToken = req.GetSessionSocket(), req.GetSessionToken()
	s.sessionWake, s.doneWrites = req.GetSessionWake(), req.GetDoneWrites()
	if s.rule.init == nil {
		return wire.Result(nil), nil
	}
	return wire.Result(protect("init", s.stderr, func() error { return s.rule.init(ctx, s.host) })), nil
}

// Handle runs the rule's handle for one event.
func (s *ruleServer) Handle(ctx context.Context, req *pb.HandleRequest) (*pb.Result, error) {
	s.mu.Lock()
	h := s.host
	s.mu.Unlock()
	if h == nil {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "handle: event before init")), nil
	}
	ev := wire.EventFromPB(req.GetEvent())
	return wire.Result(protect("handle", s.stderr, func() error { return s.rule.handle(ctx, h, ev) })), nil
}

// protect runs f, turning a panic into a StatusInternal error (and its stack
// into stderr, see errOut).
func protect(call string, stderr io.Writer, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(errOut(stderr), "%s panicked: %v\n%s", call, p, debug.Stack())
			err = abi.Errorf(abi.StatusInternal, "%s panicked: %v", call, p)
		}
	}()
	return f()
}

// errOut returns w, or else os.Stderr as it is now: go-plugin's Serve
// replaces it, after the plugin was made, by a pipe to the host's log.
func errOut(w io.Writer) io.Writer {
	if w != nil {
		return w
	}
	return os.Stderr
}

// callTimeout bounds the calls that have no context: Log and Now.
const callTimeout = 5 * time.Second

// remoteHost is the abi.Host served by the ssrun host.
type remoteHost struct {
	c      pb.HostClient
	stderr io.Writer // Plugin.Stderr
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
	return abi.Value{Data: wire.NonNil(res.GetValue()), Version: string(res.GetVersion())}, nil
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

// SetAtEnd sets key like Set, without waiting for the answer when it can:
// called by a handler on a session whose host applies SessionDone.writes,
// while its event runs, it keeps the write for the event's SessionDone
// (value is copied) and returns nil; otherwise it is Set, now.
func (h *remoteHost) SetAtEnd(ctx context.Context, key string, value []byte, opts abi.SetOptions) error {
	if c, ok := h.c.(*streamClient); ok {
		w := &pb.SetRequest{Key: []byte(key), Value: wire.NonNil(bytes.Clone(value)), Cond: pb.Condition(opts.Cond),
			TtlMs: wire.Millis(opts.TTL), Fence: []byte(opts.Fence)}
		if c.addWrite(w) {
			return nil
		}
	}
	_, err := h.Set(ctx, key, value, opts)
	return err
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

// Timer implements abi.Host. On a host older than revision 2 it fails with
// StatusInternal (the host answers gRPC's UNIMPLEMENTED).
func (h *remoteHost) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	res, err := h.c.Timer(ctx, &pb.TimerRequest{Name: []byte(name), DelayMs: wire.Millis(delay),
		EveryMs: wire.Millis(opts.Every), Payload: opts.Payload})
	if err != nil {
		return callErr(abi.FnTimer, name, err)
	}
	return wire.Err(res)
}

// Cancel implements abi.Host, like Timer.
func (h *remoteHost) Cancel(ctx context.Context, name string) error {
	res, err := h.c.Cancel(ctx, &pb.CancelRequest{Name: []byte(name)})
	if err != nil {
		return callErr(abi.FnCancel, name, err)
	}
	return wire.Err(res)
}

// Now implements abi.Host: the host's clock. It waits for the host at most
// callTimeout. Now cannot fail, so when the host cannot answer it returns
// the plugin's own wall clock: silently on a host older than revision 2
// (gRPC's UNIMPLEMENTED), with a line on stderr otherwise.
func (h *remoteHost) Now() int64 {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res, err := h.c.Now(ctx, &pb.NowRequest{})
	if err == nil {
		err = wire.Err(res.GetResult())
	}
	if err != nil {
		if status.Code(err) != codes.Unimplemented {
			fmt.Fprintf(errOut(h.stderr), "now: host call failed, using the plugin's clock: %v\n", err)
		}
		return time.Now().UnixMilli()
	}
	return res.GetUnixMs()
}

// Log implements abi.Host. It waits for the host to take the line (at most
// callTimeout); if the host cannot be reached the line goes to stderr.
func (h *remoteHost) Log(level int32, msg string) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if _, err := h.c.Log(ctx, &pb.LogRequest{Level: level, Message: []byte(msg)}); err != nil {
		fmt.Fprintf(errOut(h.stderr), "log (host call failed: %v): %s\n", err, msg)
	}
}
