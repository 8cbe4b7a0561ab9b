package plugin

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/runtime/plugin/internal/guest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/plugintest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// dialWith connects to l's socket and sends token.
func dialWith(t *testing.T, l *rawListener, token []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", l.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(token); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRawWrongToken: the raw channel's socket refuses connections that do
// not send the token (closed, and logged), accepts the first that does,
// carries its messages, and then takes no connection at all.
func TestRawWrongToken(t *testing.T) {
	logs := &testutil.Buffer{}
	l, err := listenRaw(t.TempDir(), slogTo(logs))
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	wrong := bytes.Clone(l.token)
	wrong[len(wrong)-1] ^= 1
	intruder := dialWith(t, l, wrong)
	short := dialWith(t, l, l.token[:wire.TokenSize-1])
	_ = short.(*net.UnixConn).CloseWrite()
	good := dialWith(t, l, l.token)

	c, err := l.accept(context.Background(), testutil.WaitBound)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, refused := range []net.Conn{intruder, short} {
		if n, err := refused.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("a connection with a wrong token: read %d, %v; want it closed (io.EOF)", n, err)
		}
	}
	for _, want := range []string{"connection refused: wrong token", "connection refused: no token"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	plugin := wire.NewConn[*pb.FromPlugin](good, func() *pb.ToPlugin { return &pb.ToPlugin{} })
	up := &pb.FromPlugin{Msg: &pb.FromPlugin_Done{Done: &pb.SessionDone{Seq: 7}}}
	if err := plugin.Send(up); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Recv(); err != nil || !proto.Equal(got, up) {
		t.Fatalf("Recv on the accepted channel: %v, %v; want %v", got, err, up)
	}
	if _, err := net.Dial("unix", l.path); err == nil {
		t.Error("the socket still takes connections after accepting one")
	}
	if _, err := os.Stat(l.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket file is left: %v", err)
	}
}

// TestRawAcceptEnds: accept gives up, with an error saying why, when no
// connection brings the token within its timeout or when its ctx ends.
func TestRawAcceptEnds(t *testing.T) {
	l, err := listenRaw(t.TempDir(), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	dialWith(t, l, make([]byte, wire.TokenSize))
	if _, err := l.accept(context.Background(), 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no connection with the token within 100ms") {
		t.Errorf("accept without the token: %v", err)
	}

	l, err = listenRaw(t.TempDir(), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := l.accept(ctx, time.Hour); errc <- err }()
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("accept after its ctx ended: %v, want context.Canceled", err)
		}
	case <-time.After(testutil.WaitBound):
		t.Fatal("accept still waits after its ctx ended")
	}

	// A ctx that ended before accept began (its listener closed at once):
	// the same error. It said "use of closed network connection" before,
	// which the case above met when its goroutine started late.
	l, err = listenRaw(t.TempDir(), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.accept(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("accept with its ctx already ended: %v, want context.Canceled", err)
	}
}

// TestRawFallback: a plugin that cannot reach the raw channel it was
// offered (here the socket is gone before it dials) says so on its stderr
// and keeps its session on the gRPC stream, where events and host calls
// work as before; the host takes that SessionReady as it takes a plugin's
// that predates the raw channel.
func TestRawFallback(t *testing.T) {
	h := abitest.New()
	stderr := &testutil.Buffer{}
	s, _, _ := inProcessScriptOf(t, func() inProcessRule {
		rule := guest.New(plugintest.Init, plugintest.Handle)
		rule.Stderr = stderr
		return rule
	}, h, abi.Limits{CallTimeout: 10 * time.Second}, func(r *Runtime) { r.rawOffered = (*rawListener).close })
	s.mu.Lock()
	ss := s.cur.sess
	s.mu.Unlock()
	if ss == nil {
		t.Fatal("no session")
	}
	if raw := ss.rawc != nil; raw {
		t.Fatal("the session is on a raw channel whose socket was closed")
	}
	seqs(t, s, h, 1, 3)
	if want := "session on its gRPC stream: raw session: dial unix"; !strings.Contains(stderr.String(), want) {
		t.Errorf("the plugin's stderr lacks %q:\n%s", want, stderr)
	}
}

// TestRawWithoutWake: a plugin that reads the raw channel with a goroutine
// of its own (one built before InitRequest.session_wake; here, the SDK
// not offered it) works with a host that reads the channel only while an
// event waits: events, concurrent calls, a cancellation sent on the raw
// channel, and writes at the end.
func TestRawWithoutWake(t *testing.T) {
	h := abitest.New()
	s, _, _ := inProcessScript(t, h, abi.Limits{CallTimeout: 20 * time.Second}, func(r *Runtime) { r.noWake = true })
	_, ss := current(t, s)
	if ss == nil || ss.rawc == nil || ss.wake {
		t.Fatalf("session %p: want one on the raw channel, without wake", ss)
	}
	seqs(t, s, h, 1, 2)
	if got, want := run(t, s, h, command("concurrent", "8")), `concurrent status=OK msg="" ok=8`; got != want {
		t.Errorf("report %s, want %s", got, want)
	}
	cancelHeldEvent(t, s, h)
	if err := s.Handle(context.Background(), command("atend", "a", "1", "-")); err != nil {
		t.Fatal(err)
	}
	if v, _ := h.Value("a"); string(v) != "1" {
		t.Errorf("a = %q, want 1", v)
	}
	seqs(t, s, h, 3, 4)
}
