package guest

import (
	"context"
	"net"
	"testing"

	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// TestEarlyCancel: on a raw channel, the stream's SessionCancel can
// overtake the event it cancels (they travel on different sockets). The
// cancellation is kept: the handler starts with its ctx ended, and the
// loop's part goes to a new goroutine (the handler, running on the loop,
// may ignore its ctx). A cancellation of an event that has already ended
// is not kept.
func TestEarlyCancel(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var started []uint64
	ss := &session{ctx: context.Background(), dead: make(chan struct{}), events: map[uint64]context.CancelFunc{},
		raw: wire.NewConn[*pb.FromPlugin](a, func() *pb.ToPlugin { return &pb.ToPlugin{} })}
	ss.loop.start = func(gen uint64) { started = append(started, gen) }

	ss.cancelEvent(2) // before event 2 came
	ctx, cancel := ss.eventContext(&pb.SessionEvent{Seq: 2}, true)
	defer cancel()
	if ctx.Err() == nil {
		t.Fatal("event 2, cancelled before it came, starts with its ctx running")
	}
	if len(started) != 1 || started[0] != 1 {
		t.Errorf("loops started %v, want a new one (gen 1) for the cancelled handler's", started)
	}
	cancel()
	ss.mu.Lock()
	delete(ss.events, 2)
	ss.mu.Unlock()

	ss.cancelEvent(1) // ended before: nothing to keep
	ss.cancelEvent(2)
	if len(ss.early) != 0 {
		t.Errorf("cancellations of ended events kept: %v", ss.early)
	}
	ctx3, cancel3 := ss.eventContext(&pb.SessionEvent{Seq: 3}, true)
	defer cancel3()
	if ctx3.Err() != nil {
		t.Error("event 3 starts cancelled")
	}
}
