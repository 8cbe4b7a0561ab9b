//go:build unix

package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/internal/testutil"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// setSpinHook sets testHookSpin to f for the test.
func setSpinHook(t *testing.T, f func()) {
	t.Helper()
	testHookSpin = f
	t.Cleanup(func() { testHookSpin = nil })
}

// spinPair returns a plugin end of a raw channel over a unix socket pair
// and the host's raw socket.
func spinPair(t *testing.T) (*Conn[*pb.FromPlugin, *pb.ToPlugin], net.Conn) {
	t.Helper()
	a, b := unixPair(t)
	return NewConn[*pb.FromPlugin](b, func() *pb.ToPlugin { return &pb.ToPlugin{} }), a
}

// recvAsync runs c.RecvSpin(ctx, spin) in a goroutine the test waits for.
func recvAsync(t *testing.T, c *Conn[*pb.FromPlugin, *pb.ToPlugin], ctx context.Context, spin time.Duration) chan recvResult {
	t.Helper()
	res := make(chan recvResult, 1)
	go func() {
		m, err := c.RecvSpin(ctx, spin)
		res <- recvResult{m, err}
	}()
	t.Cleanup(func() { _ = c.Close(); <-res })
	return res
}

type recvResult struct {
	m   *pb.ToPlugin
	err error
}

// wait returns what res gets, failing the test if nothing comes within
// the bound.
func wait(t *testing.T, res chan recvResult, what string) recvResult {
	t.Helper()
	select {
	case r := <-res:
		res <- r // for recvAsync's cleanup
		return r
	case <-time.After(testutil.WaitBound):
		t.Fatalf("%s: RecvSpin still waits", what)
		return recvResult{}
	}
}

// TestRecvSpinContextEndsSpin: a RecvSpin spinning (for an hour) on an
// empty socket returns the context's error once it is cancelled, and the
// channel works afterwards.
func TestRecvSpinContextEndsSpin(t *testing.T) {
	plugin, host := spinPair(t)
	spinning := make(chan struct{}, 1)
	setSpinHook(t, func() {
		select {
		case spinning <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	res := recvAsync(t, plugin, ctx, time.Hour)
	select {
	case <-spinning:
	case <-time.After(testutil.WaitBound):
		t.Fatal("RecvSpin did not spin")
	}
	cancel()
	if r := wait(t, res, "after cancel"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("RecvSpin after cancel: %v, %v; want context.Canceled", r.m, r.err)
	}
	want := &pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: &pb.HostReply{Id: 7}}}
	writeFrames(t, host, want)
	if got, err := plugin.RecvSpin(context.Background(), time.Hour); err != nil || !proto.Equal(got, want) {
		t.Fatalf("RecvSpin after the cancel: %v, %v; want %v", got, err, want)
	}
}

// TestRecvSpinFrameAcrossPark: the first part of a frame comes during the
// spin, the rest once the reader has parked: the frame comes whole, and a
// RecvSpin spins once (the rest of a frame is awaited parked, not in a
// second spin).
func TestRecvSpinFrameAcrossPark(t *testing.T) {
	plugin, host := spinPair(t)
	want := &pb.ToPlugin{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Seq: 1, Event: &pb.Event{Key: []byte("key"), Value: []byte("value")}}}}
	frame := frameOf(t, want)
	cut := len(frame) / 2
	var spins atomic.Int32
	setSpinHook(t, func() {
		if spins.Add(1) == 1 {
			if _, err := host.Write(frame[:cut]); err != nil {
				t.Error(err)
			}
		}
	})
	res := recvAsync(t, plugin, context.Background(), time.Hour)
	waitParked(t)
	if n := spins.Load(); n != 1 {
		t.Fatalf("%d spins before parking, want 1", n)
	}
	if _, err := host.Write(frame[cut:]); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, res, "the frame's rest"); r.err != nil || !proto.Equal(r.m, want) {
		t.Fatalf("RecvSpin: %v, %v; want %v", r.m, r.err, want)
	}
}

// TestRecvSpinEOF: the peer closing during a spin ends it with io.EOF.
func TestRecvSpinEOF(t *testing.T) {
	plugin, host := spinPair(t)
	setSpinHook(t, func() { _ = host.Close() })
	res := recvAsync(t, plugin, context.Background(), time.Hour)
	if r := wait(t, res, "after the peer's close"); !errors.Is(r.err, io.EOF) {
		t.Fatalf("RecvSpin after the peer's close: %v, %v; want io.EOF", r.m, r.err)
	}
}

// TestRecvSpinNoDescriptor: on a connection with no file descriptor
// (net.Pipe), RecvSpin is RecvContext.
func TestRecvSpinNoDescriptor(t *testing.T) {
	host, plugin := pipe(t)
	setSpinHook(t, func() { t.Error("spun on a net.Pipe") })
	want := &pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: &pb.HostReply{Id: 9}}}
	errc := make(chan error, 1)
	go func() { errc <- host.Send(want) }()
	got, err := plugin.RecvSpin(context.Background(), time.Hour)
	if err != nil || !proto.Equal(got, want) {
		t.Fatalf("RecvSpin: %v, %v; want %v", got, err, want)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// frameOf is m's frame.
func frameOf(t *testing.T, m proto.Message) []byte {
	t.Helper()
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.AppendUvarint(nil, uint64(len(body))), body...)
}

// writeFrames writes ms' frames on c.
func writeFrames(t *testing.T, c net.Conn, ms ...proto.Message) {
	t.Helper()
	var b []byte
	for _, m := range ms {
		b = append(b, frameOf(t, m)...)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// waitParked waits until a goroutine in RecvSpin is parked in the poller
// (its stack says "IO wait").
func waitParked(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(testutil.WaitBound)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, ").RecvSpin(") {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("RecvSpin did not park")
}
