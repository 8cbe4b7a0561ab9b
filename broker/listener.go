package broker

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// listener is the broker's own mochi listener (mochi's listeners.Net minus
// its shared-error race, plus what the broker needs to know about each
// connection):
//   - a deadline for CONNECT: a socket that sends nothing is closed after
//     connectTimeout (mochi replaces the deadline with the keep-alive one
//     once CONNECT arrives);
//   - when mochi has finished with a connection (its establish call
//     returned, so the client was removed if its session ended): a session
//     takeover waits on that signal instead of polling;
//   - Close can wait for every connection goroutine, and close the sockets
//     mochi does not know about (no CONNECT yet) or cannot end (a peer that
//     stopped reading blocks mochi's writes).
type listener struct {
	ln             net.Listener
	tlsCfg         *tls.Config // nil: plain TCP
	connectTimeout time.Duration
	log            *slog.Logger

	serving  sync.WaitGroup // Serve and every connection goroutine
	waitOnce sync.Once
	allDone  chan struct{} // closed once serving is done (see wait)

	mu     sync.Mutex
	conns  map[net.Conn]*connLife // by the conn handed to mochi
	closed bool
}

// connLife is one accepted connection.
type connLife struct {
	raw   net.Conn      // the socket
	ended chan struct{} // closed when mochi's establish call has returned
}

const listenerID = "ssrun"

func newListener(ln net.Listener, tlsCfg *tls.Config, connectTimeout time.Duration, log *slog.Logger) *listener {
	l := &listener{ln: ln, tlsCfg: tlsCfg, connectTimeout: connectTimeout, log: log,
		conns: map[net.Conn]*connLife{}, allDone: make(chan struct{})}
	l.serving.Add(1) // Serve's; mochi always calls Serve once the listener is added and the server serves
	return l
}

// ID implements listeners.Listener.
func (l *listener) ID() string { return listenerID }

// Address implements listeners.Listener.
func (l *listener) Address() string { return l.ln.Addr().String() }

// Protocol implements listeners.Listener.
func (l *listener) Protocol() string { return l.ln.Addr().Network() }

// Init implements listeners.Listener.
func (l *listener) Init(*slog.Logger) error { return nil }

// Serve implements listeners.Listener: it accepts until the socket is
// closed, serving each connection in its own goroutine.
func (l *listener) Serve(establish listeners.EstablishFn) {
	defer l.serving.Done()
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Debug("mqtt listener stopped", "err", err)
			}
			return
		}
		var c net.Conn = raw
		if l.tlsCfg != nil {
			c = tls.Server(raw, l.tlsCfg)
		}
		life := &connLife{raw: raw, ended: make(chan struct{})}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = raw.Close()
			continue
		}
		l.conns[c] = life
		l.serving.Add(1)
		l.mu.Unlock()
		if l.connectTimeout > 0 {
			_ = raw.SetReadDeadline(time.Now().Add(l.connectTimeout))
		}
		go func() {
			defer l.serving.Done()
			err := establish(listenerID, c)
			_ = c.Close() // mochi closes it too; this covers every early return
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			close(life.ended)
			if err != nil {
				// Connection ends are client behaviour, and the error can
				// quote the client's packet: debug only.
				l.log.Debug("mqtt connection ended", "remote", raw.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// ended returns a channel closed once mochi has finished with the connection
// c (as found in mqtt.Client.Net.Conn); already closed for an unknown one.
func (l *listener) ended(c net.Conn) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if life := l.conns[c]; life != nil {
		return life.ended
	}
	done := make(chan struct{})
	close(done)
	return done
}

// Close implements listeners.Listener; mochi calls it from Server.Close,
// after the broker has already stopped accepting and ended every connection.
func (l *listener) Close(closeClients listeners.CloseFn) {
	l.stopAccepting()
	closeClients(listenerID)
}

// stopAccepting closes the listening socket; connections already accepted
// go on.
func (l *listener) stopAccepting() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	err := l.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// closeAll closes every accepted socket, ending its connection goroutine.
func (l *listener) closeAll() {
	l.mu.Lock()
	raws := make([]net.Conn, 0, len(l.conns))
	for _, life := range l.conns {
		raws = append(raws, life.raw)
	}
	l.mu.Unlock()
	for _, c := range raws {
		_ = c.Close()
	}
}

// wait waits for Serve and every connection goroutine to return, at most d
// (d <= 0: no bound); it reports whether they did. Connections are only
// added from Serve, which is itself counted, so waiting while it runs is
// safe.
func (l *listener) wait(d time.Duration) bool {
	l.waitOnce.Do(func() {
		go func() { l.serving.Wait(); close(l.allDone) }()
	})
	if d <= 0 {
		<-l.allDone
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.allDone:
		return true
	case <-t.C:
		return false
	}
}

// notServed undoes the count of a Serve that mochi will never call (the
// server failed to start).
func (l *listener) notServed() { l.serving.Done() }
