package broker

import (
	"sort"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// This file is every place the broker reaches into mochi's state instead of
// going through a hook. Each function mirrors what mochi-mqtt/server v2.7.9
// (go.mod pins it) does itself, named after the mochi function it imitates;
// re-read them against mochi's source when upgrading:
//   - applySubscription: topics.go Subscribers and server.go
//     publishToClient (QoS downgrade to the subscription's, subscription
//     identifiers sorted, MQTT-3.3.4-3/4);
//   - mochiInflight, advancePacketID: Client.NextPacketID, which numbers a
//     connection's outgoing QoS > 0 messages from one counter, skipping the
//     ids in mochi's inflight store; the outbox takes its ids from the same
//     counter (and skips its own unacknowledged ones), so mochi's messages
//     and the store's never share an id while the counter has not gone
//     round the 65,535 ids since;
//   - receiveMaximum: clients.go ParseConnect (the client's Receive Maximum,
//     capped by mochi to Capabilities.MaximumInflight);
//   - sessionEnds: server.go attachClient's expire test;
//   - resolveTopicAlias: server.go processPublish's alias step, which comes
//     after its ACL check: a PUBLISH naming its topic by alias only was
//     checked as the empty topic and refused (0x87) under authorization.
//
// What the store must not do: put its messages into mochi's inflight store
// (Client.State.Inflight), as it did until issue 32. Inflight.NextImmediate
// takes the store's read lock and calls GetAll, which takes it again; a
// Go RWMutex reader that locks twice deadlocks when a writer queues between
// the two (sync.RWMutex: "a blocked Lock call excludes new readers"). mochi
// calls NextImmediate from a connection's reader after every packet while
// anything is in flight to it (server.go processPacket), and the store's
// writer goroutine called Inflight.Set for every response at just that
// moment: the reader and the writer hung, then mochi's event loop in
// clearExpiredInflights; the client's request had its PUBACK and its reply
// never came. The official Go SDK hit it every few hundred calls. Sharing
// the store also let mochi delete a response's entry when a request reused
// its packet id (processPublish), call OnQosComplete for a request's own
// PUBACK (releasing a response's room) and refuse a SUBSCRIBE whose id
// equalled an unacknowledged response's (0x91). So the outbox keeps its
// messages itself (outbox.go), learns of PUBACKs in OnPacketRead (mochi's
// processPuback ignores an id it does not hold), and only touches mochi's
// atomic send quota. mochi alone can still hit the double lock when another
// client's publish adds to a connection's inflight store at that moment
// (publishToClient on the publisher's goroutine); it did not in 150,000
// QoS 1 messages fanned out here, but it is mochi's to fix.
//
// One more mochi trait shapes code elsewhere: packets/codec.go decodeString
// returns strings that alias the packet's buffer (unsafe, no copy). A topic,
// user property or HLC node string kept past the request (the redelivery
// cache's key, a key's fencing token) would keep the whole packet alive, a
// value of up to MaxPacketSize each: such strings are cloned first.

// applySubscription sets out's QoS (at most 1) and subscription identifiers
// from cl's subscription matching out.TopicName, as mochi does for a
// subscriber, and reports whether cl holds one. Without one, out is left at
// QoS 1.
func applySubscription(srv *mqtt.Server, cl *mqtt.Client, out *packets.Packet) bool {
	sub, ok := srv.Topics.Subscribers(out.TopicName).Subscriptions[cl.ID]
	if !ok {
		return false
	}
	out.FixedHeader.Qos = min(sub.Qos, 1)
	for _, id := range sub.Identifiers {
		if id > 0 {
			out.Properties.SubscriptionIdentifier = append(out.Properties.SubscriptionIdentifier, id)
		}
	}
	sort.Ints(out.Properties.SubscriptionIdentifier)
	return true
}

// mochiInflight is how many messages mochi itself has in flight to cl (its
// inflight store; it never holds the store's). Only a read lock is taken.
func mochiInflight(cl *mqtt.Client) int { return cl.State.Inflight.Len() }

// advancePacketID moves cl's packet id counter (Client.NextPacketID) to at
// least last, so that mochi numbers its own messages to a resumed session
// after the store's messages to resend, as it would have on the session's
// previous connection.
func advancePacketID(cl *mqtt.Client, last uint16) {
	for range 1 << 16 {
		id, err := cl.NextPacketID()
		if err != nil || uint16(id) >= last {
			return
		}
	}
}

// receiveMaximum is how many QoS 1 messages cl accepts unacknowledged.
func receiveMaximum(cl *mqtt.Client) int {
	if rm := cl.Properties.Props.ReceiveMaximum; rm > 0 {
		return int(rm)
	}
	return 65535 // MQTT-3.1.2.11.3: absent means 65,535
}

// sessionEnds reports whether cl's session ends with its connection.
func sessionEnds(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval == 0
	}
	return cl.Properties.Clean
}

// resolveTopicAlias gives a PUBLISH that names its topic by an alias the
// topic, as mochi's processPublish does, before mochi checks the topic.
func resolveTopicAlias(cl *mqtt.Client, pk *packets.Packet) {
	if pk.Properties.TopicAliasFlag && pk.Properties.TopicAlias > 0 && cl.State.TopicAliases.Inbound != nil {
		pk.TopicName = cl.State.TopicAliases.Inbound.Set(pk.Properties.TopicAlias, pk.TopicName)
	}
}
