package guest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// TestRevision2Host: a plugin calling the revision-3 verbs on a host that
// lacks them (rev1Host: nor, here, any other) gets STATUS_INTERNAL naming
// gRPC's "Unimplemented", with the verb and pattern, and no keys.
func TestRevision2Host(t *testing.T) {
	var stderr bytes.Buffer
	h := dialHost(t, rev1Host{}, &stderr)
	ctx := context.Background()
	keys, keysErr := h.Keys(ctx, "p/*", abi.KeysOptions{Limit: 5})
	if keys != nil {
		t.Errorf("keys %q from a host without keys", keys)
	}
	for verb, err := range map[string]error{
		abi.FnKeys:           keysErr,
		abi.FnWatchPattern:   h.WatchPattern(ctx, "p/*", abi.WatchOptions{Self: true}),
		abi.FnUnwatchPattern: h.UnwatchPattern(ctx, "p/*"),
	} {
		var e *abi.Error
		if !errors.As(err, &e) || e.Status != abi.StatusInternal || !strings.HasPrefix(e.Msg, verb+` "p/*": host call failed: `) ||
			!strings.Contains(e.Msg, "Unimplemented") {
			t.Errorf("%s: %v (%s), want INTERNAL naming Unimplemented", verb, err, abi.StatusOf(err))
		}
	}
}

// olderHostStream is a session's stream to a host that answers every call
// as hostServer.serve answers a verb it does not know: a Result, INTERNAL,
// in place of the verb's response.
type olderHostStream struct{ ss *session }

func (o olderHostStream) Send(m *pb.FromPlugin) error {
	c := m.GetCall()
	o.ss.mu.Lock()
	ch := o.ss.calls[c.GetId()]
	delete(o.ss.calls, c.GetId())
	o.ss.mu.Unlock()
	ch <- &pb.HostReply{Id: c.GetId(), Response: &pb.HostReply_Result{Result: &pb.Result{Status: int32(abi.StatusInternal),
		Message: []byte("host call: unknown verb (a plugin newer than this host)")}}}
	return nil
}

func (olderHostStream) Recv() (*pb.ToPlugin, error) { return nil, errors.New("not read in this test") }

// TestRevision2HostSession: the same on the session, while an event runs:
// keys, whose reply is not the KeysResponse it wants, fails with INTERNAL
// naming Unimplemented; watch_pattern and unwatch_pattern, answered with a
// Result, get the host's INTERNAL and its message.
func TestRevision2HostSession(t *testing.T) {
	ss := &session{ctx: context.Background(), dead: make(chan struct{}), calls: map[uint64]chan *pb.HostReply{}}
	ss.stream = olderHostStream{ss: ss}
	ctx := context.Background()
	h := &remoteHost{c: &streamClient{ss: ss, seq: 1, event: ctx}}
	keys, err := h.Keys(ctx, "p/*", abi.KeysOptions{})
	if keys != nil || abi.StatusOf(err) != abi.StatusInternal || !strings.Contains(err.Error(), "Unimplemented") {
		t.Errorf("keys: %q, %v; want INTERNAL naming Unimplemented", keys, err)
	}
	for verb, err := range map[string]error{
		abi.FnWatchPattern:   h.WatchPattern(ctx, "p/*", abi.WatchOptions{}),
		abi.FnUnwatchPattern: h.UnwatchPattern(ctx, "p/*"),
	} {
		if abi.StatusOf(err) != abi.StatusInternal || !strings.Contains(err.Error(), "unknown verb") {
			t.Errorf("%s: %v; want the host's INTERNAL", verb, err)
		}
	}
}
