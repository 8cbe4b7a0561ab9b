package broker_test

// sdkClient is a raw MQTT 5 state store client that behaves like the Azure
// IoT Operations Go SDK (mqtt.NewSessionClient + statestore.New, default
// options) wherever the broker can tell the difference, and pushes the
// freedoms MQTT gives a client to their limit:
//
//   - CONNECT: Session Expiry 0xFFFFFFFF, Receive Maximum 65,535, Request
//     Problem Information 1; SUBSCRIBE to the response topic QoS 1 No-Local;
//   - requests: QoS 1 with Message Expiry 10 s, 16 bytes of correlation data
//     and the SDK's user properties;
//   - manual acknowledgement: a response is acknowledged after it was
//     handled, and later than that: after the caller's next request went
//     out, with the acknowledgements that piled up sent in random order (the
//     SDK's paho sends them in order; MQTT lets a client do either);
//   - packet ids: one request in two takes the next free id, as the SDK's
//     paho does, while the store's last responses are still unacknowledged;
//     the other reuses the id of a response still unacknowledged, when one
//     is free on the client's side (MQTT 5 §2.2.1 numbers the two directions
//     independently), so the store's in-flight responses and the client's
//     requests collide all the time.
//
// It counts what the soak (soak_test.go) judges: calls answered, calls that
// timed out, duplicate or stray responses, failed PUBACKs and broker
// DISCONNECTs.

import (
	"bufio"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// sdkCallTimeout is the SDK's default command timeout (and the requests'
// Message Expiry).
const sdkCallTimeout = 10 * time.Second

// sdkCounts is what a soak reports.
type sdkCounts struct {
	calls      atomic.Int64 // answered
	timeouts   atomic.Int64 // no response within sdkCallTimeout
	wrong      atomic.Int64 // answered with an unexpected payload
	duplicates atomic.Int64 // a second response to one request
	strays     atomic.Int64 // a response nobody asked for
	reusedIDs  atomic.Int64 // a response sent with an id still unacknowledged
	pubackFail atomic.Int64 // a request's PUBACK with a failure reason code
	collisions atomic.Int64 // requests sent with the id of an unacknowledged response
}

func (c *sdkCounts) String() string {
	return fmt.Sprintf("%d answered, %d timed out, %d wrong, %d duplicate, %d stray, %d response ids reused while unacknowledged, %d failed PUBACKs (%d requests reused a response's id)",
		c.calls.Load(), c.timeouts.Load(), c.wrong.Load(), c.duplicates.Load(), c.strays.Load(), c.reusedIDs.Load(), c.pubackFail.Load(), c.collisions.Load())
}

// sdkCall is one request waiting for its response.
type sdkCall struct {
	resp     chan *packets.Publish // buffer 1
	answered bool
}

type sdkClient struct {
	t         testing.TB
	id        string
	respTopic string
	nc        net.Conn
	clock     *hlc.Clock
	counts    *sdkCounts
	readDone  chan struct{}

	wmu   sync.Mutex     // one packet written at a time
	ackWG sync.WaitGroup // acknowledging goroutines

	mu        sync.Mutex
	calls     map[string]*sdkCall // correlation data -> call
	sent      map[uint16]bool     // request ids waiting for their PUBACK
	nextID    uint16
	unacked   map[uint16]bool // response ids received, not yet acknowledged
	handled   []uint16        // of those, the ones handled: acknowledged at the next flush
	readErr   error
	disconnct *packets.Disconnect
}

// sdkOpt configures dialSDK.
type sdkOpt func(*packets.Connect)

func sdkCredentials(user, pw string) sdkOpt {
	return func(c *packets.Connect) {
		c.Username, c.UsernameFlag = user, true
		c.Password, c.PasswordFlag = []byte(pw), true
	}
}

// dialSDK connects an SDK-like client to addr and subscribes it to its
// response topic. It closes the connection in Cleanup.
func dialSDK(t testing.TB, addr string, counts *sdkCounts, opts ...sdkOpt) *sdkClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("sdk client: dial: %v", err)
	}
	id := fmt.Sprintf("sdk-%d", clientSeq.Add(1))
	c := &sdkClient{
		t: t, id: id, respTopic: wire.ResponseTopic(id), nc: nc,
		clock: hlc.NewClock(randomNode(), nil), counts: counts, readDone: make(chan struct{}),
		calls: map[string]*sdkCall{}, sent: map[uint16]bool{}, unacked: map[uint16]bool{},
	}
	t.Cleanup(func() {
		_ = nc.Close()
		<-c.readDone
		c.ackWG.Wait()
	})
	cp := packets.NewControlPacket(packets.CONNECT)
	con := cp.Content.(*packets.Connect)
	con.ProtocolName, con.ProtocolVersion = "MQTT", 5
	con.ClientID, con.CleanStart, con.KeepAlive = id, true, 60
	expiry, recvMax := uint32(math.MaxUint32), uint16(math.MaxUint16)
	con.Properties = &packets.Properties{SessionExpiryInterval: &expiry, ReceiveMaximum: &recvMax, RequestProblemInfo: func() *byte { b := byte(1); return &b }()}
	for _, o := range opts {
		o(con)
	}
	br := bufio.NewReader(nc)
	c.write(cp)
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	ack, err := packets.ReadPacket(br)
	if err != nil || ack.Type != packets.CONNACK || ack.Content.(*packets.Connack).ReasonCode != 0 {
		t.Fatalf("sdk client %s: connect: %v %v", id, ack, err)
	}
	sub := packets.NewControlPacket(packets.SUBSCRIBE)
	s := sub.Content.(*packets.Subscribe)
	s.PacketID = c.takeID(false)
	s.Subscriptions = []packets.SubOptions{{Topic: c.respTopic, QoS: 1, NoLocal: true}}
	c.write(sub)
	sa, err := packets.ReadPacket(br)
	if err != nil || sa.Type != packets.SUBACK || sa.Content.(*packets.Suback).Reasons[0] != 1 {
		t.Fatalf("sdk client %s: subscribe: %v %v", id, sa, err)
	}
	c.release(s.PacketID)
	_ = nc.SetReadDeadline(time.Time{})
	go c.read(br)
	return c
}

func (c *sdkClient) write(cp *packets.ControlPacket) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = cp.WriteTo(c.nc) // a failed write shows as a timeout or a read error
}

// takeID returns a packet id for a request or subscription: with collide,
// one time in two, the id of a response still unacknowledged if one is free
// on this side.
func (c *sdkClient) takeID(collide bool) uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if collide && mrand.IntN(2) == 0 {
		for id := range c.unacked {
			if !c.sent[id] {
				c.sent[id] = true
				c.counts.collisions.Add(1)
				return id
			}
		}
	}
	for {
		c.nextID++
		if c.nextID != 0 && !c.sent[c.nextID] {
			c.sent[c.nextID] = true
			return c.nextID
		}
	}
}

func (c *sdkClient) release(id uint16) {
	c.mu.Lock()
	delete(c.sent, id)
	c.mu.Unlock()
}

// read handles every packet from the broker until the connection ends.
func (c *sdkClient) read(br *bufio.Reader) {
	defer close(c.readDone)
	for {
		cp, err := packets.ReadPacket(br)
		if err != nil {
			c.mu.Lock()
			c.readErr = err
			c.mu.Unlock()
			return
		}
		switch p := cp.Content.(type) {
		case *packets.Puback:
			if p.ReasonCode >= 0x80 {
				c.counts.pubackFail.Add(1)
			}
			c.release(p.PacketID)
		case *packets.Publish:
			c.response(p)
		case *packets.Disconnect:
			c.mu.Lock()
			c.disconnct = p
			c.mu.Unlock()
		}
	}
}

// response routes a PUBLISH to its call; it is acknowledged once handled.
func (c *sdkClient) response(p *packets.Publish) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.QoS > 0 {
		if c.unacked[p.PacketID] {
			c.counts.reusedIDs.Add(1)
		}
		c.unacked[p.PacketID] = true
	}
	var call *sdkCall
	if p.Topic == c.respTopic && p.Properties != nil {
		call = c.calls[string(p.Properties.CorrelationData)]
	}
	switch {
	case call == nil:
		c.counts.strays.Add(1)
		c.handled = append(c.handled, p.PacketID)
	case call.answered:
		c.counts.duplicates.Add(1)
		c.handled = append(c.handled, p.PacketID)
	default:
		call.answered = true
		call.resp <- p
	}
}

// flushAcks acknowledges every handled response, in random order.
func (c *sdkClient) flushAcks() {
	c.mu.Lock()
	ids := c.handled
	c.handled = nil
	for _, id := range ids {
		delete(c.unacked, id)
	}
	c.mu.Unlock()
	mrand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		cp := packets.NewControlPacket(packets.PUBACK)
		cp.Content.(*packets.Puback).PacketID = id
		c.write(cp)
	}
}

// broken reports why the connection ended, or nil.
func (c *sdkClient) broken() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.disconnct != nil {
		return fmt.Errorf("broker sent DISCONNECT 0x%02x", c.disconnct.ReasonCode)
	}
	return c.readErr
}

var errSDKTimeout = errors.New("command invocation timed out")

// set runs SET key value the SDK's way and checks the reply is +OK.
func (c *sdkClient) set(key, value string) error {
	corr := make([]byte, 16)
	_, _ = rand.Read(corr)
	call := &sdkCall{resp: make(chan *packets.Publish, 1)}
	c.mu.Lock()
	c.calls[string(corr)] = call
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.calls, string(corr))
		c.mu.Unlock()
	}()

	cp := packets.NewControlPacket(packets.PUBLISH)
	p := cp.Content.(*packets.Publish)
	p.QoS, p.Topic = 1, wire.RequestTopic
	p.PacketID = c.takeID(true)
	p.Payload = resp.EncodeRequest([]byte("SET"), []byte(key), []byte(value))
	expiry, pfi := uint32(sdkCallTimeout/time.Second), byte(0)
	p.Properties = &packets.Properties{
		CorrelationData: corr, ResponseTopic: c.respTopic, ContentType: wire.ContentType,
		PayloadFormat: &pfi, MessageExpiry: &expiry,
		User: []packets.User{
			{Key: wire.PropSourceID, Value: c.id},
			{Key: wire.PropTimestamp, Value: c.clock.Tick().String()},
			{Key: wire.PropProtVer, Value: wire.ProtocolVersion},
			{Key: wire.PropPartition, Value: c.id},
		},
	}
	c.write(cp)
	// The responses handled before this request are acknowledged only now,
	// by another goroutine, as the SDK's invoker does: the request above may
	// have taken the id of one of them.
	// They pile up to a few (1 to 8) first, so that the store has
	// responses in flight most of the time.
	c.mu.Lock()
	due := len(c.handled) >= 1+mrand.IntN(8)
	c.mu.Unlock()
	if due {
		c.ackWG.Add(1)
		go func() {
			defer c.ackWG.Done()
			c.flushAcks()
		}()
	}

	t := time.NewTimer(sdkCallTimeout)
	defer t.Stop()
	select {
	case r := <-call.resp:
		c.mu.Lock()
		c.handled = append(c.handled, r.PacketID)
		c.mu.Unlock()
		if string(r.Payload) != "+OK\r\n" {
			c.counts.wrong.Add(1)
			return fmt.Errorf("SET %s: reply %q", key, r.Payload)
		}
		c.counts.calls.Add(1)
		return nil
	case <-t.C:
		c.counts.timeouts.Add(1)
		if err := c.broken(); err != nil {
			return fmt.Errorf("SET %s: %w (connection: %w)", key, errSDKTimeout, err)
		}
		return fmt.Errorf("SET %s: %w", key, errSDKTimeout)
	case <-c.readDone:
		return fmt.Errorf("SET %s: connection lost: %w", key, c.broken())
	}
}

// settle makes one more call and acknowledges everything: the broker has
// nothing more for the client then (one writer, in order).
func (c *sdkClient) settle() error {
	if err := c.set("settle/"+c.id, "x"); err != nil {
		return err
	}
	c.ackWG.Wait()
	c.flushAcks()
	return nil
}
