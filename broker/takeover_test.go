package broker_test

import (
	"testing"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/wire"
)

// A client that reconnects with the same id the moment its old connection
// drops must stay reachable. mochi removes an ending session by client id
// after its disconnect hook, so without the broker's guard the old
// connection's cleanup could delete the new connection (and its
// subscriptions), leaving it connected but deaf.
func TestReconnectWithSameIDStaysReachable(t *testing.T) {
	b := brokertest.Start(t)
	const id = "flapper"
	respTopic := wire.ResponseTopic(id)
	for i := 0; i < 200; i++ {
		old := dialRaw(t, b, id)
		old.subscribe(respTopic)
		_ = old.nc.Close() // dropped, not disconnected: the server cleans up concurrently
		c := dialRaw(t, b, id)
		c.subscribe(respTopic)
		c.write(rawRequest(7, respTopic, []byte("corr-0123456789a"), "", false, "GET", "k"))
		for {
			cp := c.read() // fails the test if nothing arrives within the wait bound
			if cp.Type == packets.PUBLISH {
				if p := cp.Content.(*packets.Publish); p.Topic == respTopic {
					c.ack(p.PacketID)
					break
				}
			}
		}
		_ = c.nc.Close()
	}
}
