package protocol

import (
	"context"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/wire"
)

// testLogger discards logs unless SSRUN_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("SSRUN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// scriptServer is a bare mochi broker whose hook hands every state store
// request to a test-supplied handler instead of a store. It records the
// requests and CONNECT packets it sees, exactly as they arrived, which is
// what the property tests inspect. It deliberately has no ProblemInfo fix:
// the client's RequestProblemInfo=true must be enough.
type scriptServer struct {
	t      testing.TB
	srv    *mqtt.Server
	addr   string
	inline *mqtt.Client
	pid    atomic.Uint32

	mu       sync.Mutex
	handler  func(req packets.Packet) []packets.Packet
	requests []packets.Packet
	connects []packets.Packet
	denySub  string // a filter whose SUBSCRIBE is refused
}

type scriptHook struct {
	mqtt.HookBase
	s *scriptServer
}

func (h *scriptHook) ID() string { return "script" }

func (h *scriptHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck || b == mqtt.OnPublish
}

func (h *scriptHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	h.s.mu.Lock()
	h.s.connects = append(h.s.connects, pk.Copy(false))
	h.s.mu.Unlock()
	return true
}

func (h *scriptHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return write || topic != h.s.denySub
}

func (h *scriptHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != wire.RequestTopic {
		return pk, nil
	}
	s := h.s
	s.mu.Lock()
	s.requests = append(s.requests, pk.Copy(true))
	handler := s.handler
	s.mu.Unlock()
	if handler != nil {
		for _, out := range handler(pk) {
			s.inject(out)
		}
	}
	return pk, packets.CodeSuccessIgnore
}

// startScript starts a script server on a random loopback port; it closes on
// test cleanup.
func startScript(t testing.TB, handler func(req packets.Packet) []packets.Packet) *scriptServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{t: t, handler: handler, addr: ln.Addr().String()}
	s.srv = mqtt.New(&mqtt.Options{Logger: slog.New(slog.DiscardHandler), InlineClient: true})
	s.srv.Options.Capabilities.Compatibilities.NoInheritedPropertiesOnAck = true
	if err := s.srv.AddHook(&scriptHook{s: s}, nil); err != nil {
		t.Fatal(err)
	}
	cln := &countingListener{Listener: ln}
	if err := s.srv.AddListener(countedNet{listeners.NewNet("t", cln), cln}); err != nil {
		t.Fatal(err)
	}
	s.inline = s.srv.NewClient(nil, mqtt.LocalListener, "script-inline", true)
	if err := s.srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close(cln) })
	return s
}

// close stops the server. mochi's Server.Close lists the clients with
// Clients.GetByListener, which takes its read lock twice: a connection
// ending in between (Clients.Delete waits for the write lock, which blocks
// the second read lock) deadlocks it, as a client the proxy of a test cut
// does. So (as broker.Close does) stop accepting, disconnect every client
// and wait for every connection's goroutine to return before Server.Close.
func (s *scriptServer) close(ln *countingListener) {
	_ = ln.Close()
	testutil.WaitFor(s.t, "the script server's connections to end", func() bool {
		for _, cl := range s.srv.Clients.GetAll() {
			if !cl.Net.Inline && !cl.Closed() {
				_ = s.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
			}
		}
		return ln.live.Load() == 0
	})
	_ = s.srv.Close()
}

// countingListener counts the connections it accepted whose mochi
// goroutine (establish) has not returned yet.
type countingListener struct {
	net.Listener
	live atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.live.Add(1)
	}
	return c, err
}

// countedNet is mochi's TCP listener whose connections' goroutines are
// counted by ln.
type countedNet struct {
	*listeners.Net
	ln *countingListener
}

func (n countedNet) Serve(establish listeners.EstablishFn) {
	n.Net.Serve(func(id string, c net.Conn) error {
		defer n.ln.live.Add(-1)
		return establish(id, c)
	})
}

func (s *scriptServer) setHandler(h func(req packets.Packet) []packets.Packet) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

func (s *scriptServer) inject(pk packets.Packet) {
	if pk.FixedHeader.Qos > 0 {
		pk.PacketID = uint16(s.pid.Add(1)%65535 + 1)
	}
	if err := s.srv.InjectPacket(s.inline, pk); err != nil {
		s.t.Errorf("inject: %v", err)
	}
}

// push writes pk straight into clientID's session, without any
// subscription, the way the state store delivers notifications (§13.4).
func (s *scriptServer) push(clientID string, pk packets.Packet) {
	cl, ok := s.srv.Clients.Get(clientID)
	if !ok {
		s.t.Fatalf("no client %q", clientID)
	}
	pid, err := cl.NextPacketID()
	if err != nil {
		s.t.Fatal(err)
	}
	pk.PacketID = uint16(pid)
	cl.State.Inflight.Set(pk)
	if err := cl.WritePacket(pk); err != nil {
		s.t.Fatal(err)
	}
}

// waitGone waits until the broker has finished with clientID's dropped
// connection. Reconnecting before that races mochi's session takeover, in
// which the old connection's cleanup can delete the new client from the
// broker (mochi v2.7.9 server.go attachClient vs inheritClientSession): the
// client is then connected but never receives anything.
func (s *scriptServer) waitGone(clientID string) {
	testutil.WaitFor(s.t, "the broker to drop "+clientID, func() bool {
		_, ok := s.srv.Clients.Get(clientID)
		return !ok
	})
}

// refuseSubscribe makes the server refuse a SUBSCRIBE to filter, or none
// when filter is "".
func (s *scriptServer) refuseSubscribe(filter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.denySub = filter
}

func (s *scriptServer) requestLog() []packets.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]packets.Packet(nil), s.requests...)
}

func (s *scriptServer) connectLog() []packets.Packet {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]packets.Packet(nil), s.connects...)
}

// response builds the response PUBLISH to req with payload and the given
// user properties (no __stat is added: pass it).
func response(req packets.Packet, payload string, user ...string) packets.Packet {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   req.Properties.ResponseTopic,
		Payload:     []byte(payload),
		Properties: packets.Properties{
			CorrelationData: req.Properties.CorrelationData,
			ContentType:     wire.ContentType,
		},
	}
	for i := 0; i+1 < len(user); i += 2 {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: user[i], Val: user[i+1]})
	}
	return pk
}

// ok200 answers every request with payload under status 200 and an optional
// version.
func ok200(payload, ts string) func(packets.Packet) []packets.Packet {
	return func(req packets.Packet) []packets.Packet {
		user := []string{wire.PropStatus, "200", wire.PropProtVer, "1.0"}
		if ts != "" {
			user = append(user, wire.PropTimestamp, ts)
		}
		return []packets.Packet{response(req, payload, user...)}
	}
}

// notifyPacket builds a notification PUBLISH for clientID and key.
func notifyPacket(clientID string, key []byte, payload string, user ...string) packets.Packet {
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   wire.NotifyTopic(clientID, key),
		Payload:     []byte(payload),
	}
	for i := 0; i+1 < len(user); i += 2 {
		pk.Properties.User = append(pk.Properties.User, packets.UserProperty{Key: user[i], Val: user[i+1]})
	}
	return pk
}

func userOf(pk packets.Packet, key string) (string, bool) {
	for _, u := range pk.Properties.User {
		if u.Key == key {
			return u.Val, true
		}
	}
	return "", false
}

// newTestClient connects a client to addr with test defaults (fast
// reconnects, a discarding logger) and closes it on cleanup.
func newTestClient(t testing.TB, addr string, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{
		Servers:          []string{addr},
		Logger:           testLogger(),
		ReconnectBackoff: func(n int) time.Duration { return time.Duration(min(n, 1)) * 20 * time.Millisecond },
	}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func connect(t testing.TB, addr string, mod ...func(*Config)) *Client {
	t.Helper()
	c := newTestClient(t, addr, mod...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// nextEvent returns the next event, failing the test after 10 s.
func nextEvent(t testing.TB, c *Client) Event {
	t.Helper()
	select {
	case e, ok := <-c.Events():
		if !ok {
			t.Fatal("events channel closed")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	panic("unreachable")
}

func (c *Client) pendingLen() int {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	return len(c.pending)
}
