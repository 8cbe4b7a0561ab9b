package broker_test

// A small state store test client on raw paho: it publishes requests
// byte-exactly with chosen properties and routes responses by correlation
// data. By default it behaves like the Go SDK (response topic
// clients/<HEX(id)>/.../response subscribed QoS 1 with No-Local, no
// subscription to the notify topic); withNotifySub makes it behave like the
// Rust SDK (subscribed to clients/statestore/.../<HEX(id)>/command/notify/+).

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// wait bounds every wait-on-condition in these tests (never a threshold).
const wait = 10 * time.Second

var clientSeq atomic.Int64

type clientConfig struct {
	id             string
	username       string
	password       string
	sessionExpiry  *uint32
	problemInfoOff bool // CONNECT properties with Request Problem Information = 0
	notifySub      bool
	notifySubQoS   byte
	respTopic      func(id string) string // default: the Go SDK's, wire.ResponseTopic
	dialer         func(addr string) (net.Conn, error)
}

type clientOpt func(*clientConfig)

func withID(id string) clientOpt { return func(c *clientConfig) { c.id = id } }
func withNotifySub(qos byte) clientOpt {
	return func(c *clientConfig) { c.notifySub, c.notifySubQoS = true, qos }
}
func withCredentials(user, pw string) clientOpt {
	return func(c *clientConfig) { c.username, c.password = user, pw }
}

// withResponseTopic makes the client use another SDK's response topic shape.
func withResponseTopic(shape func(id string) string) clientOpt {
	return func(c *clientConfig) { c.respTopic = shape }
}

// withProblemInfoOff sends CONNECT properties with a session expiry and
// Request Problem Information = 0 (what autopaho does whenever
// SessionExpiryInterval != 0).
func withProblemInfoOff(sessionExpiry uint32) clientOpt {
	return func(c *clientConfig) { c.problemInfoOff, c.sessionExpiry = true, &sessionExpiry }
}

// note is a received NOTIFY.
type note struct {
	key   []byte
	op    string
	value []byte
	ts    string
	pub   *paho.Publish
}

type client struct {
	t         testing.TB
	id        string
	respTopic string
	pc        *paho.Client
	clock     *hlc.Clock
	notes     chan note
	stray     chan *paho.Publish // publishes nobody waited for
	serverDis chan *paho.Disconnect

	mu      sync.Mutex
	pending map[string]chan *paho.Publish
}

// dial connects a client to b; it fails the test on error and disconnects
// in Cleanup.
func dial(t testing.TB, b *broker.Broker, opts ...clientOpt) *client {
	t.Helper()
	c, err := tryDial(t, b.Addr(), opts...)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return c
}

func tryDial(t testing.TB, addr string, opts ...clientOpt) (*client, error) {
	t.Helper()
	cfg := clientConfig{id: fmt.Sprintf("client-%d", clientSeq.Add(1)), notifySubQoS: 1}
	for _, o := range opts {
		o(&cfg)
	}
	var nc net.Conn
	var err error
	if cfg.dialer != nil {
		nc, err = cfg.dialer(addr)
	} else {
		nc, err = net.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	c := &client{
		t:         t,
		id:        cfg.id,
		respTopic: wire.ResponseTopic(cfg.id),
		clock:     hlc.NewClock(randomNode(), nil),
		notes:     make(chan note, 4096),
		stray:     make(chan *paho.Publish, 4096),
		serverDis: make(chan *paho.Disconnect, 1),
		pending:   make(map[string]chan *paho.Publish),
	}
	if cfg.respTopic != nil {
		c.respTopic = cfg.respTopic(cfg.id)
	}
	c.pc = paho.NewClient(paho.ClientConfig{
		Conn:              nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){c.route},
		OnServerDisconnect: func(d *paho.Disconnect) {
			select {
			case c.serverDis <- d:
			default:
			}
		},
	})
	cp := &paho.Connect{ClientID: cfg.id, KeepAlive: 30, CleanStart: true}
	if cfg.username != "" {
		cp.Username, cp.UsernameFlag = cfg.username, true
		cp.Password, cp.PasswordFlag = []byte(cfg.password), true
	}
	if cfg.sessionExpiry != nil {
		cp.Properties = &paho.ConnectProperties{SessionExpiryInterval: cfg.sessionExpiry, RequestProblemInfo: !cfg.problemInfoOff}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.pc.Connect(ctx, cp); err != nil {
		return nil, err
	}
	t.Cleanup(c.close)
	subs := []paho.SubscribeOptions{{Topic: c.respTopic, QoS: 1, NoLocal: true}}
	if cfg.notifySub {
		subs = append(subs, paho.SubscribeOptions{Topic: wire.NotifyFilter(cfg.id), QoS: cfg.notifySubQoS})
	}
	if _, err := c.pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs}); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return c, nil
}

func (c *client) close() {
	_ = c.pc.Disconnect(&paho.Disconnect{ReasonCode: 0})
}

func randomNode() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func newCorr() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return b
}

// route runs on paho's single dispatch goroutine and never blocks.
func (c *client) route(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	if key, ok := wire.ParseNotifyTopic(c.id, p.Topic); ok {
		n := note{key: key, pub: p}
		if p.Properties != nil {
			n.ts = p.Properties.User.Get(wire.PropTimestamp)
		}
		if parsed, err := resp.ParseNotify(p.Payload); err == nil {
			n.op, n.value = parsed.Op, parsed.Value
		}
		select {
		case c.notes <- n:
		default:
			c.t.Errorf("client %s: notification buffer full", c.id)
		}
		return true, nil
	}
	if p.Topic == c.respTopic && p.Properties != nil {
		c.mu.Lock()
		ch := c.pending[string(p.Properties.CorrelationData)]
		c.mu.Unlock()
		if ch != nil {
			select {
			case ch <- p:
				return true, nil
			default:
			}
		}
	}
	select {
	case c.stray <- p:
	default:
	}
	return true, nil
}

// sdkProps returns the request properties every SDK sends (§2).
func (c *client) sdkProps(corr []byte) *paho.PublishProperties {
	ts := c.clock.Tick()
	expiry := uint32(10)
	pfi := byte(0)
	p := &paho.PublishProperties{
		CorrelationData: corr,
		ResponseTopic:   c.respTopic,
		ContentType:     wire.ContentType,
		PayloadFormat:   &pfi,
		MessageExpiry:   &expiry,
	}
	p.User.Add(wire.PropSourceID, c.id)
	p.User.Add(wire.PropTimestamp, ts.String())
	p.User.Add(wire.PropProtVer, wire.ProtocolVersion)
	p.User.Add(wire.PropPartition, c.id)
	p.User.Add(wire.PropHighPriority, "")
	return p
}

// request returns an SDK-shaped request PUBLISH for payload.
func (c *client) request(payload []byte) *paho.Publish {
	return &paho.Publish{QoS: 1, Topic: wire.RequestTopic, Payload: payload, Properties: c.sdkProps(newCorr())}
}

// result is a decoded response.
type result struct {
	pub     *paho.Publish
	payload []byte
	reply   resp.Reply
	ts      string
	hasTS   bool
	status  string
}

func (r result) String() string {
	return fmt.Sprintf("%q __ts=%q", r.payload, r.ts)
}

// exchange publishes p (its correlation data must be set) and waits for the
// response with the same correlation data. It gives up at once when the
// connection drops (paho's Publish would wait out ctx for a PUBACK that
// cannot come).
func (c *client) exchange(ctx context.Context, p *paho.Publish) (result, *paho.PublishResponse, error) {
	corr := string(p.Properties.CorrelationData)
	ch := make(chan *paho.Publish, 1)
	c.mu.Lock()
	c.pending[corr] = ch
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-c.pc.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		<-watched
		c.mu.Lock()
		delete(c.pending, corr)
		c.mu.Unlock()
	}()
	pr, err := c.pc.Publish(ctx, p)
	if err != nil {
		return result{}, pr, fmt.Errorf("publish: %w", err)
	}
	select {
	case <-ctx.Done():
		return result{}, pr, fmt.Errorf("waiting for the response: %w", context.Cause(ctx))
	case rp := <-ch:
		return decode(c, rp), pr, nil
	}
}

func decode(c *client, p *paho.Publish) result {
	r := result{pub: p, payload: p.Payload}
	if p.Properties != nil {
		for _, u := range p.Properties.User {
			switch u.Key {
			case wire.PropTimestamp:
				r.ts, r.hasTS = u.Value, true
			case wire.PropStatus:
				r.status = u.Value
			}
		}
	}
	if rep, err := resp.ParseReply(p.Payload); err == nil {
		r.reply = rep
	}
	if r.hasTS {
		if h, err := hlc.Parse(r.ts); err == nil {
			_ = c.clock.Observe(h)
		}
	}
	return r
}

// do sends a request with SDK properties (plus __ft when ft != "") and
// returns the response; it fails the test on transport errors.
func (c *client) do(ft string, args ...string) result {
	c.t.Helper()
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	p := c.request(resp.EncodeRequest(bargs...))
	if ft != "" {
		p.Properties.User.Add(wire.PropFencingToken, ft)
	}
	return c.mustExchange(p)
}

// call is do without a fencing token.
func (c *client) call(args ...string) result {
	c.t.Helper()
	return c.do("", args...)
}

// tryCall is call for goroutines other than the test's: it returns errors
// instead of failing the test.
func (c *client) tryCall(args ...string) (result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, _, err := c.exchange(ctx, c.request(resp.EncodeRequest(toBytes(args)...)))
	if err == nil && r.status != wire.StatusOK {
		err = fmt.Errorf("__stat %q", r.status)
	}
	if err != nil {
		return r, fmt.Errorf("client %s: %q: %w", c.id, args, err)
	}
	return r, nil
}

func (c *client) mustExchange(p *paho.Publish) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	r, _, err := c.exchange(ctx, p)
	if err != nil {
		c.t.Fatalf("client %s: request %q: %v", c.id, short(p.Payload), err)
	}
	if r.status != wire.StatusOK {
		c.t.Fatalf("client %s: request %q: __stat %q, want 200", c.id, short(p.Payload), r.status)
	}
	return r
}

// set SETs key to value, answered +OK.
func (c *client) set(key, value string) {
	c.t.Helper()
	expectPayload(c.t, c.call("SET", key, value), "+OK\r\n")
}

// keyNotify registers notifications of keys, one KEYNOTIFY each, every one
// answered +OK.
func (c *client) keyNotify(keys ...string) {
	c.t.Helper()
	for _, k := range keys {
		expectPayload(c.t, c.call("KEYNOTIFY", k), "+OK\r\n")
	}
}

// expectPayload fails unless r carries exactly want.
func expectPayload(t testing.TB, r result, want string) {
	t.Helper()
	if string(r.payload) != want {
		t.Fatalf("reply %q, want %q", short(r.payload), short([]byte(want)))
	}
}

// short abbreviates long payloads in failure messages.
func short(b []byte) string {
	if len(b) <= 200 {
		return string(b)
	}
	return fmt.Sprintf("%s...(%d bytes)", b[:200], len(b))
}

// nextNote waits for the next notification.
func (c *client) nextNote() note {
	c.t.Helper()
	return receive(c, c.notes, "notification")
}

// receive waits for the next value on ch, one of c's, and fails the test
// after wait; what names the value in the failure.
func receive[T any](c *client, ch <-chan T, what string) T {
	c.t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		c.t.Fatalf("client %s: no %s within %v", c.id, what, wait)
		var zero T
		return zero
	}
}

// barrier proves that everything the broker sent c before now has been
// received: notifications and responses to one connection are written in
// order, so once a fresh KEYNOTIFY'd sentinel key's notification arrives,
// any earlier notification would have arrived too. It returns the notes
// received before the sentinel.
func (c *client) barrier() []note {
	c.t.Helper()
	key := fmt.Sprintf("barrier-%s-%d", c.id, clientSeq.Add(1))
	expectPayload(c.t, c.call("KEYNOTIFY", key), "+OK\r\n")
	expectPayload(c.t, c.call("SET", key, "x"), "+OK\r\n")
	var before []note
	for {
		n := c.nextNote()
		if string(n.key) == key {
			expectPayload(c.t, c.call("KEYNOTIFY", key, "STOP"), "+OK\r\n")
			expectPayload(c.t, c.call("DEL", key), ":1\r\n")
			return before
		}
		before = append(before, n)
	}
}

// expectNotes fails unless exactly the described notes (key op value)
// arrived before a barrier.
func (c *client) expectNotes(want ...string) []note {
	c.t.Helper()
	got := c.barrier()
	var gs []string
	for _, n := range got {
		s := string(n.key) + " " + n.op
		if n.op == resp.OpSet {
			s += " " + string(n.value)
		}
		gs = append(gs, s)
	}
	if strings.Join(gs, "\n") != strings.Join(want, "\n") {
		c.t.Fatalf("client %s: notifications\n%s\nwant\n%s", c.id, strings.Join(gs, "\n"), strings.Join(want, "\n"))
	}
	return got
}

func contextWait() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), wait)
}

// newFakeClock is a settable Config.Now at the real time, so that the test
// client's own (real) HLC stays within the skew limit.
func newFakeClock() *testutil.Clock { return testutil.NewClock(time.Now()) }

// hlcAt is the HLC text of c's time plus d, with counter and node.
func hlcAt(c *testutil.Clock, d time.Duration, counter int, node string) string {
	return hlc.HLC{Wall: c.Now().UnixMilli() + d.Milliseconds(), Counter: uint64(counter), Node: node}.String()
}

// --- raw MQTT connection, for what paho will not send (DUP, half packets) ---

type rawConn struct {
	t  testing.TB
	nc net.Conn
}

func dialRaw(t testing.TB, b *broker.Broker, id string) *rawConn {
	t.Helper()
	return dialRawKeepAlive(t, b, id, 30)
}

// dialRawKeepAlive is dialRaw with a keepalive of ka seconds: the broker
// closes the connection 1.5 ka after the last packet it read.
func dialRawKeepAlive(t testing.TB, b *broker.Broker, id string, ka uint16) *rawConn {
	t.Helper()
	r, _ := connectRaw(t, b, id, ka)
	return r
}

// connectRaw is dialRawKeepAlive, also returning the CONNACK.
func connectRaw(t testing.TB, b *broker.Broker, id string, ka uint16) (*rawConn, *packets.Connack) {
	t.Helper()
	return connectRawWith(t, b, id, func(c *packets.Connect) { c.KeepAlive = ka })
}

// connectRawWith connects an MQTT 5 raw client with Clean Start, then lets
// edit change the CONNECT; it returns the CONNACK whatever its reason code.
func connectRawWith(t testing.TB, b *broker.Broker, id string, edit func(*packets.Connect)) (*rawConn, *packets.Connack) {
	t.Helper()
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	r := &rawConn{t: t, nc: nc}
	cp := packets.NewControlPacket(packets.CONNECT)
	c := cp.Content.(*packets.Connect)
	c.ClientID, c.CleanStart, c.KeepAlive = id, true, 30
	c.ProtocolName, c.ProtocolVersion = "MQTT", 5
	edit(c)
	r.write(cp)
	ack := r.read()
	if ack.Type != packets.CONNACK {
		t.Fatalf("raw: got %s, want CONNACK", ack.PacketType())
	}
	return r, ack.Content.(*packets.Connack)
}

func (r *rawConn) write(cp *packets.ControlPacket) {
	r.t.Helper()
	if _, err := cp.WriteTo(r.nc); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *rawConn) read() *packets.ControlPacket {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(wait))
	cp, err := packets.ReadPacket(r.nc)
	if err != nil {
		r.t.Fatalf("raw read: %v", err)
	}
	return cp
}

func (r *rawConn) subscribe(filter string) {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.SUBSCRIBE)
	s := cp.Content.(*packets.Subscribe)
	s.PacketID = 1
	s.Subscriptions = []packets.SubOptions{{Topic: filter, QoS: 1}}
	r.write(cp)
	if ack := r.read(); ack.Type != packets.SUBACK {
		r.t.Fatalf("raw: got %s, want SUBACK", ack.PacketType())
	}
}

func rawRequest(id uint16, respTopic string, corr []byte, ts string, dup bool, args ...string) *packets.ControlPacket {
	cp := packets.NewControlPacket(packets.PUBLISH)
	p := cp.Content.(*packets.Publish)
	p.QoS, p.PacketID, p.Duplicate, p.Topic = 1, id, dup, wire.RequestTopic
	bargs := make([][]byte, len(args))
	for i, a := range args {
		bargs[i] = []byte(a)
	}
	p.Payload = resp.EncodeRequest(bargs...)
	p.Properties = &packets.Properties{ResponseTopic: respTopic, CorrelationData: corr}
	if ts != "" {
		p.Properties.User = []packets.User{{Key: wire.PropTimestamp, Value: ts}}
	}
	return cp
}

func (r *rawConn) ack(id uint16) {
	r.t.Helper()
	cp := packets.NewControlPacket(packets.PUBACK)
	cp.Content.(*packets.Puback).PacketID = id
	r.write(cp)
}

func userValue(p *packets.Publish, key string) string {
	if p.Properties == nil {
		return ""
	}
	for _, u := range p.Properties.User {
		if u.Key == key {
			return u.Value
		}
	}
	return ""
}
