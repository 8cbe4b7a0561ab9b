package broker

import (
	"strings"
	"unicode/utf8"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
)

// This file holds the AIO RPC conventions of the store's requests and
// responses (statestore-protocol.md §1-§4): which topics are usable, which
// protocol versions are served, and how a response is sent.

// respond sends a response (§3) on rt once the journal is durable at pos
// (0: at once), to the requester only: through its session's outbox,
// bounded like its notifications, and only if it holds a subscription
// matching rt (at that subscription's QoS). Another client subscribed to
// rt gets nothing: a reply holds what the requester may read, which
// another subscriber may not (and rt may be any topic the requester may
// subscribe to).
func (h *storeHook) respond(cl *mqtt.Client, rt string, req packets.Packet, payload []byte, props []packets.UserProperty, pos uint64) {
	h.outbox(cl).push(&message{
		topic:    rt,
		payload:  payload,
		response: true,
		pos:      pos,
		props: packets.Properties{
			CorrelationData:       req.Properties.CorrelationData,
			ContentType:           wire.ContentType,
			PayloadFormat:         0,
			PayloadFormatFlag:     true,
			MessageExpiryInterval: req.Properties.MessageExpiryInterval,
			User:                  props,
		},
	})
}

// validTopicName reports whether t can be published to: non-empty, valid
// UTF-8 without NUL, no wildcards, no empty levels (§1), not $SYS/$share.
func validTopicName(t string) bool {
	if t == "" || !utf8.ValidString(t) || strings.IndexByte(t, 0) >= 0 {
		return false
	}
	for _, level := range strings.Split(t, "/") {
		if level == "" {
			return false
		}
	}
	return mqtt.IsValidFilter(t, true) && !strings.HasPrefix(strings.ToLower(t), "$share/")
}

// supportedVersion accepts `major.minor` (decimal digits) with major 1.
func supportedVersion(v string) bool {
	major, minor, ok := strings.Cut(v, ".")
	if !ok || !digitsOnly(major) || !digitsOnly(minor) {
		return false
	}
	return strings.TrimLeft(major, "0") == "1"
}

func digitsOnly(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
}

func userProp(props []packets.UserProperty, key string) (string, bool) {
	for _, p := range props {
		if p.Key == key {
			return p.Val, true
		}
	}
	return "", false
}

// replyRoom is the largest reply payload a response to req can carry to
// cl: its Maximum Packet Size (ours when it set none, or a larger one),
// less what the response's topic, correlation data and properties take.
// A larger response would be dropped (MQTT-3.1.2-25): SCAN pages stay
// under it.
func replyRoom(cl *mqtt.Client, req *packets.Packet) int {
	limit := MaxPacketSize
	if m := int(cl.Properties.Props.MaximumPacketSize); m > 0 && m < limit {
		limit = m
	}
	return limit - len(req.Properties.ResponseTopic) - len(req.Properties.CorrelationData) - 512
}
