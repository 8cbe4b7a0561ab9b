package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// session is the host's end of a plugin process's Rule.Session (see
// plugin.proto): the stream that carries the process's events, the host
// calls their handlers make, and the replies, so that an event costs one
// exchange on an open stream rather than a Handle RPC and one RPC per host
// call. A process whose plugin predates the session has none and gets
// Handle calls.
//
// On the gRPC stream, one goroutine (receive) reads the stream. It serves
// each host call of the event in flight in a goroutine of its own, as the
// Host service serves concurrent RPCs, so a handler may have several calls
// in flight; it hands the event's SessionDone to the exchange waiting for
// it. The call goroutines are owned by the process's serve group, like
// receive.
//
// When the plugin takes the raw channel offered in its Init (rawListener),
// the messages after SessionReady travel on it instead of the stream, with
// the same semantics, and nobody reads it between events: the exchange
// waiting for an event's SessionDone reads the channel itself, serving the
// calls it meets on the way as receive does, so the common path has no
// hand-off between goroutines. receive then reads the stream only to see
// it end (the process died, or close), which closes the channel; and, to a
// plugin that asks for it (SessionReady.wake), SessionCancel goes down the
// stream, which the plugin always reads.
type session struct {
	stream  sessionStream
	raw     *rawListener  // the raw channel offered, until accepted or refused
	rawc    *rawConn      // the raw channel taken, set before ready is closed; nil on the stream
	wake    bool          // send SessionCancel on the stream (a raw plugin's SessionReady.wake)
	timeout time.Duration // for SessionReady and the raw channel's connection
	srv     *hostServer
	serve   *sync.WaitGroup    // owns receive and the call goroutines
	ctx     context.Context    // the stream's; cancelled by close
	cancel  context.CancelFunc //
	ready   chan struct{}      // closed when SessionReady came
	dead    chan struct{}      // closed when the stream has ended
	err     error              // why it ended, once dead is closed

	send sync.Mutex           // held by each Send
	turn chan struct{}        // holds the exchange in progress (capacity 1)
	done chan *pb.SessionDone // the end of the event in flight (capacity 1)

	mu    sync.Mutex
	last  uint64          // the last event sent
	seq   uint64          // the event in flight, 0 if none
	evCtx context.Context // its context: the host calls' deadline
}

// sessionStream is what carries a session: the Session stream or the raw
// channel.
type sessionStream interface {
	Send(*pb.ToPlugin) error
	Recv() (*pb.FromPlugin, error)
}

// openSession opens the session of a process whose Init succeeded, its
// calls served by srv; serve owns its goroutines. raw, if not nil, is the
// raw channel offered in Init (the caller closes it). It returns nil, nil
// for a plugin that answers UNIMPLEMENTED (one built before the session),
// and fails if the plugin neither answers SessionReady (and connects to raw
// if it takes it) nor refuses within timeout.
func openSession(ctx context.Context, rule pb.RuleClient, srv *hostServer, serve *sync.WaitGroup, timeout time.Duration, raw *rawListener) (*session, error) {
	sctx, cancel := context.WithCancel(context.Background())
	stream, err := rule.Session(sctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("open the session: %w", err)
	}
	ss := &session{stream: stream, raw: raw, timeout: timeout, srv: srv, serve: serve, ctx: sctx, cancel: cancel,
		ready: make(chan struct{}), dead: make(chan struct{}), turn: make(chan struct{}, 1), done: make(chan *pb.SessionDone, 1)}
	serve.Go(ss.receive)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ss.ready:
		return ss, nil
	case <-ss.dead:
		cancel()
		if status.Code(ss.err) == codes.Unimplemented {
			return nil, nil
		}
		return nil, fmt.Errorf("open the session: %w", ss.err)
	case <-t.C:
		cancel()
		return nil, fmt.Errorf("open the session: no answer within %v", timeout)
	case <-ctx.Done():
		cancel()
		return nil, fmt.Errorf("open the session: %w", ctx.Err())
	}
}

// receive reads the stream until it ends or close. On a raw session, its
// end closes the raw channel.
func (ss *session) receive() {
	defer close(ss.dead)
	defer ss.cancel() // closes the raw channel, if any
	for {
		m, err := ss.stream.Recv()
		if err != nil {
			ss.err = err
			return
		}
		switch m := m.GetMsg().(type) {
		case *pb.FromPlugin_Ready:
			select {
			case <-ss.ready:
				continue
			default:
			}
			if m.Ready.GetRaw() {
				if err := ss.takeRaw(); err != nil {
					ss.err = err
					return
				}
				ss.wake = m.Ready.GetWake()
			}
			close(ss.ready)
		case *pb.FromPlugin_Call:
			ss.call(m.Call)
		case *pb.FromPlugin_Done:
			ss.mu.Lock()
			if m.Done.GetSeq() == ss.seq && ss.seq != 0 {
				ss.seq, ss.evCtx = 0, nil
				ss.done <- m.Done // empty: one event at a time
			} // else the end of an event whose exchange ended before it
			ss.mu.Unlock()
		}
	}
}

// takeRaw switches the session to the raw channel the plugin connects to.
// receive calls it before the session is ready, when nothing else uses the
// stream.
func (ss *session) takeRaw() error {
	if ss.raw == nil {
		return errNoRaw
	}
	c, err := ss.raw.accept(ss.ctx, ss.timeout)
	if err != nil {
		return err
	}
	context.AfterFunc(ss.ctx, func() { _ = c.Close() })
	ss.rawc = c
	return nil
}

// call serves host call c of the event in flight in a goroutine of its
// own (under the event's context), or answers it with no response when
// its event's exchange has ended.
func (ss *session) call(c *pb.HostCall) {
	ss.mu.Lock()
	current, ctx := c.GetSeq() == ss.seq && ss.seq != 0, ss.evCtx
	ss.mu.Unlock()
	if !current { // no response: the event's exchange has ended
		_ = ss.write(&pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: &pb.HostReply{Id: c.GetId()}}})
		return
	}
	ss.serve.Go(func() {
		_ = ss.write(&pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: ss.srv.serve(ctx, c)}})
	})
}

// close ends the stream; receive returns.
func (ss *session) close() { ss.cancel() }

// write sends m down the session (the raw channel, once taken); a failure
// is the session's end.
func (ss *session) write(m *pb.ToPlugin) error {
	if ss.rawc != nil {
		if err := ss.rawc.Send(m); err != nil {
			return status.Errorf(codes.Unavailable, "the session ended: %v", err)
		}
		return nil
	}
	return ss.writeStream(m)
}

// writeStream sends m down the Session stream.
func (ss *session) writeStream(m *pb.ToPlugin) error {
	ss.send.Lock()
	defer ss.send.Unlock()
	if err := ss.stream.Send(m); err != nil {
		return status.Errorf(codes.Unavailable, "the session ended: %v", err)
	}
	return nil
}

// cancelEvent tells the plugin to cancel the handler of event seq: on the
// stream to a raw plugin that asked for it (SessionReady.wake), as it may
// not be reading the raw channel.
func (ss *session) cancelEvent(seq uint64) {
	m := &pb.ToPlugin{Msg: &pb.ToPlugin_Cancel{Cancel: &pb.SessionCancel{Seq: seq}}}
	if ss.wake {
		_ = ss.writeStream(m)
		return
	}
	_ = ss.write(m)
}

// exchange sends ev down the session and returns the handler's result when
// its SessionDone comes, once the writes it carries are applied (see
// applyWrites); its host calls are served meanwhile (receive, or on the raw
// channel the exchange itself) under ctx. Its errors are those of a Handle
// RPC: a status with gRPC's DeadlineExceeded or Canceled when ctx ended
// (the plugin is told to cancel the handler; its calls from then on get no
// response and its SessionDone is ignored), Unavailable when the stream
// ended.
func (ss *session) exchange(ctx context.Context, ev *pb.Event) (*pb.Result, error) {
	select {
	case ss.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	defer func() { <-ss.turn }()
	ss.mu.Lock()
	ss.last++
	seq := ss.last
	ss.seq, ss.evCtx = seq, ctx
	ss.mu.Unlock()
	var timeout int64
	if d, ok := ctx.Deadline(); ok {
		timeout = max(wire.Millis(time.Until(d)), 1)
	}
	err := ss.write(&pb.ToPlugin{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Seq: seq, Event: ev, TimeoutMs: timeout}}})
	if err == nil {
		var d *pb.SessionDone
		if ss.rawc != nil {
			d, err = ss.awaitRaw(ctx, seq)
		} else {
			d, err = ss.await(ctx)
		}
		if err == nil {
			return ss.applyWrites(ctx, d), nil
		}
		if ctx.Err() != nil {
			ss.cancelEvent(seq)
			err = status.FromContextError(ctx.Err()).Err()
		}
	}
	ss.mu.Lock()
	ss.seq, ss.evCtx = 0, nil
	select {
	case <-ss.done: // came as ctx ended
	default:
	}
	ss.mu.Unlock()
	return nil, err
}

// await waits for the SessionDone of the event in flight that receive
// hands over.
func (ss *session) await(ctx context.Context) (*pb.SessionDone, error) {
	select {
	case d := <-ss.done:
		return d, nil
	case <-ss.dead:
		return nil, status.Errorf(codes.Unavailable, "the session ended: %v", ss.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// awaitRaw reads the raw channel until the SessionDone of event seq comes,
// serving the host calls it meets (those of an event whose exchange has
// ended get no response, see call) and skipping the ends of such events.
// A call of the event that the plugin sent alone (HostCall.alone) it
// serves itself, before reading on: no goroutine is started for it. Each
// read spins for up to wire.Spin before it parks: the plugin's next
// message (a call, or the event's end) mostly comes within it, and a
// thread woken from the poller costs more than the spin.
func (ss *session) awaitRaw(ctx context.Context, seq uint64) (*pb.SessionDone, error) {
	for {
		m, err := ss.rawc.RecvSpin(ctx, wire.Spin)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, status.Errorf(codes.Unavailable, "the session ended: %v", err)
		}
		switch m := m.GetMsg().(type) {
		case *pb.FromPlugin_Call:
			if m.Call.GetAlone() && m.Call.GetSeq() == seq { // the plugin sends other calls on the stream meanwhile
				_ = ss.write(&pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: ss.srv.serve(ctx, m.Call)}})
				continue
			}
			ss.call(m.Call)
		case *pb.FromPlugin_Done:
			if m.Done.GetSeq() == seq {
				ss.mu.Lock()
				ss.seq, ss.evCtx = 0, nil
				ss.mu.Unlock()
				return m.Done, nil
			}
		}
	}
}

// applyWrites applies the writes d carries (SessionDone.writes), in order,
// under ctx, and returns the event's result: the handler's, or, when that
// is OK, the first write's failure (the writes after it are not applied).
func (ss *session) applyWrites(ctx context.Context, d *pb.SessionDone) *pb.Result {
	res := d.GetResult()
	for i, w := range d.GetWrites() {
		r, _ := ss.srv.Set(ctx, w)
		if r.GetResult().GetStatus() == int32(abi.StatusOK) {
			continue
		}
		if res.GetStatus() == int32(abi.StatusOK) {
			res = &pb.Result{Status: r.GetResult().GetStatus(),
				Message: fmt.Appendf(nil, "write %d of %d at the end of the event: %s", i+1, len(d.GetWrites()), r.GetResult().GetMessage())}
		}
		break
	}
	return res
}

// serve runs host call c with the Host service's own methods and returns
// its reply: the response of c's verb, or a Result naming the verb as
// unknown (a plugin newer than this host).
func (s *hostServer) serve(ctx context.Context, c *pb.HostCall) *pb.HostReply {
	r := &pb.HostReply{Id: c.GetId()}
	result := func(res *pb.Result, _ error) { r.Response = &pb.HostReply_Result{Result: res} }
	switch v := c.GetVerb().(type) {
	case *pb.HostCall_Get:
		res, _ := s.Get(ctx, v.Get)
		r.Response = &pb.HostReply_Get{Get: res}
	case *pb.HostCall_Set:
		res, _ := s.Set(ctx, v.Set)
		r.Response = &pb.HostReply_Set{Set: res}
	case *pb.HostCall_Lock:
		res, _ := s.Lock(ctx, v.Lock)
		r.Response = &pb.HostReply_Lock{Lock: res}
	case *pb.HostCall_Now:
		res, _ := s.Now(ctx, v.Now)
		r.Response = &pb.HostReply_Now{Now: res}
	case *pb.HostCall_Del:
		result(s.Del(ctx, v.Del))
	case *pb.HostCall_Vdel:
		result(s.VDel(ctx, v.Vdel))
	case *pb.HostCall_Watch:
		result(s.Watch(ctx, v.Watch))
	case *pb.HostCall_Unwatch:
		result(s.Unwatch(ctx, v.Unwatch))
	case *pb.HostCall_Unlock:
		result(s.Unlock(ctx, v.Unlock))
	case *pb.HostCall_Log:
		result(s.Log(ctx, v.Log))
	case *pb.HostCall_Timer:
		result(s.Timer(ctx, v.Timer))
	case *pb.HostCall_Cancel:
		result(s.Cancel(ctx, v.Cancel))
	case *pb.HostCall_Keys: // revision 3
		res, _ := s.Keys(ctx, v.Keys)
		r.Response = &pb.HostReply_Keys{Keys: res}
	case *pb.HostCall_WatchPattern:
		result(s.WatchPattern(ctx, v.WatchPattern))
	case *pb.HostCall_UnwatchPattern:
		result(s.UnwatchPattern(ctx, v.UnwatchPattern))
	default:
		result(wire.Result(abi.Errorf(abi.StatusInternal, "host call %d: unknown verb (a plugin newer than this host)", c.GetId())), nil)
	}
	return r
}
