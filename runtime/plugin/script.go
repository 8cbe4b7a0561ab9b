package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// Restart and shutdown timing.
const (
	restartMin   = 100 * time.Millisecond // first restart delay
	restartMax   = 30 * time.Second       // the delay doubles up to this
	stableAfter  = time.Minute            // a process that ran this long resets the delay
	startTimeout = 10 * time.Second       // process start to handshake
	killGrace    = 2 * time.Second        // graceful shutdown before the process is killed
)

// Calls into a plugin, as named in Error.
const (
	callStart  = "start"
	callInit   = "init"
	callHandle = "handle"
)

// Error is a failed call into a plugin: starting its process ("start"),
// its initialisation ("init") or an event ("handle"). It unwraps to
// abi.ErrTimeout (no answer within the call timeout), abi.ErrCrashed (the
// plugin returned an error, panicked, died, or could not start) or the
// caller's context error.
type Error struct {
	Plugin string // the rule file
	Call   string
	// Status is the status the plugin returned with its error; StatusOK
	// when it returned none (it timed out, died or could not start).
	Status abi.Status
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Status != abi.StatusOK {
		return fmt.Sprintf("plugin %s: %s: %s (%s)", e.Plugin, e.Call, e.Msg, e.Status)
	}
	return fmt.Sprintf("plugin %s: %s: %s", e.Plugin, e.Call, e.Msg)
}

// Unwrap returns abi.ErrTimeout, abi.ErrCrashed or a context error.
func (e *Error) Unwrap() error { return e.Err }

// refused is the *Error of a call the plugin answered with a failure result
// (err, from wire.Err): the status and message the plugin gave, and
// sentinel as the cause. wire.Err returns *abi.Error values; any other
// error counts as StatusInternal with its text.
func refused(plugin, call string, err, sentinel error) *Error {
	e := &Error{Plugin: plugin, Call: call, Status: abi.StatusInternal, Msg: err.Error(), Err: sentinel}
	var ae *abi.Error
	if errors.As(err, &ae) {
		e.Status, e.Msg = ae.Status, ae.Msg
	}
	return e
}

// Start implements abi.Program: it launches the plugin process, connects
// the Host service and runs the plugin's init, all before returning.
func (p *program) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	bin, err := p.rt.acquire(p)
	if err != nil {
		return nil, err
	}
	s := &script{
		rt:      p.rt,
		path:    p.name,
		bin:     bin,
		h:       h,
		lim:     lim.WithDefaults(),
		log:     p.rt.log.With("plugin", filepath.Base(p.name)),
		changed: make(chan struct{}),
		closing: make(chan struct{}),
		hard:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	proc, err := s.launch(ctx)
	if err != nil {
		s.cancel()
		p.rt.release(bin)
		return nil, err
	}
	s.cur = proc
	s.starts.Add(1)
	s.pid.Store(int64(proc.pid))
	go s.supervise(proc)
	if !p.rt.add(s) {
		_ = s.Close(context.Background())
		return nil, ErrClosed
	}
	return s, nil
}

// script is a running plugin rule: at most one process at a time, watched
// and restarted by its supervisor goroutine.
type script struct {
	rt   *Runtime
	path string
	bin  *binary
	h    abi.Host
	lim  abi.Limits
	log  *slog.Logger

	ctx    context.Context // cancelled by Close: bounds restarts
	cancel context.CancelFunc

	mu       sync.Mutex
	cur      *proc         // the process events go to; nil while down
	changed  chan struct{} // closed and replaced when cur, failures or closed change
	failures uint64        // failed restart attempts
	lastErr  error         // of the last failed restart attempt
	closed   bool

	closing chan struct{} // closed by Close
	hard    chan struct{} // closed by Close when its ctx ends: kill now
	stopped chan struct{} // closed when the supervisor has stopped every process

	pid                           atomic.Int64
	starts, exits, timeouts, lost atomic.Uint64
}

// proc is one plugin process.
type proc struct {
	client  pluginClient
	rpc     goplugin.ClientProtocol
	rule    pb.RuleClient
	sess    *session    // its session; nil for a plugin that predates it (Handle calls)
	run     *procRunner // set by go-plugin's start
	sockDir string      // go-plugin's socket directory for it, set with run
	pid     int
	exited  <-chan struct{} // closed when the process has exited
	started time.Time
	log     *slog.Logger
	reason  atomic.Pointer[string] // why the runtime killed it, if it did

	serve          sync.WaitGroup // the Host service's goroutine
	stdout, stderr *lineWriter    // os.Stdout and os.Stderr of a Go plugin, after the handshake
	raw            *lineWriter    // the plugin's original stderr (fd 2)
}

// pluginConn is what the host side of the go-plugin plugin dispenses.
type pluginConn struct {
	rule   pb.RuleClient
	broker *goplugin.GRPCBroker
	exited <-chan struct{}
}

// hostPlugin is the host side of the go-plugin plugin "rule".
type hostPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (hostPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error {
	return errors.New("plugin: the host side serves no plugin")
}

// GRPCClient is called once per process; ctx ends when the process exits.
func (hostPlugin) GRPCClient(ctx context.Context, b *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &pluginConn{rule: pb.NewRuleClient(c), broker: b, exited: ctx.Done()}, nil
}

// launch starts a process, serves the Host service to it on one broker
// connection, runs its init under the call timeout, and opens its session
// unless the plugin predates it.
func (s *script) launch(ctx context.Context) (*proc, error) {
	p := &proc{started: time.Now(), log: s.log,
		stdout: newLineWriter(func(line string) { s.h.Log(abi.LevelInfo, line) }),
		stderr: newLineWriter(func(line string) { s.h.Log(abi.LevelWarn, line) }),
		raw:    rawStderr(s.h),
	}
	p.client = s.rt.newClient(&goplugin.ClientConfig{
		HandshakeConfig: wire.Handshake,
		Plugins:         goplugin.PluginSet{wire.PluginName: hostPlugin{}},
		// Called once, by Client below; go-plugin prepared spec's environment.
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, sockDir string) (runner.Runner, error) {
			r, err := newRunner(spec, s.path, s.bin.path, []string{s.path}, s.bin.workDir, sockDir, p.raw)
			p.run, p.sockDir = r, sockDir
			return r, err
		},
		UnixSocketConfig: &goplugin.UnixSocketConfig{TempDir: s.bin.sockets},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		Managed:          true,
		Logger:           newHCLogger(s.log.WithGroup("goplugin")),
		SyncStdout:       p.stdout,
		SyncStderr:       p.stderr,
		StartTimeout:     startTimeout,
		GRPCDialOptions:  wire.DialOptions(), // static flow-control windows (wire.Window)
	})
	startErr := func(err error) error {
		p.stop(nil)
		return &Error{Plugin: s.path, Call: callStart, Msg: err.Error(), Err: abi.ErrCrashed}
	}
	rpc, err := p.client.Client()
	if err != nil {
		return nil, startErr(err)
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		return nil, startErr(err)
	}
	conn := raw.(*pluginConn)
	p.rpc, p.rule, p.exited, p.pid = rpc, conn.rule, conn.exited, p.run.pid()

	id := conn.broker.NextId()
	srv := &hostServer{h: s.h, timeout: s.lim.CallTimeout}
	p.serve.Go(func() {
		conn.broker.AcceptAndServe(id, func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, wire.ServerOptions()...)
			g := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(math.MaxInt32))...)
			pb.RegisterHostServer(g, srv)
			return g
		})
	})

	req := &pb.InitRequest{HostBrokerId: id, SessionWake: !s.rt.noWake, DoneWrites: true}
	offer := s.offerRaw(p)
	if offer != nil {
		defer offer.close() // closed already if the plugin took it (closing twice is harmless)
		req.SessionSocket, req.SessionToken = offer.path, offer.token
	}
	ictx, cancel := context.WithTimeout(ctx, s.lim.CallTimeout)
	defer cancel()
	res, err := p.rule.Init(ictx, req)
	if err != nil {
		p.kill("init failed")
		p.stop(nil)
		if ctx.Err() != nil {
			return nil, &Error{Plugin: s.path, Call: callInit, Msg: ctx.Err().Error(), Err: ctx.Err()}
		}
		if ictx.Err() != nil {
			return nil, &Error{Plugin: s.path, Call: callInit, Msg: fmt.Sprintf("no answer within %v; the process was killed", s.lim.CallTimeout), Err: abi.ErrTimeout}
		}
		return nil, &Error{Plugin: s.path, Call: callInit, Msg: fmt.Sprintf("the plugin process failed: %v", err), Err: abi.ErrCrashed}
	}
	if err := wire.Err(res); err != nil {
		p.stop(nil)
		return nil, refused(s.path, callInit, err, abi.ErrCrashed)
	}
	if s.rt.unaryOnly {
		return p, nil
	}
	if p.sess, err = openSession(ctx, p.rule, srv, &p.serve, s.lim.CallTimeout, offer); err != nil {
		p.kill("session failed")
		p.stop(nil)
		return nil, &Error{Plugin: s.path, Call: callInit, Msg: err.Error(), Err: abi.ErrCrashed}
	}
	if p.sess == nil {
		s.log.Info("plugin built before sessions: one call per event and per host call; rebuild it with the current SDK for the faster path", "pid", p.pid)
	}
	return p, nil
}

// offerRaw makes the raw session channel offered to process p (see
// rawListener), or returns nil when the runtime opens no session or plain
// gRPC sessions only, or the socket cannot be made (logged: the session
// then runs on its stream).
func (s *script) offerRaw(p *proc) *rawListener {
	if s.rt.unaryOnly || s.rt.grpcSession {
		return nil
	}
	dir := p.sockDir // go-plugin's, private to the process
	if dir == "" {   // a plugin not started by go-plugin's runner (tests)
		dir = s.bin.workDir
	}
	raw, err := listenRaw(dir, s.log)
	if err != nil {
		s.log.Warn("plugin session on its gRPC stream", "pid", p.pid, "error", err)
		return nil
	}
	if s.rt.rawOffered != nil {
		s.rt.rawOffered(raw)
	}
	return raw
}

// kill kills the process and every process it started now (SIGKILL),
// recording why.
func (p *proc) kill(reason string) {
	p.reason.CompareAndSwap(nil, &reason)
	if p.run != nil {
		p.run.terminate()
	}
}

// stop asks the process to exit (go-plugin's shutdown call), kills it after
// killGrace or when hard is closed, and waits until it and every goroutine
// serving it are gone. It is also the cleanup of a process that already
// died.
func (p *proc) stop(hard <-chan struct{}) {
	if p.sess != nil {
		p.sess.close() // first: the plugin's shutdown waits for the session's end
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.client.Kill()
	}()
	grace := time.NewTimer(killGrace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C:
		p.kill("no exit within the grace period")
		p.log.Warn("plugin did not exit within the grace period; killed", "pid", p.pid, "grace", killGrace)
		<-done
	case <-hard:
		p.kill("closed")
		<-done
	}
	p.serve.Wait()
	p.stdout.Flush()
	p.stderr.Flush()
	p.raw.Flush()
}

// exitStatus describes how the process ended, once exited is closed.
func (p *proc) exitStatus() string { return p.run.status() }

func (s *script) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// down takes p out of service if it is the current process.
func (s *script) down(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == p {
		s.cur = nil
		s.pid.Store(0)
		s.broadcastLocked()
	}
}

// up puts a restarted process in service; false when the script closed.
func (s *script) up(p *proc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.cur = p
	s.starts.Add(1)
	s.pid.Store(int64(p.pid))
	s.broadcastLocked()
	return true
}

func (s *script) restartFailed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	s.lastErr = err
	s.broadcastLocked()
}

// supervise owns the processes after the first start: it waits for the
// current one to exit, reports it, and starts the next after a backoff,
// until Close.
func (s *script) supervise(p *proc) {
	defer close(s.stopped)
	var b backoff
	for {
		select {
		case <-s.closing:
			p.stop(s.hard)
			return
		case <-p.exited:
		}
		s.down(p)
		s.exits.Add(1)
		uptime := time.Since(p.started)
		attrs := []any{"pid", p.pid, "exit", p.exitStatus(), "uptime", uptime.Round(time.Millisecond)}
		if r := p.reason.Load(); r != nil {
			attrs = append(attrs, "reason", *r)
		}
		p.stop(s.hard)
		delay := b.next(uptime)
		s.log.Error("plugin process exited; restarting", append(attrs, "restart_in", delay)...)
		for {
			t := time.NewTimer(delay)
			select {
			case <-s.closing:
				t.Stop()
				return
			case <-t.C:
			}
			np, err := s.launch(s.ctx)
			if err == nil {
				if !s.up(np) {
					np.stop(s.hard)
					return
				}
				s.log.Info("plugin restarted", "pid", np.pid, "starts", s.starts.Load())
				p = np
				break
			}
			s.restartFailed(err)
			delay = b.next(0)
			s.log.Error("plugin restart failed", "err", err, "retry_in", delay)
		}
	}
}

// backoff is the restart delay: restartMin, doubling up to restartMax, and
// back to restartMin after a process ran stableAfter.
type backoff struct{ d time.Duration }

// next returns the delay before restarting a process that ran for uptime
// (0 for a failed start).
func (b *backoff) next(uptime time.Duration) time.Duration {
	if b.d == 0 || uptime >= stableAfter {
		b.d = restartMin
	} else {
		b.d = min(2*b.d, restartMax)
	}
	return b.d
}

// await returns the process to send an event to, waiting (bounded by ctx)
// while the plugin is down. It fails if a restart attempt fails meanwhile.
func (s *script) await(ctx context.Context) (*proc, error) {
	s.mu.Lock()
	failures := s.failures
	for {
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if p := s.cur; p != nil {
			select {
			case <-p.exited: // died between events: the supervisor restarts it
				s.cur = nil
				s.pid.Store(0)
				s.broadcastLocked()
				continue
			default:
			}
			s.mu.Unlock()
			return p, nil
		}
		if s.failures != failures {
			err := s.lastErr
			s.mu.Unlock()
			return nil, &Error{Plugin: s.path, Call: callHandle, Msg: fmt.Sprintf("the plugin is down and its restart failed: %v", err), Err: abi.ErrCrashed}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, &Error{Plugin: s.path, Call: callHandle, Msg: "waiting for the plugin to restart: " + ctx.Err().Error(), Err: ctx.Err()}
		}
		s.mu.Lock()
	}
}

// Handle implements abi.Script: it sends ev to the plugin under the call
// timeout, down its session or else in a Handle call, waiting first for a
// restart if the plugin is down. Both ways fail alike.
func (s *script) Handle(ctx context.Context, ev abi.Event) error {
	pev, ok := wire.EventToPB(ev)
	if !ok {
		return &Error{Plugin: s.path, Call: callHandle, Msg: fmt.Sprintf("event on %q: unknown op %q", ev.Key, ev.Op), Err: abi.ErrCrashed}
	}
	p, err := s.await(ctx)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.lim.CallTimeout)
	defer cancel()
	var res *pb.Result
	if p.sess != nil {
		res, err = p.sess.exchange(cctx, pev)
	} else {
		res, err = p.rule.Handle(cctx, &pb.HandleRequest{Event: pev})
	}
	if err == nil {
		if err := wire.Err(res); err != nil {
			sentinel := abi.ErrCrashed
			if abi.StatusOf(err) == abi.StatusTimeout {
				sentinel = abi.ErrTimeout
			}
			return refused(s.path, callHandle, err, sentinel)
		}
		return nil
	}
	what := fmt.Sprintf("%s %q", ev.Op, ev.Key)
	switch code := status.Code(err); {
	case ctx.Err() != nil:
		return &Error{Plugin: s.path, Call: callHandle, Msg: what + ": " + ctx.Err().Error(), Err: ctx.Err()}
	case code == codes.DeadlineExceeded || cctx.Err() != nil:
		// The plugin's state is unknown: replace the process.
		s.timeouts.Add(1)
		s.down(p)
		p.kill("handler timed out")
		return &Error{Plugin: s.path, Call: callHandle, Err: abi.ErrTimeout,
			Msg: fmt.Sprintf("%s: no answer within %v; the process (pid %d) was killed and is being restarted", what, s.lim.CallTimeout, p.pid)}
	case code == codes.Unavailable || code == codes.Canceled:
		// The connection failed: the process died (or its connection
		// broke, and it is killed) while it had the event.
		s.down(p)
		p.kill("connection lost during a call")
		n := s.lost.Add(1)
		s.log.Error("plugin process died during a call; the event was lost", "pid", p.pid, "key", ev.Key, "op", string(ev.Op), "lost_total", n, "err", err)
		return &Error{Plugin: s.path, Call: callHandle, Err: abi.ErrCrashed,
			Msg: fmt.Sprintf("%s: the process (pid %d) died during the call; the event was lost: %v", what, p.pid, err)}
	default:
		// The plugin answered with a gRPC error (e.g. the event exceeds its
		// message size limit); it stays up.
		return &Error{Plugin: s.path, Call: callHandle, Msg: fmt.Sprintf("%s: %v", what, err), Err: abi.ErrCrashed}
	}
}

// Close implements abi.Script: it stops the plugin process (asking it to
// exit, killing it after a grace period or when ctx ends) and waits for it.
func (s *script) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.stopped
		return nil
	}
	s.closed = true
	s.cur = nil
	s.pid.Store(0)
	close(s.closing)
	s.cancel()
	s.broadcastLocked()
	s.mu.Unlock()
	select {
	case <-s.stopped:
	case <-ctx.Done():
		close(s.hard)
		<-s.stopped
	}
	s.rt.remove(s)
	s.rt.release(s.bin)
	return nil
}

var _ abi.Script = (*script)(nil)

func (s *script) stats() Stats {
	return Stats{Path: s.path, Pid: int(s.pid.Load()), Starts: s.starts.Load(), Exits: s.exits.Load(),
		Timeouts: s.timeouts.Load(), Lost: s.lost.Load()}
}
