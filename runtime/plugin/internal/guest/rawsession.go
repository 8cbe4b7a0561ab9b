package guest

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// A session on a raw channel whose host sends SessionCancel on the stream
// (InitRequest.session_wake, SessionReady.wake) has no reader goroutine:
// whoever waits for a message reads the channel itself, holding the
// session's role, and hands over the messages that are someone else's. The
// waiters are the session's loop, between events, and host calls waiting
// for their replies. The loop runs each event's handler itself, so an
// event whose handler calls the host one call at a time passes from the
// socket to the handler, and each reply to its call, with no hand-off
// between goroutines; concurrent calls of a handler share the reading, one
// reading for all. A message nobody waits for (the next event while a
// cancelled handler still runs on the loop) is what the stream's
// SessionCancel is for: it also gives the loop's part to a new goroutine.

// loopState is which goroutine is the session's loop: gen numbers them,
// seq is the event the current one runs (0: none), start starts a new one.
type loopState struct {
	gen   uint64
	seq   uint64
	start func(gen uint64)
}

// runRaw serves the session: the loop reads events and runs them, this
// goroutine reads the stream (cancellations, and its end).
func (ss *session) runRaw(stream pb.Rule_SessionServer, handle func(ctx context.Context, h abi.Host, ev abi.Event) error) error {
	var loops sync.WaitGroup
	ss.loop.start = func(gen uint64) { loops.Go(func() { ss.runLoop(gen, handle) }) }
	ss.mu.Lock()
	ss.loop.start(0)
	ss.mu.Unlock()
	for {
		m, err := stream.Recv()
		if err != nil {
			ss.end()
			_ = ss.raw.Close() // a read in progress returns
			loops.Wait()
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if c := m.GetCancel(); c != nil {
			ss.cancelEvent(c.GetSeq())
		}
	}
}

// runLoop reads events and runs them, one at a time, until the session
// ends or another goroutine takes its part (replaceLoopLocked).
func (ss *session) runLoop(gen uint64, handle func(ctx context.Context, h abi.Host, ev abi.Event) error) {
	for {
		ev, err := ss.nextEvent()
		if err != nil {
			return // the session ended (the host sees it itself)
		}
		ctx, cancel := ss.eventContext(ev, true)
		ss.handle(ctx, cancel, ev.GetSeq(), ev.GetEvent(), handle)
		ss.mu.Lock()
		replaced := ss.loop.gen != gen
		if !replaced {
			ss.loop.seq = 0
		}
		ss.mu.Unlock()
		if replaced {
			return
		}
	}
}

// replaceLoopLocked gives the loop's part to a new goroutine if the loop
// runs event seq, which was cancelled: its handler may never return, and
// the next event must be read.
func (ss *session) replaceLoopLocked(seq uint64) {
	if ss.raw == nil || seq == 0 || ss.loop.seq != seq {
		return
	}
	ss.loop.gen++
	ss.loop.seq = 0
	ss.loop.start(ss.loop.gen)
}

// nextEvent returns the next event, reading the channel while nobody else
// does.
func (ss *session) nextEvent() (*pb.SessionEvent, error) {
	for {
		if ev := ss.popEvent(); ev != nil {
			return ev, nil
		}
		select {
		case <-ss.evNote:
			continue
		case <-ss.dead:
			return nil, errSessionEnded
		case ss.role <- struct{}{}:
		}
		for {
			if ev := ss.popEvent(); ev != nil {
				<-ss.role
				return ev, nil
			}
			m, err := ss.raw.RecvContext(ss.ctx)
			if err != nil {
				<-ss.role
				return nil, err
			}
			ss.dispatch(m)
		}
	}
}

// awaitReply returns the reply ch gets, reading the channel while nobody
// else does, until ctx ends or the session does.
func (ss *session) awaitReply(ctx context.Context, ch chan *pb.HostReply) (*pb.HostReply, error) {
	for {
		select {
		case r := <-ch:
			return r, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-ss.dead:
			return nil, status.Error(codes.Unavailable, "the session with the host ended")
		case ss.role <- struct{}{}:
		}
		for {
			select {
			case r := <-ch:
				<-ss.role
				return r, nil
			default:
			}
			// No spin (wire.Conn.RecvSpin) here: a reply mostly takes a
			// state-store round trip through the broker (~120 µs; a 30 µs
			// spin caught 7 of 9,000), so spinning only burns a core the
			// host needs (BENCHMARKS 13.3).
			m, err := ss.raw.RecvContext(ctx)
			if err != nil {
				<-ss.role
				if ctx.Err() != nil {
					return nil, status.FromContextError(ctx.Err()).Err()
				}
				return nil, status.Errorf(codes.Unavailable, "the session with the host ended: %v", err)
			}
			ss.dispatch(m)
		}
	}
}

// dispatch hands over a message read from the channel: a reply to the
// call waiting for it, an event to the loop, a cancellation to its
// handler.
func (ss *session) dispatch(m *pb.ToPlugin) {
	switch m := m.GetMsg().(type) {
	case *pb.ToPlugin_Reply:
		ss.mu.Lock()
		ch, ok := ss.calls[m.Reply.GetId()]
		delete(ss.calls, m.Reply.GetId())
		if ss.alone == m.Reply.GetId() { // the host reads the channel again
			ss.alone = 0
		}
		ss.mu.Unlock()
		if ok {
			ch <- m.Reply // buffered: never blocks
		}
	case *pb.ToPlugin_Event:
		ss.mu.Lock()
		ss.pending = append(ss.pending, m.Event)
		ss.mu.Unlock()
		select {
		case ss.evNote <- struct{}{}:
		default:
		}
	case *pb.ToPlugin_Cancel:
		ss.cancelEvent(m.Cancel.GetSeq())
	}
}

// popEvent takes the first event dispatch put aside, if any.
func (ss *session) popEvent() *pb.SessionEvent {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.pending) == 0 {
		return nil
	}
	ev := ss.pending[0]
	ss.pending = ss.pending[1:]
	return ev
}

// errSessionEnded is nextEvent's error once the session has ended.
var errSessionEnded = errors.New("the session ended")
