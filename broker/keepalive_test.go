package broker_test

import (
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

// An MQTT 5 client asking for no keepalive is given the broker's longest
// in its CONNACK, and when it then goes silent the broker closes its
// connection 1.5 keepalives later. Before, such a client, once it stopped
// reading, held its connection and goroutines for good.
func TestKeepAliveCappedForSilentClient(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxKeepAlive = time.Second })
	silent, ack := connectRaw(t, b, "silent", 0)
	if ack.Properties == nil || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 1 {
		t.Fatalf("CONNACK properties %+v, want Server Keep Alive 1", ack.Properties)
	}
	_ = silent.nc.SetReadDeadline(time.Now().Add(wait))
	_, err := packets.ReadPacket(silent.nc)
	if !isClosed(err) {
		t.Fatalf("silent client: read returned %v, want its connection closed by the broker", err)
	}
}

// A keepalive within the cap is the client's own (no Server Keep Alive);
// one above it is cut to the cap; with no cap (negative) any is kept.
func TestKeepAliveWithinCapIsKept(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxKeepAlive = 90 * time.Second })
	if _, ack := connectRaw(t, b, "within", 60); ack.Properties != nil && ack.Properties.ServerKeepAlive != nil {
		t.Fatalf("keepalive 60 under a cap of 90: told %d", *ack.Properties.ServerKeepAlive)
	}
	if _, ack := connectRaw(t, b, "above", 600); ack.Properties == nil || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 90 {
		t.Fatalf("keepalive 600 under a cap of 90: CONNACK properties %+v", ack.Properties)
	}
	def := brokertest.Start(t)
	if _, ack := connectRaw(t, def, "none", 0); ack.Properties == nil || ack.Properties.ServerKeepAlive == nil ||
		*ack.Properties.ServerKeepAlive != uint16(broker.DefaultMaxKeepAlive/time.Second) {
		t.Fatalf("no keepalive, default cap: CONNACK properties %+v", ack.Properties)
	}
	off := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxKeepAlive = -1 })
	if _, ack := connectRaw(t, off, "none", 0); ack.Properties != nil && ack.Properties.ServerKeepAlive != nil {
		t.Fatalf("no cap: told %d", *ack.Properties.ServerKeepAlive)
	}
}
