package broker

import (
	"math"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// A session outlives its connection by its Session Expiry Interval, and
// holds its client id and its outbox (outbox.go) that long. A client asking
// for 2^32-1 (never expire, the Go SDK's default) would keep both until the
// broker restarts: another user allowed the same client id could never
// have it, and the outbox's messages would stay. So a session outlives its
// connection by at most Config.MaxSessionExpiry: a client asking for more in
// its CONNECT is told the cap in its CONNACK (mochi's
// MaximumSessionExpiryInterval, MQTT-3.2.2-20), and one raising its expiry
// in its DISCONNECT (MQTT-3.14.2.2.2) gets the cap too. When the session
// expires, its client id and outbox are released (hook.go OnClientExpired).

// DefaultMaxSessionExpiry is the cap used when Config.MaxSessionExpiry is
// zero.
const DefaultMaxSessionExpiry = time.Hour

// maxSessionExpirySeconds returns Config.MaxSessionExpiry in whole seconds
// (at least 1), or math.MaxUint32 for no cap (d negative).
func maxSessionExpirySeconds(d time.Duration) uint32 {
	switch {
	case d < 0:
		return math.MaxUint32
	case d == 0:
		d = DefaultMaxSessionExpiry
	}
	return uint32(min(max(d/time.Second, 1), math.MaxUint32))
}

// capDisconnectExpiry caps the Session Expiry Interval a DISCONNECT sets.
func capDisconnectExpiry(pk *packets.Packet, limit uint32) {
	if pk.Properties.SessionExpiryIntervalFlag && pk.Properties.SessionExpiryInterval > limit {
		pk.Properties.SessionExpiryInterval = limit
	}
}
