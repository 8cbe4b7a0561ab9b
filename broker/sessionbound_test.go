package broker_test

// Issue 25, point 1: what a session keeps after its connection is bounded
// in time (Session Expiry capped, told in CONNACK, DISCONNECT too) and in
// memory (each session's outbox across reconnections, and all sessions
// without a connection together), and a client id held by an expired
// session goes back to the users its binding allows.

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// foreverSession asks for a session that never expires (the Go SDK's
// default), with the SDK's Receive Maximum.
func foreverSession(clean bool) func(*packets.Connect) {
	return func(c *packets.Connect) {
		c.CleanStart = clean
		expiry, recvMax := uint32(math.MaxUint32), uint16(math.MaxUint16)
		c.Properties = &packets.Properties{SessionExpiryInterval: &expiry, ReceiveMaximum: &recvMax}
	}
}

func TestSessionExpiryCappedInConnack(t *testing.T) {
	b := brokertest.Start(t, func(c *broker.Config) { c.MaxSessionExpiry = 90 * time.Second })
	_, ack := connectRawWith(t, b, "forever", foreverSession(true))
	if ack.Properties == nil || ack.Properties.SessionExpiryInterval == nil || *ack.Properties.SessionExpiryInterval != 90 {
		t.Fatalf("CONNACK session expiry %v, want the cap, 90", ack.Properties)
	}
	_, ack = connectRawWith(t, b, "short", persistent(true, 0)) // 60 s: under the cap
	if ack.Properties != nil && ack.Properties.SessionExpiryInterval != nil {
		t.Fatalf("CONNACK of a session under the cap names an expiry: %d", *ack.Properties.SessionExpiryInterval)
	}
}

// squatACL lets both mallory and the device's user use thermostat client
// ids: the first to connect holds one until its session ends.
const squatACL = `
authorizationPolicies:
  rules:
    - principals: {usernames: [alice, bob]}
      brokerResources: [{method: Connect}]
users:
  alice: {clientIds: ["thermostat*"]}
  bob: {clientIds: ["thermostat*"]}
`

// A user that connects with a device's client id and a session that never
// expires, then leaves, held the id until the broker restarted: the
// device's own user got 0x85 for good. The session now expires at the cap,
// asked for in CONNECT or in DISCONNECT, and the id is free again.
func TestSquattedClientIDFreedWhenTheSessionExpires(t *testing.T) {
	for _, via := range []string{"connect", "disconnect"} {
		t.Run(via, func(t *testing.T) {
			b, _ := authBroker(t, squatACL, func(c *broker.Config) { c.MaxSessionExpiry = time.Second })
			rc, nc := connectCode(t, b, "thermostat1", "bob", "bob-pw", func(c *packets.Connect) {
				if via == "connect" {
					foreverSession(true)(c)
					return
				}
				expiry := uint32(1)
				c.Properties = &packets.Properties{SessionExpiryInterval: &expiry}
			})
			if rc != 0 {
				t.Fatalf("bob as thermostat1: CONNACK 0x%02x", rc)
			}
			dis := packets.NewControlPacket(packets.DISCONNECT)
			if via == "disconnect" {
				forever := uint32(math.MaxUint32)
				dis.Content.(*packets.Disconnect).Properties = &packets.Properties{SessionExpiryInterval: &forever}
			}
			if _, err := dis.WriteTo(nc); err != nil {
				t.Fatal(err)
			}
			if rc, _ := connectCode(t, b, "thermostat1", "alice", "alice-pw", nil); rc != rcClientIDNotValid {
				t.Fatalf("alice while bob's session lives: CONNACK 0x%02x, want 0x85", rc)
			}
			// mochi expires sessions once a second, after their expiry.
			testutil.WaitFor(t, "alice to get thermostat1 once bob's session expired", func() bool {
				rc, nc := connectCode(t, b, "thermostat1", "alice", "alice-pw", nil)
				_ = nc.Close()
				return rc == 0
			})
		})
	}
}

// redeliveryCache is what the redelivery cache may hold of the replies
// (dedup.go): the heap bounds below allow it.
const redeliveryCache = 32 << 20

// 12 client ids each leave 4 unacknowledged GETs of a 3.9 MB value in their
// session: 187 MB for as long as the sessions live, before. Now sessions
// without a connection hold OfflineQueueBytes at most, together.
func TestSessionsWithoutConnectionBoundedTogether(t *testing.T) {
	const offline = 16 << 20
	b := brokertest.Start(t, func(c *broker.Config) { c.OfflineQueueBytes = offline })
	big := string(bytes.Repeat([]byte("b"), 3_900_000))
	writer := dial(t, b)
	writer.set("big", big)
	before := heapLive()
	for i := range 12 {
		leaveGETs(t, b.Addr(), "leaver-"+string(rune('a'+i)), true)
		// Each session is left before the next is made: the broker sees
		// them leave in order (under load, two closes in a row could be
		// handled the other way round, and "the newest" is then another).
		testutil.WaitFor(t, "the session to have no connection", func() bool { return b.Stats().Connections == 1 })
	}
	if live := heapLive(); live > before+offline+redeliveryCache+8<<20 {
		t.Fatalf("live heap grew by %d MiB, want at most the offline bound (%d MiB) and the redelivery cache's (%d MiB)",
			(live-before)>>20, offline>>20, redeliveryCache>>20)
	}
	if dropped := b.Stats().NotifyDropped; dropped < 12*4-offline/3_900_000-4 {
		t.Fatalf("%d replies counted as dropped, want most of the 48", dropped)
	}
	// The newest sessions kept theirs: the last leaver gets its replies.
	r, ack := connectRawWith(t, b, "leaver-l", foreverSession(false))
	if !ack.SessionPresent {
		t.Fatal("the last leaver's session is gone")
	}
	if p := r.nextPublish(); !p.Duplicate || len(p.Payload) < 3_900_000 {
		t.Fatalf("the last leaver's first message: %d bytes, dup %v; want its GET's reply", len(p.Payload), p.Duplicate)
	}
}

// One client id reconnecting 25 times (Clean Start 0) with 4 GETs each:
// 253 MB before, as resent messages were not counted in the new
// connection's bound. Now one session's outbox is bounded across its
// connections.
func TestResumingSessionBoundedAcrossConnections(t *testing.T) {
	b := brokertest.Start(t)
	big := string(bytes.Repeat([]byte("b"), 3_900_000))
	writer := dial(t, b)
	writer.set("big", big)
	before := heapLive()
	for i := range 25 {
		leaveGETs(t, b.Addr(), "returner", i == 0)
		testutil.WaitFor(t, "the broker to see the connection end", func() bool { return b.Stats().Connections == 1 })
	}
	if live := heapLive(); live > before+broker.DefaultClientQueueBytes+redeliveryCache+8<<20 {
		t.Fatalf("live heap grew by %d MiB over 25 connections of one session, want at most its outbox bound (%d MiB) and the redelivery cache's (%d MiB)",
			(live-before)>>20, broker.DefaultClientQueueBytes>>20, redeliveryCache>>20)
	}
	if b.Stats().QueueOverflows == 0 {
		t.Fatal("no overflow: the session's outbox kept 100 replies of 3.9 MB")
	}
}
