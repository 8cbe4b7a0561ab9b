package broker

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
)

// A connection's keepalive is what ends it when its client goes silent:
// mochi closes a connection 1.5 keepalives after the last packet it read
// (MQTT-3.1.2-22), and that deadline also ends a write blocked on a client
// that stopped reading. That is the one thing that ends such a client once
// the responses written fill the sockets' buffers before its outbox reaches
// its bound (outbox.go): mochi's reader then blocks writing an
// acknowledgement and stops reading. A client asking for no keepalive (0)
// would be held for good, one asking for 65,535 s for a day. So an MQTT 5
// client asking for none, or for more than Config.MaxKeepAlive, is given
// that one in its CONNACK (Server Keep Alive, MQTT-3.2.2-21), which it must
// use. An MQTT 3 client cannot be told, and keeps its own.

// DefaultMaxKeepAlive is the longest keepalive an MQTT 5 client gets when
// Config.MaxKeepAlive is zero.
const DefaultMaxKeepAlive = 5 * time.Minute

// maxKeepAliveSeconds returns Config.MaxKeepAlive in whole seconds (at
// least 1, at most 65,535), or 0 for no cap (d negative).
func maxKeepAliveSeconds(d time.Duration) uint16 {
	switch {
	case d < 0:
		return 0
	case d == 0:
		d = DefaultMaxKeepAlive
	}
	return uint16(min(max(d/time.Second, 1), 65535))
}

// capKeepAlive gives an MQTT 5 client asking for no keepalive, or for more
// than limit seconds, a keepalive of limit, sent in its CONNACK. It runs
// in the OnConnect hook, before mochi sets the connection's deadline.
func capKeepAlive(cl *mqtt.Client, limit uint16) {
	if limit == 0 || cl.Properties.ProtocolVersion < 5 {
		return
	}
	if ka := cl.State.Keepalive; ka == 0 || ka > limit {
		cl.State.Keepalive = limit
		cl.State.ServerKeepalive = true
	}
}
