package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
)

// MaxFrame is the largest message the raw session channel carries (as
// gRPC's receive limit on the Session stream): a longer frame is refused
// and ends the channel.
const MaxFrame = 64 << 20

// readChunk is how much room Recv makes for a read at least, and how much
// its buffer grows by at most beyond the bytes received while a long frame
// comes (it does not trust a long frame's length).
const readChunk = 64 << 10

// Spin is how long a reader waiting for an answer it expects within
// microseconds (RecvSpin) tries the socket before it parks: the host
// waiting for a plugin's next message during an event, which comes within
// ~20 µs mostly, while a park costs a thread wake-up (BENCHMARKS 13.3).
const Spin = 50 * time.Microsecond

// TokenSize is the length of the token a plugin sends first on the raw
// channel.
const TokenSize = 32

// ErrFrameTooLarge is the error of a frame longer than MaxFrame, read or
// written.
var ErrFrameTooLarge = errors.New("frame too large")

// Conn is one end of a raw session channel (see SessionReady in
// plugin.proto): protobuf messages framed as their length (uvarint) and
// bytes on a stream connection. Send writes on the connection itself, under
// a mutex; Recv and RecvContext are called by one goroutine at a time (the
// one waiting for a message: whoever reads hands the messages that are not
// its own over). Send is of message type S, Recv of R (ToPlugin and
// FromPlugin).
type Conn[S, R proto.Message] struct {
	c   net.Conn
	new func() R
	mu  sync.Mutex // held by Send
	buf []byte     // Send's buffer

	in  []byte // received bytes; in[off:] not yet returned as a frame
	off int

	rc syscall.RawConn // c's file descriptor, for spinRead; nil if it has none
}

// NewConn returns the channel over c, whose received messages newR makes.
func NewConn[S, R proto.Message](c net.Conn, newR func() R) *Conn[S, R] {
	cn := &Conn[S, R]{c: c, new: newR}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			cn.rc = rc
		}
	}
	return cn
}

// Send writes m as one frame.
func (c *Conn[S, R]) Send(m S) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := proto.Size(m)
	if n > MaxFrame {
		return fmt.Errorf("send a message of %d bytes: %w (at most %d)", n, ErrFrameTooLarge, MaxFrame)
	}
	b := binary.AppendUvarint(c.buf[:0], uint64(n))
	b, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(b, m)
	if err != nil {
		return fmt.Errorf("send: %w", err)
	}
	if cap(b) <= readChunk {
		c.buf = b // keep small buffers only
	}
	if _, err := c.c.Write(b); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// Recv reads the next message. It returns io.EOF when the peer closed the
// channel between frames.
func (c *Conn[S, R]) Recv() (R, error) { return c.RecvContext(context.Background()) }

// RecvContext reads the next message, or returns ctx's error once ctx
// ends. A frame that was partly read when ctx ended is not lost: the next
// RecvContext (of any goroutine) finishes it. It returns io.EOF when the
// peer closed the channel between frames.
func (c *Conn[S, R]) RecvContext(ctx context.Context) (R, error) { return c.RecvSpin(ctx, 0) }

// RecvSpin is RecvContext for a message expected within microseconds (the
// answer to a request just sent): when the connection has nothing yet, it
// tries again for up to spin before it parks, sparing the thread wake-up
// that follows a park. It spins once per call: a frame that has not come
// whole within spin is awaited in the poller. Only a unix socket (a
// connection with a file descriptor) spins; ctx ending stops the spin.
func (c *Conn[S, R]) RecvSpin(ctx context.Context, spin time.Duration) (R, error) {
	var zero R
	for {
		frame, size, err := CutFrame(c.in[c.off:])
		if err != nil {
			return zero, fmt.Errorf("receive: %w", err)
		}
		if size > 0 {
			c.off += size
			m := c.new()
			if err := proto.Unmarshal(frame, m); err != nil { // copies: c.in may be reused
				return zero, fmt.Errorf("receive: %w", err)
			}
			return m, nil
		}
		err = c.fill(ctx, spin)
		spin = 0
		if err != nil {
			if errors.Is(err, io.EOF) && len(c.in) > c.off {
				err = fmt.Errorf("receive: the channel ended inside a frame: %w", io.ErrUnexpectedEOF)
			}
			return zero, err
		}
	}
}

// past is a read deadline that has passed: it wakes a read in progress.
var past = time.Unix(1, 0)

// fill reads what the connection has into c.in, after the bytes not yet
// returned, waiting until something comes or ctx ends: first in a spin of
// up to spin (spinRead), then parked.
func (c *Conn[S, R]) fill(ctx context.Context, spin time.Duration) error {
	if c.off > 0 { // keep the unreturned bytes only, at the start
		c.in = c.in[:copy(c.in, c.in[c.off:])]
		c.off = 0
	}
	want := len(c.in) + readChunk
	if n, k := binary.Uvarint(c.in); k > 0 && n <= MaxFrame { // a long frame: room for it, at most a chunk beyond what came
		want = min(max(want, k+int(n)), 2*len(c.in)+readChunk)
	}
	if cap(c.in) < want {
		c.in = append(make([]byte, 0, want), c.in...)
	}
	if spin > 0 && ctx.Err() == nil {
		if n, ok, err := c.spinRead(ctx, c.in[len(c.in):cap(c.in)], spin); ok {
			c.in = c.in[:len(c.in)+n]
			return err
		}
	}
	if ctx.Done() == nil {
		n, err := c.c.Read(c.in[len(c.in):cap(c.in)])
		c.in = c.in[:len(c.in)+n]
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.c.SetReadDeadline(past)
		close(fired)
	})
	n, err := c.c.Read(c.in[len(c.in):cap(c.in)])
	c.in = c.in[:len(c.in)+n]
	if !stop() { // ctx ended: the deadline is set, or being set
		<-fired
		_ = c.c.SetReadDeadline(time.Time{})
		if n > 0 {
			return nil // use what came; the next read sees ctx
		}
		if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			return ctx.Err()
		}
	}
	return err
}

// Close closes the connection; a Recv in progress returns.
func (c *Conn[S, R]) Close() error { return c.c.Close() }

// CutFrame returns the frame at the start of b: its bytes and its length
// with the header, size; size 0 when b holds only part of it (nothing is
// returned until it is whole). The error is for a length above MaxFrame
// (ErrFrameTooLarge, wrapped) or a length that is no uvarint.
func CutFrame(b []byte) (frame []byte, size int, err error) {
	n, k := binary.Uvarint(b)
	switch {
	case k == 0:
		return nil, 0, nil
	case k < 0:
		return nil, 0, errors.New("a frame's length overflows 64 bits")
	case n > MaxFrame:
		return nil, 0, fmt.Errorf("a frame of %d bytes: %w (at most %d)", n, ErrFrameTooLarge, MaxFrame)
	case uint64(len(b)-k) < n:
		return nil, 0, nil
	}
	return b[k : k+int(n)], k + int(n), nil
}
