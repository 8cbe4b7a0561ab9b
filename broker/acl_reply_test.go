package broker_test

// Issue 25, point 4: a Subscribe grant is not a Read grant. A reply goes to
// its requester only, and the store publishes to a response topic that is
// not the requester's own only if the requester may publish there.

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/resp"
)

// subscribeAllACL: bob may subscribe to everything and read only ops/*;
// alice reads and writes every key. (round-trip: noStrays' key.)
const subscribeAllACL = `
authorizationPolicies:
  rules:
    - principals: {usernames: [alice]}
      brokerResources: [{method: Connect}]
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["*"]}]
    - principals: {usernames: [bob]}
      brokerResources: [{method: Connect}, {method: Subscribe, topics: ["#"]}]
      stateStoreResources: [{method: Read, keyType: Pattern, keys: ["ops/*", round-trip]}]
`

// Before: with Subscribe # and Read on ops/* only, bob received alice's GET
// replies (MQTT 5 and 3.1.1) while his own GET of the key was refused.
func TestReplyGoesToItsRequesterOnly(t *testing.T) {
	b, _ := authBroker(t, subscribeAllACL)
	a := dial(t, b, alice)
	a.set("secret", "TOPSECRET-1")

	spy := dial(t, b, bob)
	if rc := spy.subscribeCode("#"); rc != 1 {
		t.Fatalf("bob subscribing to #: SUBACK 0x%02x", rc)
	}
	expectPayload(t, spy.call("GET", "secret"), "-ERR not authorized\r\n")
	spy3 := subscribe3(t, b.Addr(), "bob-3", "bob", "bob-pw", "#")

	expectPayload(t, a.call("GET", "secret"), "$11\r\nTOPSECRET-1\r\n")
	spy.noStrays()
	spy3.noPublishBeforePong(t)
}

// telemetryACL: alice may subscribe to telemetry/# but publish nowhere;
// bob listens to everything (and reads the key of noStrays' round trip).
const telemetryACL = `
authorizationPolicies:
  rules:
    - principals: {usernames: [alice]}
      brokerResources: [{method: Connect}, {method: Subscribe, topics: ["telemetry/#"]}]
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["*"]}]
    - principals: {usernames: [bob]}
      brokerResources: [{method: Connect}, {method: Subscribe, topics: ["#"]}]
      stateStoreResources: [{method: Read, keyType: String, keys: [round-trip]}]
`

// Before: a request whose response topic was telemetry/thermostat1/temp
// made the store publish a value alice chose to every telemetry subscriber,
// although alice may not publish there.
func TestResponseTopicNeedsPublishUnlessOwn(t *testing.T) {
	b, _ := authBroker(t, telemetryACL)
	listener := dial(t, b, bob)
	if rc := listener.subscribeCode("telemetry/#"); rc != 1 {
		t.Fatalf("subscribing to telemetry/#: SUBACK 0x%02x", rc)
	}
	forger := dial(t, b, alice)
	if rc := forger.subscribeCode("telemetry/#"); rc != 1 {
		t.Fatalf("alice subscribing to telemetry/#: SUBACK 0x%02x", rc)
	}
	forger.set("forged", "21.5")
	p := forger.request(resp.EncodeRequest([]byte("GET"), []byte("forged")))
	p.Properties.ResponseTopic = "telemetry/thermostat1/temp"
	if rc := forger.publishCode(p); rc != rcNotAuthorized {
		t.Fatalf("request with response topic telemetry/thermostat1/temp: PUBACK 0x%02x, want 0x87", rc)
	}
	listener.noStrays()
	expectPayload(t, forger.call("GET", "forged"), "$4\r\n21.5\r\n") // its own response topic works
}

// conn3 is an MQTT 3.1.1 connection.
type conn3 struct {
	nc net.Conn
	br *bufio.Reader
}

// subscribe3 connects an MQTT 3.1.1 client and subscribes it to filter
// (QoS 1).
func subscribe3(t *testing.T, addr, id, user, pw, filter string) *conn3 {
	t.Helper()
	var m mqtt3
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	c := &conn3{nc: nc, br: bufio.NewReader(nc)}
	body := append(m.str("MQTT"), 4, 0xC2, 0, 30)
	body = append(append(append(body, m.str(id)...), m.str(user)...), m.str(pw)...)
	c.write(t, m.packet(0x10, body))
	if h, b := c.read(t); h != 0x20 || b[1] != 0 {
		t.Fatalf("MQTT 3.1.1 CONNACK % x % x", h, b)
	}
	c.write(t, m.packet(0x82, append(append([]byte{0, 1}, m.str(filter)...), 1)))
	if h, b := c.read(t); h != 0x90 || b[2] != 1 {
		t.Fatalf("MQTT 3.1.1 SUBACK % x % x", h, b)
	}
	return c
}

func (c *conn3) write(t *testing.T, b []byte) {
	t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// read returns the next packet's first byte and body.
func (c *conn3) read(t *testing.T) (byte, []byte) {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(wait))
	h, err := c.br.ReadByte()
	n, shift := 0, 0
	for err == nil {
		var b byte
		if b, err = c.br.ReadByte(); err == nil {
			n |= int(b&0x7f) << shift
			shift += 7
			if b&0x80 == 0 {
				break
			}
		}
	}
	body := make([]byte, n)
	if err == nil {
		_, err = io.ReadFull(c.br, body)
	}
	if err != nil {
		t.Fatalf("MQTT 3.1.1 read: %v", err)
	}
	return h, body
}

// noPublishBeforePong fails if a PUBLISH arrives before the PINGRESP to a
// PINGREQ sent now.
func (c *conn3) noPublishBeforePong(t *testing.T) {
	t.Helper()
	c.write(t, []byte{0xC0, 0})
	for {
		h, body := c.read(t)
		switch h >> 4 {
		case 13: // PINGRESP
			return
		case 3: // PUBLISH
			t.Fatalf("MQTT 3.1.1 subscriber received a PUBLISH: %q", body)
		}
	}
}
