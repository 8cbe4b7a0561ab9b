package broker_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
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

// Close while clients are disconnecting on their own returns. (mochi's
// Clients.GetByListener takes its read lock twice; a client's removal queued
// between the two deadlocked srv.Close, seen as a 10-minute test hang.)
func TestCloseWhileClientsDisconnect(t *testing.T) {
	for round := 0; round < 30; round++ {
		b, err := broker.New(broker.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(); err != nil {
			t.Fatal(err)
		}
		conns := make([]*rawConn, 100)
		for i := range conns {
			conns[i] = dialRaw(t, b, fmt.Sprintf("leaver-%d", i))
		}
		for _, c := range conns {
			go c.nc.Close() // they leave while the broker shuts down
		}
		done := make(chan error, 1)
		go func() { done <- b.Close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: close: %v", round, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: Close hung while clients were disconnecting", round)
		}
	}
}
