package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"google.golang.org/protobuf/proto"

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
	r := bufio.NewReader(bytes.NewReader(binary.AppendUvarint(nil, MaxFrame+1)))
	if _, err := ReadFrame(r); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("ReadFrame of a %d-byte frame: %v, want ErrFrameTooLarge", MaxFrame+1, err)
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
		if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(in))); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadFrame(%x): %v, want io.ErrUnexpectedEOF", in, err)
		}
	}
}

// FuzzFrame: ReadFrame never panics nor reads past MaxFrame; what it
// returns is exactly the frame's bytes, and the rest of the input is left
// for the next frame.
func FuzzFrame(f *testing.F) {
	f.Add(binary.AppendUvarint(nil, 0))
	f.Add(append(binary.AppendUvarint(nil, 3), "abcdef"...))
	f.Add(binary.AppendUvarint(nil, MaxFrame+1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x80})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		b, err := ReadFrame(r)
		n, k := binary.Uvarint(in)
		switch {
		case err == nil:
			if k <= 0 || n != uint64(len(b)) || !bytes.Equal(b, in[k:k+len(b)]) {
				t.Fatalf("frame %x from %x", b, in)
			}
			if rest, _ := io.ReadAll(r); !bytes.Equal(rest, in[k+len(b):]) {
				t.Fatalf("left %x after the frame, want %x", rest, in[k+len(b):])
			}
		case errors.Is(err, io.EOF):
			if len(in) != 0 {
				t.Fatalf("io.EOF from %x", in)
			}
		case errors.Is(err, ErrFrameTooLarge):
			if k <= 0 || n <= MaxFrame {
				t.Fatalf("ErrFrameTooLarge from %x", in)
			}
		}
	})
}
