package wire

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/internal/testutil"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// pipe returns the two ends of a raw channel over an in-memory connection.
func pipe(t *testing.T) (*Conn[*pb.ToPlugin, *pb.FromPlugin], *Conn[*pb.FromPlugin, *pb.ToPlugin]) {
	t.Helper()
	a, b := net.Pipe()
	host := NewConn[*pb.ToPlugin](a, func() *pb.FromPlugin { return &pb.FromPlugin{} })
	plugin := NewConn[*pb.FromPlugin](b, func() *pb.ToPlugin { return &pb.ToPlugin{} })
	t.Cleanup(func() { _ = host.Close(); _ = plugin.Close() })
	return host, plugin
}

// TestConnRoundTrip: messages sent on one end of a raw channel arrive whole
// and in order on the other, in both directions; the peer's close is io.EOF.
func TestConnRoundTrip(t *testing.T) {
	host, plugin := pipe(t)
	down := []*pb.ToPlugin{
		{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Seq: 1, Event: &pb.Event{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 100_000)}, TimeoutMs: 5}}},
		{Msg: &pb.ToPlugin_Cancel{Cancel: &pb.SessionCancel{Seq: 1}}},
		{}, // empty: a zero-length frame
	}
	errc := make(chan error, 1)
	go func() {
		for _, m := range down {
			if err := host.Send(m); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i, want := range down {
		got, err := plugin.Recv()
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("message %d: got %v, want %v", i, got, want)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	up := &pb.FromPlugin{Msg: &pb.FromPlugin_Done{Done: &pb.SessionDone{Seq: 1, Result: &pb.Result{Status: 3, Message: []byte("no")}}}}
	go func() { errc <- plugin.Send(up) }()
	if got, err := host.Recv(); err != nil || !proto.Equal(got, up) {
		t.Fatalf("up: %v, %v; want %v", got, err, up)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	_ = plugin.Close()
	if _, err := host.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("Recv after the peer closed: %v, want io.EOF", err)
	}
}

// TestFrameTooLarge: a frame longer than MaxFrame is refused, read (the
// length alone is read, not the bytes) or sent (nothing is written).
func TestFrameTooLarge(t *testing.T) {
	if _, _, err := CutFrame(binary.AppendUvarint(nil, MaxFrame+1)); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("CutFrame of a %d-byte frame: %v, want ErrFrameTooLarge", MaxFrame+1, err)
	}
	host, plugin := pipe(t)
	big := &pb.ToPlugin{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Event: &pb.Event{Value: make([]byte, MaxFrame)}}}}
	if err := host.Send(big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("Send of a %d-byte message: %v, want ErrFrameTooLarge", proto.Size(big), err)
	}
	_ = host.Close()
	if _, err := plugin.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the refused message was written: Recv %v, want io.EOF", err)
	}
}

// TestFrameTruncated: a connection that ends inside a frame (its length or
// its bytes) is io.ErrUnexpectedEOF, not the clean end between frames.
func TestFrameTruncated(t *testing.T) {
	for _, in := range [][]byte{{0x80}, {0x05, 'a', 'b'}} {
		a, b := unixPair(t)
		c := NewConn[*pb.ToPlugin](b, func() *pb.FromPlugin { return &pb.FromPlugin{} })
		if _, err := a.Write(in); err != nil {
			t.Fatal(err)
		}
		_ = a.Close()
		if _, err := c.Recv(); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("Recv of %x then the end: %v, want io.ErrUnexpectedEOF", in, err)
		}
	}
}

// TestRecvContextEnds: RecvContext waiting for a message that does not
// come returns the context's error once it ends (cancelled or past its
// deadline), and the channel still works afterwards.
func TestRecvContextEnds(t *testing.T) {
	a, b := unixPair(t)
	host := NewConn[*pb.ToPlugin](a, func() *pb.FromPlugin { return &pb.FromPlugin{} })
	plugin := NewConn[*pb.FromPlugin](b, func() *pb.ToPlugin { return &pb.ToPlugin{} })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := plugin.RecvContext(ctx); errc <- err }()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RecvContext after cancel: %v, want context.Canceled", err)
		}
	case <-time.After(testutil.WaitBound):
		t.Fatal("RecvContext still waits after its ctx was cancelled")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer dcancel()
	if _, err := plugin.RecvContext(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RecvContext past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if _, err := plugin.RecvContext(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RecvContext with an ended ctx: %v, want context.Canceled", err)
	}
	want := &pb.ToPlugin{Msg: &pb.ToPlugin_Cancel{Cancel: &pb.SessionCancel{Seq: 3}}}
	go func() { errc <- host.Send(want) }()
	if got, err := plugin.RecvContext(context.Background()); err != nil || !proto.Equal(got, want) {
		t.Fatalf("RecvContext after the ends: %v, %v; want %v", got, err, want)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestRecvContextFinishesFrame: when the ctx of a RecvContext ends while a
// frame is only partly there, the bytes read are kept: the next
// RecvContext finishes the frame and returns it whole, and the frames
// after it follow in order.
func TestRecvContextFinishesFrame(t *testing.T) {
	a, b := unixPair(t)
	plugin := NewConn[*pb.FromPlugin](b, func() *pb.ToPlugin { return &pb.ToPlugin{} })
	first := &pb.ToPlugin{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Seq: 1, Event: &pb.Event{Key: []byte("k"), Value: bytes.Repeat([]byte("v"), 200_000)}}}}
	second := &pb.ToPlugin{Msg: &pb.ToPlugin_Reply{Reply: &pb.HostReply{Id: 2}}}
	var frames []byte
	for _, m := range []*pb.ToPlugin{first, second} {
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		frames = append(binary.AppendUvarint(frames, uint64(len(body))), body...)
	}
	for _, cut := range []int{1, 2, 100_000, len(frames) - 3} { // inside the length, inside the bytes, inside the second frame
		errc := make(chan error, 1)
		go func() { _, err := a.Write(frames[:cut]); errc <- err }()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		var got []*pb.ToPlugin
		for {
			m, err := plugin.RecvContext(ctx)
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("cut at %d: RecvContext: %v, want its deadline", cut, err)
				}
				break
			}
			got = append(got, m)
		}
		cancel()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		go func() { _, err := a.Write(frames[cut:]); errc <- err }()
		for len(got) < 2 {
			m, err := plugin.RecvContext(context.Background())
			if err != nil {
				t.Fatalf("cut at %d: RecvContext after the deadline: %v", cut, err)
			}
			got = append(got, m)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got[0], first) || !proto.Equal(got[1], second) {
			t.Fatalf("cut at %d: the frames came back changed", cut)
		}
	}
}

// FuzzFrame: CutFrame never panics nor accepts a length above MaxFrame;
// what it returns is exactly the frame's bytes after a whole uvarint
// length, and a prefix of a frame is never taken for one.
func FuzzFrame(f *testing.F) {
	f.Add(binary.AppendUvarint(nil, 0))
	f.Add(append(binary.AppendUvarint(nil, 3), "abcdef"...))
	f.Add(binary.AppendUvarint(nil, MaxFrame+1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, in []byte) {
		b, size, err := CutFrame(in)
		n, k := binary.Uvarint(in)
		switch {
		case err != nil:
			if k > 0 && n <= MaxFrame {
				t.Fatalf("error %v from %x", err, in)
			}
		case size == 0:
			if k > 0 && n <= MaxFrame && uint64(len(in)-k) >= n {
				t.Fatalf("a whole frame %x taken for a part", in)
			}
		default:
			if k <= 0 || n != uint64(len(b)) || size != k+len(b) || !bytes.Equal(b, in[k:k+len(b)]) {
				t.Fatalf("frame %x (size %d) from %x", b, size, in)
			}
			if _, short, _ := CutFrame(in[:size-1]); short != 0 {
				t.Fatalf("%x, one byte short of a frame, taken for one", in[:size-1])
			}
		}
	})
}
