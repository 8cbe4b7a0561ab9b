package broker_test

// The store's output belongs to the MQTT session (outbox.go, sessions.go):
// unacknowledged messages are resent first, DUP and with their packet ids,
// to a connection that resumes the session; queued ones follow; a clean
// start forgets them; the client's Receive Maximum and Maximum Packet Size
// hold; and the store's packet ids never collide with the client's (MQTT 5
// numbers the two directions independently).

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/wire"
)

// persistent makes a raw client's session outlive its connection, with a
// Receive Maximum of recvMax (0: absent).
func persistent(clean bool, recvMax uint16) func(*packets.Connect) {
	return func(c *packets.Connect) {
		c.CleanStart = clean
		expiry := uint32(60)
		c.Properties = &packets.Properties{SessionExpiryInterval: &expiry}
		if recvMax > 0 {
			c.Properties.ReceiveMaximum = &recvMax
		}
	}
}

// tick is a client timestamp for a raw SET.
func tick() string { return hlc.NewClock(randomNode(), nil).Tick().String() }

// nextPublish reads until a PUBLISH, skipping the PUBACKs of the client's
// own requests.
func (r *rawConn) nextPublish() *packets.Publish {
	r.t.Helper()
	for {
		cp := r.read()
		switch p := cp.Content.(type) {
		case *packets.Publish:
			return p
		case *packets.Puback:
		default:
			r.t.Fatalf("raw: got %s, want PUBLISH", cp.PacketType())
		}
	}
}

// noPublishBeforePong fails if a PUBLISH arrives before the answer to a
// PINGREQ sent now: a message the broker had no right to send yet would
// have been written by then (it has no reason to wait).
func (r *rawConn) noPublishBeforePong(why string) {
	r.t.Helper()
	r.write(packets.NewControlPacket(packets.PINGREQ))
	for {
		cp := r.read()
		switch p := cp.Content.(type) {
		case *packets.Pingresp:
			return
		case *packets.Publish:
			r.t.Fatalf("%s: got PUBLISH %q id %d", why, p.Payload, p.PacketID)
		}
	}
}

// startSession connects a raw client with a clean, persistent session and
// Receive Maximum 1, subscribed to its response topic.
func startSession(t *testing.T, b *broker.Broker, id string) (*rawConn, string) {
	t.Helper()
	rt := wire.ResponseTopic(id)
	r, _ := connectRawWith(t, b, id, persistent(true, 1))
	r.subscribe(rt)
	return r, rt
}

// dropConnection closes r's socket without DISCONNECT and waits until the
// broker has seen it (conns connections left).
func dropConnection(t *testing.T, b *broker.Broker, r *rawConn, conns int64) {
	t.Helper()
	_ = r.nc.Close()
	testutil.WaitFor(t, "the broker to see the connection end", func() bool { return b.Stats().Connections == conns })
}

func TestResumedSessionGetsUnacknowledgedRepliesFirst(t *testing.T) {
	b := brokertest.Start(t)
	const id = "resumer"
	r1, rt := startSession(t, b, id)
	corrs := [][]byte{newCorr(), newCorr(), newCorr()}
	for i, c := range corrs {
		r1.write(rawRequest(uint16(10+i), rt, c, tick(), false, "SET", fmt.Sprintf("k%d", i), "v"))
	}
	first := r1.nextPublish()
	if !bytes.Equal(first.Properties.CorrelationData, corrs[0]) || first.Duplicate {
		t.Fatalf("first reply: correlation %x dup %v, want the first request's, not DUP", first.Properties.CorrelationData, first.Duplicate)
	}
	r1.noPublishBeforePong("Receive Maximum 1, nothing acknowledged")
	dropConnection(t, b, r1, 0)

	r2, ack := connectRawWith(t, b, id, persistent(false, 1))
	if !ack.SessionPresent {
		t.Fatal("CONNACK: session not present")
	}
	again := r2.nextPublish()
	if !again.Duplicate || again.PacketID != first.PacketID || !bytes.Equal(again.Properties.CorrelationData, corrs[0]) || string(again.Payload) != "+OK\r\n" {
		t.Fatalf("first message on the resumed session: dup %v id %d (was %d) correlation %x payload %q; want the unacknowledged reply again",
			again.Duplicate, again.PacketID, first.PacketID, again.Properties.CorrelationData, again.Payload)
	}
	r2.noPublishBeforePong("resumed with Receive Maximum 1, the resent reply unacknowledged")
	r2.ack(again.PacketID)
	for i, c := range corrs[1:] {
		p := r2.nextPublish()
		if p.Duplicate || !bytes.Equal(p.Properties.CorrelationData, c) || p.PacketID == 0 {
			t.Fatalf("queued reply %d: dup %v correlation %x, want request %d's, first sent", i+1, p.Duplicate, p.Properties.CorrelationData, i+1)
		}
		r2.noPublishBeforePong("Receive Maximum 1")
		r2.ack(p.PacketID)
	}
}

func TestCleanStartForgetsTheSessionsReplies(t *testing.T) {
	b := brokertest.Start(t)
	const id = "forgetful"
	r1, rt := startSession(t, b, id)
	r1.write(rawRequest(10, rt, newCorr(), tick(), false, "SET", "a", "1"))
	r1.write(rawRequest(11, rt, newCorr(), tick(), false, "SET", "b", "2"))
	r1.nextPublish() // unacknowledged; the second waits behind it
	dropConnection(t, b, r1, 0)

	r2, ack := connectRawWith(t, b, id, persistent(true, 1))
	if ack.SessionPresent {
		t.Fatal("CONNACK of a clean start: session present")
	}
	r2.subscribe(rt)
	corr := newCorr()
	r2.write(rawRequest(12, rt, corr, "", false, "GET", "a"))
	if p := r2.nextPublish(); !bytes.Equal(p.Properties.CorrelationData, corr) {
		t.Fatalf("after a clean start got %q (correlation %x): a reply of the old session", p.Payload, p.Properties.CorrelationData)
	}
}

// A request or a subscription may use the packet id of a reply the client
// has not acknowledged yet: MQTT 5 §2.2.1 numbers each direction on its
// own. mochi refused such a SUBSCRIBE (0x91) and deleted the reply's
// record on such a PUBLISH while the store shared its inflight store.
func TestClientPacketIDsIndependentOfTheStores(t *testing.T) {
	b := brokertest.Start(t)
	const id = "same-ids"
	rt := wire.ResponseTopic(id)
	r, _ := connectRawWith(t, b, id, func(*packets.Connect) {})
	r.subscribe(rt)
	r.write(rawRequest(7, rt, newCorr(), tick(), false, "SET", "k", "v"))
	reply := r.nextPublish() // not acknowledged
	sub := packets.NewControlPacket(packets.SUBSCRIBE)
	sub.Content.(*packets.Subscribe).PacketID = reply.PacketID
	sub.Content.(*packets.Subscribe).Subscriptions = []packets.SubOptions{{Topic: "other/topic", QoS: 1}}
	r.write(sub)
	for {
		cp := r.read()
		if sa, ok := cp.Content.(*packets.Suback); ok {
			if sa.PacketID != reply.PacketID || sa.Reasons[0] != 1 {
				t.Fatalf("SUBACK id %d reasons %v, want id %d granted QoS 1", sa.PacketID, sa.Reasons, reply.PacketID)
			}
			break
		}
	}
	corr := newCorr()
	r.write(rawRequest(reply.PacketID, rt, corr, "", false, "GET", "k"))
	got := r.nextPublish()
	if !bytes.Equal(got.Properties.CorrelationData, corr) || string(got.Payload) != "$1\r\nv\r\n" {
		t.Fatalf("request with the reply's id: got %q", got.Payload)
	}
	if got.PacketID == reply.PacketID {
		t.Fatalf("the store gave id %d to a reply while its earlier reply with that id is unacknowledged", got.PacketID)
	}
}

// A reply larger than the client's Maximum Packet Size is dropped and
// counted (MQTT-3.1.2-25), not resent on a resumed session, and the
// replies after it flow.
func TestReplyLargerThanTheClientTakesIsDropped(t *testing.T) {
	b := brokertest.Start(t)
	writer := dial(t, b)
	expectPayload(t, writer.call("SET", "big", string(bytes.Repeat([]byte("x"), 4096))), "+OK\r\n")
	const id = "small-packets"
	rt := wire.ResponseTopic(id)
	small := func(clean bool) func(*packets.Connect) {
		return func(c *packets.Connect) {
			persistent(clean, 0)(c)
			limit := uint32(1024)
			c.Properties.MaximumPacketSize = &limit
		}
	}
	r1, _ := connectRawWith(t, b, id, small(true))
	r1.subscribe(rt)
	r1.write(rawRequest(10, rt, newCorr(), "", false, "GET", "big"))
	corr := newCorr()
	r1.write(rawRequest(11, rt, corr, "", false, "GET", "none"))
	p := r1.nextPublish()
	if !bytes.Equal(p.Properties.CorrelationData, corr) {
		t.Fatalf("got %q, want the reply to the second request only", p.Payload)
	}
	r1.ack(p.PacketID)
	testutil.WaitFor(t, "the dropped reply to be counted", func() bool { return b.Stats().NotifyDropped == 1 })
	dropConnection(t, b, r1, 1)
	r2, _ := connectRawWith(t, b, id, small(false))
	r2.noPublishBeforePong("resumed session after a dropped reply")
}

// A reply queued for a session while no connection holds it is not
// delivered once its Message Expiry has passed (MQTT-3.3.2-5); a reply
// whose delivery had started is resent whatever its age.
func TestQueuedReplyExpiresWhileAway(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	const id = "away"
	r1, rt := startSession(t, b, id)
	expiring := func(id uint16, corr []byte, key string) *packets.ControlPacket {
		cp := rawRequest(id, rt, corr, hlcAt(clock, 0, 0, "n1"), false, "SET", key, "v")
		expiry := uint32(5)
		cp.Content.(*packets.Publish).Properties.MessageExpiry = &expiry
		return cp
	}
	first, second := newCorr(), newCorr()
	r1.write(expiring(10, first, "a"))
	r1.write(expiring(11, second, "b"))
	sent := r1.nextPublish() // Receive Maximum 1: the second reply waits
	if !bytes.Equal(sent.Properties.CorrelationData, first) {
		t.Fatalf("first reply: correlation %x", sent.Properties.CorrelationData)
	}
	dropConnection(t, b, r1, 0)
	clock.Advance(6 * time.Second)

	r2, _ := connectRawWith(t, b, id, persistent(false, 1))
	again := r2.nextPublish()
	if !again.Duplicate || !bytes.Equal(again.Properties.CorrelationData, first) {
		t.Fatalf("resumed: dup %v correlation %x, want the first reply again", again.Duplicate, again.Properties.CorrelationData)
	}
	r2.ack(again.PacketID)
	r2.noPublishBeforePong("the second reply expired while the session had no connection")
	if n := b.Stats().NotifyDropped; n != 1 {
		t.Fatalf("%d messages counted as not delivered, want the expired reply", n)
	}
}
