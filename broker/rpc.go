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
// (0: at once). When the requester is the topic's only subscriber (every
// SDK's case, and the only one the default authorization allows) it goes
// through the requester's session's outbox, bounded like its notifications;
// otherwise mochi publishes it to every subscriber.
func (h *storeHook) respond(cl *mqtt.Client, rt string, req packets.Packet, payload []byte, props []packets.UserProperty, pos uint64) {
	m := &message{
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
	}
	if onlySubscriber(h.srv, cl, rt) {
		h.outbox(cl).push(m)
		return
	}
	// Other subscribers: mochi delivers to each. This rare path waits for
	// durability on the request's goroutine.
	if err := h.store.waitDurable(pos, nil); err != nil {
		h.log.Warn("state store response not published: the change was not persisted", "client", cl.ID, "response_topic", rt, "error", err)
		return
	}
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   rt,
		Payload:     payload,
		PacketID:    1, // required for a QoS 1 publish; the inline client tracks nothing
		Properties:  m.props,
	}
	if err := h.srv.InjectPacket(h.inline, out); err != nil {
		h.log.Warn("state store response not published", "client", cl.ID, "response_topic", rt, "error", err)
	}
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

func digitsOnly(s string) bool { return s != "" && allDigits([]byte(s)) }

func userProp(props []packets.UserProperty, key string) (string, bool) {
	for _, p := range props {
		if p.Key == key {
			return p.Val, true
		}
	}
	return "", false
}
