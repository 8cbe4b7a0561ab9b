package plugin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// rawConn is the host's end of a raw session channel.
type rawConn = wire.Conn[*pb.ToPlugin, *pb.FromPlugin]

// rawListener is the unix socket a plugin process may carry its session
// over instead of the Session stream (the raw channel, see SessionReady in
// plugin.proto): it saves gRPC's framing and the hand-offs to its writer
// and reader goroutines, a third of a session message's cost. The host
// makes it in a private directory (the process's go-plugin socket
// directory, or the runtime's working directory; both 0700) and sends its
// path and a random token in the Init call, which mTLS protects; it
// accepts the first connection that sends the token, and no other.
type rawListener struct {
	ln    *net.UnixListener
	path  string
	token []byte
	log   *slog.Logger
}

// listenRaw makes a raw channel's socket in dir.
func listenRaw(dir string, log *slog.Logger) (*rawListener, error) {
	var name [8]byte
	token := make([]byte, wire.TokenSize)
	rand.Read(name[:])
	rand.Read(token)
	path := filepath.Join(dir, "session-"+hex.EncodeToString(name[:])+".sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("raw session socket: %w", err)
	}
	return &rawListener{ln: ln, path: path, token: token, log: log}, nil
}

// close closes the socket (and removes its file); accept returns.
func (l *rawListener) close() { _ = l.ln.Close() }

// accept waits for the plugin's connection, until timeout or ctx ends:
// the first one whose first bytes are the token. It closes the others,
// and closes the listener before it returns.
func (l *rawListener) accept(ctx context.Context, timeout time.Duration) (*rawConn, error) {
	defer l.close()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("raw session: %w", err)
	}
	stop := context.AfterFunc(ctx, l.close)
	defer stop()
	deadline := time.Now().Add(timeout)
	if err := l.ln.SetDeadline(deadline); err != nil {
		if ctx.Err() != nil { // ended before the wait began: the listener is closed
			err = ctx.Err()
		}
		return nil, fmt.Errorf("raw session: %w", err)
	}
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("raw session: no connection with the token within %v: %w", timeout, err)
		}
		if l.admit(c, deadline) {
			return wire.NewConn[*pb.ToPlugin](c, func() *pb.FromPlugin { return &pb.FromPlugin{} }), nil
		}
		_ = c.Close()
	}
}

// admit reads c's token by deadline and reports whether it is the right
// one (compared in constant time).
func (l *rawListener) admit(c net.Conn, deadline time.Time) bool {
	got := make([]byte, wire.TokenSize)
	_ = c.SetReadDeadline(deadline)
	_, err := io.ReadFull(c, got)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		l.log.Warn("raw session: connection refused: no token", "socket", l.path, "error", err)
		return false
	case subtle.ConstantTimeCompare(got, l.token) != 1:
		l.log.Warn("raw session: connection refused: wrong token", "socket", l.path)
		return false
	}
	return true
}

// errNoRaw is the error of a plugin that answers SessionReady.raw on a
// session whose Init carried no socket.
var errNoRaw = errors.New("the plugin took a raw session channel it was not offered")
