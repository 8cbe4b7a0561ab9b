package broker_test

// Issue 25, point 10: a request naming the request topic by a topic alias
// is served under authorization too (it was refused, 0x87: the check saw
// the empty topic before the alias was resolved), and a will on the request
// topic, never run and only retained there, refuses the connection.

import (
	"bytes"
	"testing"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/wire"
)

func TestRequestByTopicAlias(t *testing.T) {
	for _, mode := range []string{"open", "authorized"} {
		t.Run(mode, func(t *testing.T) {
			var b *broker.Broker
			edit := func(*packets.Connect) {}
			if mode == "open" {
				b = brokertest.Start(t)
			} else {
				b, _ = authBroker(t, "")
				edit = func(c *packets.Connect) {
					c.Username, c.UsernameFlag, c.Password, c.PasswordFlag = "alice", true, []byte("alice-pw"), true
				}
			}
			const id = "aliaser"
			rt := wire.ResponseTopic(id)
			r, ack := connectRawWith(t, b, id, edit)
			if ack.ReasonCode != 0 || ack.Properties == nil || ack.Properties.TopicAliasMaximum == nil || *ack.Properties.TopicAliasMaximum == 0 {
				t.Fatalf("CONNACK 0x%02x, topic alias maximum %v", ack.ReasonCode, ack.Properties)
			}
			r.subscribe(rt)
			for i, topic := range []string{wire.RequestTopic, ""} { // set the alias, then use it
				corr := newCorr()
				cp := rawRequest(uint16(10+i), rt, corr, tick(), false, "SET", "aliased", "v")
				p := cp.Content.(*packets.Publish)
				p.Topic = topic
				alias := uint16(1)
				p.Properties.TopicAlias = &alias
				r.write(cp)
				var reply *packets.Publish
				for reply == nil {
					switch q := r.read().Content.(type) {
					case *packets.Puback:
						if q.ReasonCode != 0 {
							t.Fatalf("request %d (topic %q, alias 1): PUBACK 0x%02x", i, topic, q.ReasonCode)
						}
					case *packets.Publish:
						reply = q
					}
				}
				if !bytes.Equal(reply.Properties.CorrelationData, corr) || string(reply.Payload) != "+OK\r\n" {
					t.Fatalf("request %d: reply %q", i, reply.Payload)
				}
				r.ack(reply.PacketID)
			}
		})
	}
}

func TestWillOnTheRequestTopicRefused(t *testing.T) {
	will := func(c *packets.Connect) {
		c.WillFlag, c.WillRetain, c.WillQOS = true, true, 1
		c.WillTopic, c.WillMessage = wire.RequestTopic, []byte("*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n")
	}
	open := brokertest.Start(t)
	if rc, _ := connectCode(t, open, "willful", "", "", will); rc != 0x90 {
		t.Fatalf("open broker: CONNACK 0x%02x, want 0x90 (topic name invalid)", rc)
	}
	authorized, _ := authBroker(t, "")
	if rc, _ := connectCode(t, authorized, "willful", "alice", "alice-pw", will); rc != 0x90 {
		t.Fatalf("with authorization: CONNACK 0x%02x, want 0x90", rc)
	}
}
