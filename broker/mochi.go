package broker

import (
	"sort"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// This file is every place the broker reaches into mochi's state instead of
// going through a hook. Each function mirrors what mochi-mqtt/server v2.7.9
// (go.mod pins it) does itself, named after the mochi function it imitates;
// re-read them against mochi's source when upgrading:
//   - applySubscription, onlySubscriber: topics.go Subscribers and server.go publishToClient (QoS downgrade to the
//     subscription's, subscription identifiers sorted, MQTT-3.3.4-3/4);
//   - trackInflight / untrackInflight: publishToClient and processPuback
//     (Client.NextPacketID, State.Inflight.Set/Delete, Info.Inflight, send
//     quota), so a QoS 1 message written by the store is acknowledged,
//     counted and resent on session resumption like one mochi wrote;
//   - receiveMaximum: clients.go ParseConnect (the client's Receive Maximum,
//     capped by mochi to Capabilities.MaximumInflight);
//   - sessionEnds: server.go attachClient's expire test.
//
// A mochi trait clients see: processSubscribe refuses a SUBSCRIBE (reason
// 0x91, packet identifier in use) whose packet id equals that of a QoS 1
// message mochi or the store has in flight to the same client, although
// MQTT 5 §2.2.1 numbers the two directions independently. A client that
// subscribes while store responses or notifications to it are unacknowledged
// may be refused once; protocol.Client retries its subscriptions, and a
// retry with the next packet id goes through.
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

// trackInflight gives out (QoS 1) a packet id and records it in cl's inflight
// store; ok=false when cl has no free packet id.
func trackInflight(srv *mqtt.Server, cl *mqtt.Client, out *packets.Packet) (uint16, bool) {
	id, err := cl.NextPacketID()
	if err != nil {
		return 0, false
	}
	out.PacketID = uint16(id)
	if cl.State.Inflight.Set(*out) {
		atomic.AddInt64(&srv.Info.Inflight, 1)
		cl.State.Inflight.DecreaseSendQuota()
	}
	return out.PacketID, true
}

// untrackInflight undoes trackInflight for a message that was not written.
func untrackInflight(srv *mqtt.Server, cl *mqtt.Client, id uint16) {
	if cl.State.Inflight.Delete(id) {
		atomic.AddInt64(&srv.Info.Inflight, -1)
		cl.State.Inflight.IncreaseSendQuota()
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

// onlySubscriber reports whether cl holds the one and only subscription
// matching topic (no other client, shared or inline subscription).
func onlySubscriber(srv *mqtt.Server, cl *mqtt.Client, topic string) bool {
	subs := srv.Topics.Subscribers(topic)
	if len(subs.Subscriptions) != 1 || len(subs.Shared) != 0 || len(subs.InlineSubscriptions) != 0 {
		return false
	}
	_, ok := subs.Subscriptions[cl.ID]
	return ok
}
