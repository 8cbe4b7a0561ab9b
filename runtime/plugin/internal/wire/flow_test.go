package wire

import (
	"context"
	"encoding/binary"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// TestStaticWindowSendsNoPings exchanges 200 small messages each way on a
// session stream, as an event and its host calls do, and counts the HTTP/2
// frames either end writes meanwhile: with DialOptions and ServerOptions,
// only the messages' DATA frames (no PING, no WINDOW_UPDATE). gRPC's
// defaults (what both ends used before) are run first, to show that the
// count sees their BDP pings.
func TestStaticWindowSendsNoPings(t *testing.T) {
	const n = 200
	def := exchangeFrames(t, n, nil, nil)
	if def[framePing] == 0 {
		t.Fatalf("gRPC defaults: %d messages each way wrote no PING frame (%v); the count does not see them", n, def)
	}
	got := exchangeFrames(t, n, DialOptions(), ServerOptions())
	if got[framePing] != 0 || got[frameWindowUpdate] != 0 || got[frameData] != 2*n {
		t.Errorf("static windows: %d messages each way wrote %v, want %d DATA frames and nothing else", n, got, 2*n)
	}
	t.Logf("frames written for %d messages each way: gRPC defaults %v, static windows %v", n, def, got)
}

// HTTP/2 frame types (RFC 9113, section 6).
const (
	frameData         = 0x0
	framePing         = 0x6
	frameWindowUpdate = 0x8
)

// echoRule answers every message of a session with one message.
type echoRule struct {
	pb.UnimplementedRuleServer
}

func (echoRule) Session(stream pb.Rule_SessionServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			return nil
		}
		if err := stream.Send(&pb.FromPlugin{Msg: &pb.FromPlugin_Done{Done: &pb.SessionDone{Seq: 1}}}); err != nil {
			return err
		}
	}
}

// exchangeFrames serves echoRule on a unix socket with srv, dials it with
// dial, sends n messages one at a time on one session, each after the
// answer to the one before, and returns how many frames of each type both
// ends wrote from the first message's answer to the last's (the
// connection's setup left out).
func exchangeFrames(t *testing.T, n int, dial []grpc.DialOption, srv []grpc.ServerOption) map[byte]int {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	var rec frameRecorder
	g := grpc.NewServer(srv...)
	pb.RegisterRuleServer(g, echoRule{})
	var served sync.WaitGroup
	served.Go(func() { _ = g.Serve(recordingListener{l, &rec}) })
	defer func() { g.Stop(); served.Wait() }()
	conn, err := grpc.NewClient("passthrough:///"+l.Addr().String(), append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", addr)
			if err != nil {
				return nil, err
			}
			return &recordingConn{Conn: c, rec: &rec, preface: true}, nil
		}),
	}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := pb.NewRuleClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ev := &pb.ToPlugin{Msg: &pb.ToPlugin_Event{Event: &pb.SessionEvent{Seq: 1, Event: &pb.Event{Key: []byte("k"), Value: []byte("v")}}}}
	roundTrip := func() {
		if err := stream.Send(ev); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip()
	rec.reset()
	for range n {
		roundTrip()
	}
	return rec.counts()
}

// frameRecorder counts the HTTP/2 frames written on the connections of
// recordingConn, by type.
type frameRecorder struct {
	mu     sync.Mutex
	frames map[byte]int
}

func (r *frameRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.frames = map[byte]int{}
}

func (r *frameRecorder) counts() map[byte]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[byte]int, len(r.frames))
	for k, v := range r.frames {
		m[k] = v
	}
	return m
}

// recordingConn parses the HTTP/2 frames written on a connection (after the
// client's preface, if preface) into its recorder.
type recordingConn struct {
	net.Conn
	rec     *frameRecorder
	preface bool   // the client's 24-byte preface still to skip
	buf     []byte // written bytes not yet parsed into a whole frame
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.rec.mu.Lock()
	c.buf = append(c.buf, p...)
	if c.preface && len(c.buf) >= 24 {
		c.buf, c.preface = c.buf[24:], false
	}
	for !c.preface && len(c.buf) >= 9 {
		size := 9 + int(binary.BigEndian.Uint32(append([]byte{0}, c.buf[:3]...)))
		if len(c.buf) < size {
			break
		}
		if c.rec.frames != nil {
			c.rec.frames[c.buf[3]]++
		}
		c.buf = c.buf[size:]
	}
	c.rec.mu.Unlock()
	return c.Conn.Write(p)
}

// recordingListener records the frames written on the connections it
// accepts.
type recordingListener struct {
	net.Listener
	rec *frameRecorder
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, rec: l.rec}, nil
}
