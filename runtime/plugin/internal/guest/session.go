package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// Session serves the Rule service's session (see plugin.proto): it answers
// the opening with SessionReady, then runs the rule's handle for each event
// that comes down the stream, with an abi.Host whose calls go up the same
// stream while the event runs. It returns when the stream ends, once every
// handler it started has returned.
//
// When Init offered a raw channel, the session travels there instead (it
// answers SessionReady.raw once connected), and ends when the channel or
// the stream does; if it cannot connect, it says so on stderr and stays on
// the stream.
func (s *ruleServer) Session(stream pb.Rule_SessionServer) error {
	s.mu.Lock()
	h, socket, token, wake, writes := s.host, s.rawSocket, s.rawToken, s.sessionWake, s.doneWrites
	s.mu.Unlock()
	if h == nil {
		return status.Error(codes.FailedPrecondition, "session before init")
	}
	ss := &session{stream: stream, ctx: stream.Context(), unary: h.c, stderr: s.stderr, dead: make(chan struct{}),
		calls: map[uint64]chan *pb.HostReply{}, events: map[uint64]context.CancelFunc{}, doneWrites: writes}
	ready := &pb.SessionReady{}
	if socket != "" {
		c, err := dialRaw(stream.Context(), socket, token)
		if err != nil {
			fmt.Fprintf(errOut(s.stderr), "ssrun plugin: session on its gRPC stream: %v\n", err)
		} else {
			defer c.Close()
			defer context.AfterFunc(stream.Context(), func() { _ = c.Close() })()
			ss.stream, ready.Raw = c, true
			if wake { // read by its waiters (rawsession.go)
				ss.raw, ss.grpc, ready.Wake = c, stream, true
				ss.role, ss.evNote = make(chan struct{}, 1), make(chan struct{}, 1)
			}
		}
	}
	if err := stream.Send(&pb.FromPlugin{Msg: &pb.FromPlugin_Ready{Ready: ready}}); err != nil {
		return err
	}
	if ss.raw != nil {
		return ss.runRaw(stream, s.rule.handle)
	}
	return ss.run(s.rule.handle)
}

// sessionStream is what carries a session: the Session stream or the raw
// channel.
type sessionStream interface {
	Send(*pb.FromPlugin) error
	Recv() (*pb.ToPlugin, error)
}

// session is the plugin's end of one session.
type session struct {
	stream sessionStream
	ctx    context.Context // the Session stream's
	unary  pb.HostClient   // the Host service, for calls made outside an event
	stderr io.Writer       // Plugin.Stderr

	send sync.Mutex // held by each Send

	doneWrites bool // the host applies SessionDone.writes (InitRequest.done_writes)

	// On a raw channel read by whoever waits (rawsession.go): raw, and the
	// right to read it, held by the goroutine whose value role holds.
	raw      *rawConn
	grpc     sessionStream      // the Session stream, for calls while an alone call is in flight
	grpcSend sync.Mutex         // held by each Send on grpc
	alone    uint64             // under mu: the call sent with HostCall.alone that has no reply yet, 0 if none
	role     chan struct{}      // capacity 1
	evNote   chan struct{}      // capacity 1: an event was put in pending
	loop     loopState          // under mu
	pending  []*pb.SessionEvent // under mu: events read by a call's waiter, for the loop

	mu      sync.Mutex
	nextID  uint64
	calls   map[uint64]chan *pb.HostReply // host calls waiting for their reply, by id
	events  map[uint64]context.CancelFunc // handlers running, by seq
	started uint64                        // the last event whose handler started
	early   map[uint64]bool               // events cancelled before they started
	dead    chan struct{}                 // closed when the stream has ended
}

// write sends m up the stream.
func (ss *session) write(m *pb.FromPlugin) error {
	ss.send.Lock()
	defer ss.send.Unlock()
	return ss.stream.Send(m)
}

// run reads the stream until it ends.
func (ss *session) run(handle func(ctx context.Context, h abi.Host, ev abi.Event) error) error {
	var handlers sync.WaitGroup
	for {
		m, err := ss.stream.Recv()
		if err != nil {
			ss.end()
			handlers.Wait()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		switch m := m.GetMsg().(type) {
		case *pb.ToPlugin_Event:
			ctx, cancel := ss.eventContext(m.Event, false)
			handlers.Go(func() { ss.handle(ctx, cancel, m.Event.GetSeq(), m.Event.GetEvent(), handle) })
		case *pb.ToPlugin_Reply:
			ss.mu.Lock()
			ch, ok := ss.calls[m.Reply.GetId()]
			delete(ss.calls, m.Reply.GetId())
			ss.mu.Unlock()
			if ok {
				ch <- m.Reply // buffered: never blocks
			}
		case *pb.ToPlugin_Cancel:
			ss.cancelEvent(m.Cancel.GetSeq())
		}
	}
}

// eventContext returns the context of event ev's handler, bounded by the
// deadline the host sent, and records it as running (on the raw loop, if
// loop). A cancellation that came before the event (the stream can
// overtake the raw channel) cancels it at once.
func (ss *session) eventContext(ev *pb.SessionEvent, loop bool) (context.Context, context.CancelFunc) {
	var ctx context.Context
	var cancel context.CancelFunc
	if ms := ev.GetTimeoutMs(); ms > 0 {
		ctx, cancel = context.WithTimeout(ss.ctx, time.Duration(ms)*time.Millisecond)
	} else {
		ctx, cancel = context.WithCancel(ss.ctx)
	}
	seq := ev.GetSeq()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.events[seq] = cancel
	ss.started = max(ss.started, seq)
	if loop {
		ss.loop.seq = seq
	}
	if ss.early[seq] {
		delete(ss.early, seq)
		cancel()
		ss.replaceLoopLocked(seq)
	}
	return ctx, cancel
}

// handle runs one event's handler and sends its SessionDone. The handler's
// context ends before SessionDone is sent, and no call of the event is sent
// after its context ended (see call), so the host sees every call of an
// event before the event's end.
func (ss *session) handle(ctx context.Context, cancel context.CancelFunc, seq uint64, ev *pb.Event,
	handle func(ctx context.Context, h abi.Host, ev abi.Event) error) {
	c := &streamClient{ss: ss, seq: seq, event: ctx}
	h := &remoteHost{c: c, stderr: ss.stderr}
	err := protect("handle", ss.stderr, func() error { return handle(ctx, h, wire.EventFromPB(ev)) })
	cancel()
	ss.mu.Lock()
	delete(ss.events, seq)
	ss.mu.Unlock()
	done := &pb.FromPlugin{Msg: &pb.FromPlugin_Done{Done: &pb.SessionDone{Seq: seq, Result: wire.Result(err), Writes: c.endWrites()}}}
	_ = ss.write(done) // fails only when the stream ended, which the host sees itself
}

// cancelEvent cancels the handler of event seq, if it runs.
func (ss *session) cancelEvent(seq uint64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if cancel, ok := ss.events[seq]; ok {
		cancel()
		ss.replaceLoopLocked(seq)
	} else if seq > ss.started { // its event is yet to be read
		if ss.early == nil {
			ss.early = map[uint64]bool{}
		}
		ss.early[seq] = true
	}
}

// end marks the stream ended: every handler's context is cancelled, and
// host calls waiting for a reply fail.
func (ss *session) end() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	close(ss.dead)
	for _, cancel := range ss.events {
		cancel()
	}
}

// errEnded is call's answer when the event has ended: the call goes to the
// Host service instead.
var errEnded = errors.New("the event has ended")

// call sends c up the stream as a call of event seq and waits for its
// reply, until ctx ends or the stream does. After the event's context
// ended it sends nothing and returns errEnded. Its errors are gRPC status
// errors, as a unary call's.
func (ss *session) call(ctx, event context.Context, seq uint64, c *pb.HostCall) (*pb.HostReply, error) {
	ch := make(chan *pb.HostReply, 1)
	ss.mu.Lock()
	ss.nextID++
	id := ss.nextID
	via, lock := ss.stream, &ss.send
	if ss.raw != nil { // see HostCall.alone
		switch {
		case ss.alone != 0:
			via, lock = ss.grpc, &ss.grpcSend
		case len(ss.calls) == 0:
			c.Alone, ss.alone = true, id
		}
	}
	ss.calls[id] = ch
	ss.mu.Unlock()
	forget := func() {
		ss.mu.Lock()
		delete(ss.calls, id)
		if ss.alone == id {
			ss.alone = 0
		}
		ss.mu.Unlock()
	}
	c.Id, c.Seq = id, seq
	lock.Lock()
	if event.Err() != nil {
		lock.Unlock()
		forget()
		return nil, errEnded
	}
	err := via.Send(&pb.FromPlugin{Msg: &pb.FromPlugin_Call{Call: c}})
	lock.Unlock()
	if err != nil {
		forget()
		return nil, err
	}
	if ss.raw != nil {
		r, err := ss.awaitReply(ctx, ch)
		if err != nil {
			forget()
		}
		return r, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		forget()
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-ss.dead:
		forget()
		return nil, status.Error(codes.Unavailable, "the session with the host ended")
	}
}

// streamClient is the Host service as one event's handler calls it: up the
// session while the event runs, and through the Host service once it ended
// (a handler's goroutine may outlive it). It implements pb.HostClient, so
// that remoteHost serves the same verbs, with the same messages and
// errors, over both.
type streamClient struct {
	ss    *session
	seq   uint64
	event context.Context // the handler's context

	mu     sync.Mutex
	writes []*pb.SetRequest // SetAtEnd's, for the event's SessionDone
	ended  bool             // the SessionDone is made: writes go as sets
}

// addWrite keeps w for the event's SessionDone; false when it cannot go
// there (the host does not apply such writes, or the event has ended).
func (c *streamClient) addWrite(w *pb.SetRequest) bool {
	if !c.ss.doneWrites {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended || c.event.Err() != nil {
		return false
	}
	c.writes = append(c.writes, w)
	return true
}

// endWrites returns the writes for the event's SessionDone; later ones go
// as sets.
func (c *streamClient) endWrites() []*pb.SetRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	return c.writes
}

var _ pb.HostClient = (*streamClient)(nil)

// roundTrip sends call up c's session and returns the response get finds
// in its reply; once the event ended, unary makes the call instead. A
// reply without a response means the host stopped waiting for the event
// (it was cancelled): gRPC's Canceled. A Result in place of the verb's
// response means the host does not know the verb: Unimplemented, as the
// Host service would answer.
func roundTrip[R comparable](c *streamClient, ctx context.Context, call *pb.HostCall, get func(*pb.HostReply) R, unary func() (R, error)) (R, error) {
	var zero R
	r, err := c.ss.call(ctx, c.event, c.seq, call)
	switch {
	case errors.Is(err, errEnded):
		return unary()
	case err != nil:
		return zero, err
	}
	if v := get(r); v != zero {
		return v, nil
	}
	if r.GetResponse() == nil {
		return zero, status.Error(codes.Canceled, "the host no longer waits for this event")
	}
	return zero, status.Errorf(codes.Unimplemented, "the host does not know this call: %s", r.GetResult().GetMessage())
}

func (c *streamClient) Get(ctx context.Context, in *pb.GetRequest, opts ...grpc.CallOption) (*pb.GetResponse, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Get{Get: in}}, (*pb.HostReply).GetGet,
		func() (*pb.GetResponse, error) { return c.ss.unary.Get(ctx, in, opts...) })
}

func (c *streamClient) Set(ctx context.Context, in *pb.SetRequest, opts ...grpc.CallOption) (*pb.SetResponse, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Set{Set: in}}, (*pb.HostReply).GetSet,
		func() (*pb.SetResponse, error) { return c.ss.unary.Set(ctx, in, opts...) })
}

func (c *streamClient) Del(ctx context.Context, in *pb.DelRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Del{Del: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Del(ctx, in, opts...) })
}

func (c *streamClient) VDel(ctx context.Context, in *pb.VDelRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Vdel{Vdel: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.VDel(ctx, in, opts...) })
}

func (c *streamClient) Watch(ctx context.Context, in *pb.WatchRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Watch{Watch: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Watch(ctx, in, opts...) })
}

func (c *streamClient) Unwatch(ctx context.Context, in *pb.UnwatchRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Unwatch{Unwatch: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Unwatch(ctx, in, opts...) })
}

func (c *streamClient) Lock(ctx context.Context, in *pb.LockRequest, opts ...grpc.CallOption) (*pb.LockResponse, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Lock{Lock: in}}, (*pb.HostReply).GetLock,
		func() (*pb.LockResponse, error) { return c.ss.unary.Lock(ctx, in, opts...) })
}

func (c *streamClient) Unlock(ctx context.Context, in *pb.UnlockRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Unlock{Unlock: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Unlock(ctx, in, opts...) })
}

func (c *streamClient) Log(ctx context.Context, in *pb.LogRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Log{Log: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Log(ctx, in, opts...) })
}

func (c *streamClient) Timer(ctx context.Context, in *pb.TimerRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Timer{Timer: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Timer(ctx, in, opts...) })
}

func (c *streamClient) Cancel(ctx context.Context, in *pb.CancelRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Cancel{Cancel: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.Cancel(ctx, in, opts...) })
}

func (c *streamClient) Now(ctx context.Context, in *pb.NowRequest, opts ...grpc.CallOption) (*pb.NowResponse, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Now{Now: in}}, (*pb.HostReply).GetNow,
		func() (*pb.NowResponse, error) { return c.ss.unary.Now(ctx, in, opts...) })
}
