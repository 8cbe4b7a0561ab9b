package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"google.golang.org/protobuf/proto"
)

// MaxFrame is the largest message the raw session channel carries (as
// gRPC's receive limit on the Session stream): a longer frame is refused
// and ends the channel.
const MaxFrame = 64 << 20

// smallFrame is the length up to which ReadFrame allocates a frame at
// once.
const smallFrame = 64 << 10

// TokenSize is the length of the token a plugin sends first on the raw
// channel.
const TokenSize = 32

// ErrFrameTooLarge is the error of a frame longer than MaxFrame, read or
// written.
var ErrFrameTooLarge = errors.New("frame too large")

// Conn is one end of a raw session channel (see SessionReady in
// plugin.proto): protobuf messages framed as their length (uvarint) and
// bytes on a stream connection. Send writes on the connection itself, under
// a mutex; Recv is called by one goroutine at a time. Send is of message
// type S, Recv of R (ToPlugin and FromPlugin).
type Conn[S, R proto.Message] struct {
	c   net.Conn
	r   *bufio.Reader
	new func() R

	mu  sync.Mutex // held by Send
	buf []byte     // Send's buffer
}

// NewConn returns the channel over c, whose received messages newR makes.
func NewConn[S, R proto.Message](c net.Conn, newR func() R) *Conn[S, R] {
	return &Conn[S, R]{c: c, r: bufio.NewReader(c), new: newR}
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
	if cap(b) <= 64<<10 {
		c.buf = b // keep small buffers only
	}
	if _, err := c.c.Write(b); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

// Recv reads the next frame. It returns io.EOF when the peer closed the
// channel between frames.
func (c *Conn[S, R]) Recv() (R, error) {
	var zero R
	b, err := ReadFrame(c.r)
	if err != nil {
		return zero, err
	}
	m := c.new()
	if err := proto.Unmarshal(b, m); err != nil {
		return zero, fmt.Errorf("receive: %w", err)
	}
	return m, nil
}

// Close closes the connection; a Recv in progress returns.
func (c *Conn[S, R]) Close() error { return c.c.Close() }

// ReadFrame reads one frame's bytes from r: io.EOF when r ends before it,
// io.ErrUnexpectedEOF when r ends inside it, ErrFrameTooLarge (wrapped) for
// a length above MaxFrame, which it does not read.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	switch {
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	case err != nil:
		return nil, fmt.Errorf("receive a frame's length: %w", err)
	case n > MaxFrame:
		return nil, fmt.Errorf("receive a frame of %d bytes: %w (at most %d)", n, ErrFrameTooLarge, MaxFrame)
	}
	var b []byte
	if n <= smallFrame {
		b = make([]byte, n)
		_, err = io.ReadFull(r, b)
	} else { // grow with what comes rather than trust a large length
		b, err = io.ReadAll(io.LimitReader(r, int64(n)))
		if err == nil && uint64(len(b)) < n {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("receive a frame of %d bytes: %w", n, err)
	}
	return b, nil
}
