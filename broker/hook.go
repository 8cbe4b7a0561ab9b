package broker

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// This file is the broker's one mochi hook: it authenticates and authorizes
// connections, publishes and subscriptions (the decisions are in
// acl_authz.go), guards session takeovers, answers state store requests
// inside the broker (statestore-protocol.md §2-§4) and keeps each
// connection's outbox (see outbox.go). The redelivery cache is in dedup.go;
// every reach into mochi's internals is in mochi.go.

// Reason codes for requests the store refuses at the transport level (§4).
var (
	// PUBACK of a request that has no usable response topic: the client
	// learns at once that no answer will come.
	codeNoResponseTopic = packets.Code{Code: packets.ErrImplementationSpecificError.Code, Reason: "state store request without a valid response topic"}
	// DISCONNECT of a client whose response topic points into the state
	// store's own topic space.
	codeForbiddenResponseTopic = packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "response topic inside the state store topic space"}
	// CONNACK of a client whose will is on the request topic.
	codeWillOnRequestTopic = packets.Code{Code: packets.ErrTopicNameInvalid.Code, Reason: "the will topic is the state store's request topic"}
)

// takeoverWait bounds how long a new connection waits for an old one with
// the same client id to be removed.
const takeoverWait = 2 * time.Second

// storeHook is the single mochi hook of the broker.
type storeHook struct {
	mqtt.HookBase
	srv   *mqtt.Server
	store *store.Store
	log   *slog.Logger
	authz *authz // nil: authorization off (open access)
	dedup dedupCache
	// memoryNote logs once that aio-persistence is not honoured.
	memoryNote sync.Once
	// ended reports when mochi has finished with a connection (the
	// listener's signal); set before the broker serves.
	ended func(net.Conn) <-chan struct{}

	queueBytes, queueLen int
	keepAlive            uint16 // the longest keepalive of an MQTT 5 client (0: any)
	maxSessionExpiry     uint32 // seconds; math.MaxUint32: no cap
	offline              *offlineOutboxes
	outStats             outboxStats

	mu       sync.Mutex
	boxes    map[string]*outbox         // sessions (client ids) the store has sent to
	conns    map[string]*mqtt.Client    // the connection holding each session, once established
	watchers map[*mqtt.Client]*watcher  // connections that registered keys
	since    map[*mqtt.Client]time.Time // when each connection's session was established (inspect.go)
	closed   bool
	wg       sync.WaitGroup // outbox writers and overflow disconnections
}

// ID implements mqtt.Hook.
func (h *storeHook) ID() string { return "ssrun-statestore" }

// Provides implements mqtt.Hook.
func (h *storeHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnPublish, mqtt.OnDisconnect, mqtt.OnPacketEncode,
		mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnPacketRead, mqtt.OnQosComplete, mqtt.OnQosDropped,
		mqtt.OnConnect, mqtt.OnWill, mqtt.OnClientExpired, mqtt.OnSubscribed:
		return true
	}
	return false
}

// OnConnect caps the client's keepalive (keepalive.go), then authenticates
// (password file) and authorizes (Connect grant,
// client id binding and ownership, will topic) a new connection when
// authorization is on. Both happen here, before mochi's own authentication
// step, because only here can a refusal carry its own CONNACK reason code
// and come before mochi takes over a session with the same client id.
func (h *storeHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	capKeepAlive(cl, h.keepAlive)
	code, why := packets.CodeSuccess, ""
	switch {
	case atomic.LoadUint32(&cl.Properties.Will.Flag) == 1 && cl.Properties.Will.TopicName == wire.RequestTopic:
		// A will is never run as a request (mochi publishes it without
		// OnPublish): it would only be kept, retained, on the request topic.
		code, why = codeWillOnRequestTopic, "will topic is the state store's request topic"
	case h.authz != nil:
		code, why = h.authz.connect(cl, pk)
	}
	if code == packets.CodeSuccess {
		return nil
	}
	h.log.Warn("mqtt connection refused", "client", cl.ID, "user", string(pk.Connect.Username), "remote", cl.Net.Remote,
		"reason_code", code.Code, "reason", why)
	if cl.Properties.ProtocolVersion < 5 && code.Code != packets.ErrBadUsernameOrPassword.Code {
		code = packets.ErrBadUsernameOrPassword // mochi maps it to MQTT 3's "not authorized" (5)
	}
	if err := h.srv.SendConnack(cl, code, false, nil); err != nil {
		return fmt.Errorf("refuse connection: %w", err)
	}
	return code
}

// OnConnectAuthenticate admits every connection OnConnect let through. It
// is the only auth hook (mochi ORs them; with none it refuses everyone).
func (h *storeHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

// OnACLCheck decides a PUBLISH (write), a SUBSCRIBE filter, and each
// delivery of a message to a subscriber (mochi checks both with write
// false, so a grant revoked by an ACL reload stops deliveries on
// subscriptions made before). Everything is allowed when authorization is
// off.
func (h *storeHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if h.authz == nil {
		return true
	}
	s := h.authz.sessionOf(cl)
	if !write {
		return h.authz.mayReceive(s, topic)
	}
	if h.authz.mayPublish(s, topic) {
		return true
	}
	h.log.Info("publish refused by the ACL", "client", cl.ID, "user", s.pr.user, "topic", topic)
	return false
}

// OnSubscribed logs the filters a SUBSCRIBE was refused by the ACL.
func (h *storeHook) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if h.authz == nil {
		return
	}
	for i, f := range pk.Filters {
		if i < len(codes) && codes[i] == packets.ErrNotAuthorized.Code {
			h.log.Info("subscription refused by the ACL", "client", cl.ID, "user", string(cl.Properties.Username), "filter", f.Filter)
		}
	}
}

// OnWill keeps a client's will from being published where the client may
// no longer publish (the ACL was reloaded since it connected).
func (h *storeHook) OnWill(cl *mqtt.Client, w mqtt.Will) (mqtt.Will, error) {
	if h.authz == nil {
		return w, nil
	}
	return h.authz.will(cl, w), nil
}

// OnClientExpired releases the client id and the outbox of a session mochi
// expired.
func (h *storeHook) OnClientExpired(cl *mqtt.Client) {
	if h.authz != nil {
		h.authz.ended(cl)
	}
	h.expired(cl)
}

// OnPacketEncode keeps user properties and reason strings on PUBLISH,
// CONNACK and DISCONNECT when a client set Request Problem Information to 0
// (MQTT-3.1.2-29 allows them there; mochi strips them, so __stat and __ts
// would vanish), and announces the maximum packet size and topic alias
// maximum in CONNACK.
func (h *storeHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Publish, packets.Disconnect:
		pk.Mods.DisallowProblemInfo = false
	case packets.Connack:
		pk.Mods.DisallowProblemInfo = false
		if pk.ReasonCode < packets.ErrUnspecifiedError.Code {
			pk.Properties.MaximumPacketSize = MaxPacketSize
			// mochi takes topic aliases up to its maximum but does not say
			// so; a client may use them only when told (MQTT-3.2.2-17).
			pk.Properties.TopicAliasMaximum = h.srv.Options.Capabilities.TopicAliasMaximum
		}
	}
	return pk
}

// OnSessionEstablish runs on a new connection's goroutine before mochi takes
// over or replaces a session with the same client id. mochi v2.7.9 removes an
// ending session (expiry 0, or MQTT 3 clean) by client id, and unsubscribes
// its filters by client id, after its disconnect hook returns; if that old
// connection is still winding down when the new one registers, it deletes
// the new one, which stays connected but never receives anything. So an old
// connection whose session ends is closed here and the new one proceeds once
// mochi has finished with it (the listener's signal). Persistent sessions
// are never removed that way; mochi's own takeover handles them.
func (h *storeHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	old, ok := h.srv.Clients.Get(cl.ID)
	if !ok || old == cl || !sessionEnds(old) || old.Net.Conn == nil {
		return
	}
	if !old.Closed() {
		_ = h.srv.DisconnectClient(old, packets.ErrSessionTakenOver)
	}
	t := time.NewTimer(takeoverWait)
	defer t.Stop()
	select {
	case <-h.ended(old.Net.Conn):
	case <-t.C:
		h.log.Warn("previous connection with the same client id still not removed; continuing", "client", cl.ID)
	}
}

// OnDisconnect ends the connection's part in its session (sessions.go). A
// session that ends with its connection releases its client id.
func (h *storeHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if expire && h.authz != nil {
		h.authz.ended(cl)
	}
	h.disconnected(cl, expire)
}

// OnPublish answers requests on the request topic and consumes them. It runs
// on the publisher's read goroutine before mochi acknowledges the PUBLISH:
//   - returning CodeSuccessIgnore acknowledges with success and forwards
//     nothing (answered requests, and drops the client cannot learn about);
//   - a failure Code makes mochi PUBACK with that reason code (v5, QoS >= 1
//     only; otherwise mochi would forward the packet, so those get
//     CodeSuccessIgnore too);
//   - ErrRejectPacket (no PUBACK at all) only for a client being
//     disconnected anyway.
func (h *storeHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline || pk.TopicName != wire.RequestTopic {
		return pk, nil
	}
	rt := pk.Properties.ResponseTopic
	switch {
	case !validTopicName(rt):
		h.log.Warn("state store request dropped: missing or invalid response topic", "client", cl.ID, "response_topic", rt)
		if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 {
			return pk, codeNoResponseTopic
		}
		return pk, packets.CodeSuccessIgnore
	case wire.ForbiddenResponseTopic(rt):
		h.log.Warn("state store request dropped: forbidden response topic; disconnecting client", "client", cl.ID, "response_topic", rt)
		_ = h.srv.DisconnectClient(cl, codeForbiddenResponseTopic)
		return pk, packets.ErrRejectPacket
	case pk.FixedHeader.Qos == 0:
		h.log.Warn("state store request dropped: QoS 0 (requests must be QoS 1)", "client", cl.ID, "response_topic", rt)
		return pk, packets.CodeSuccessIgnore
	case h.authz != nil && !h.authz.mayRespondTo(h.authz.sessionOf(cl), rt):
		// Else a client could aim responses (with a guessed correlation
		// id: forged ones) at another client's response topic, or make
		// the store publish a value of its choosing where it may not.
		h.log.Info("state store request refused: its response topic is neither the client's own nor one it may subscribe and publish to", "client", cl.ID, "response_topic", rt)
		return pk, packets.ErrNotAuthorized
	}
	if v, ok := userProp(pk.Properties.User, wire.PropProtVer); ok && !supportedVersion(v) {
		h.respond(cl, rt, pk, nil, []packets.UserProperty{
			{Key: wire.PropStatus, Val: wire.StatusUnsupportedVersion},
			{Key: wire.PropStatusMsg, Val: "unsupported protocol version " + strconv.Quote(v) + "; supported major versions: " + wire.SupportedMajorVersions},
			{Key: wire.PropRequestVer, Val: v},
			{Key: wire.PropSupportedVer, Val: wire.SupportedMajorVersions},
			{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
		}, 0)
		return pk, packets.CodeSuccessIgnore
	}
	if len(pk.Properties.CorrelationData) == 0 {
		h.respond(cl, rt, pk, nil, []packets.UserProperty{
			{Key: wire.PropStatus, Val: wire.StatusBadRequest},
			{Key: wire.PropStatusMsg, Val: "the request has no correlation data"},
			{Key: wire.PropName, Val: "Correlation Data"},
			{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
		}, 0)
		return pk, packets.CodeSuccessIgnore
	}

	ttl := dedupDefaultTTL
	if pk.Properties.MessageExpiryInterval > 0 {
		ttl = time.Duration(pk.Properties.MessageExpiryInterval) * time.Second
	}
	// Cloned: mochi's packet strings alias the whole packet (see mochi.go).
	k := dedupKey{client: cl.ID, corr: string(pk.Properties.CorrelationData), topic: strings.Clone(rt)}
	e, first := h.dedup.begin(k, fingerprint(&pk), time.Now(), ttl)
	if first {
		e.finish(h.execute(cl, pk), &h.dedup)
	} else {
		<-e.done
		h.log.Debug("state store request redelivered: replaying the first reply", "client", cl.ID, "response_topic", rt)
	}
	r := e.reply
	props := make([]packets.UserProperty, 0, 3)
	props = append(props,
		packets.UserProperty{Key: wire.PropStatus, Val: wire.StatusOK},
		packets.UserProperty{Key: wire.PropProtVer, Val: wire.ProtocolVersion})
	if r.HasVersion {
		props = append(props, packets.UserProperty{Key: wire.PropTimestamp, Val: r.Version.String()})
	}
	h.respond(cl, rt, pk, r.Payload, props, r.Pos)
	return pk, packets.CodeSuccessIgnore
}

func (h *storeHook) execute(cl *mqtt.Client, pk packets.Packet) store.Reply {
	req := store.Request{Payload: pk.Payload, ClientID: cl.ID, Observer: func() store.Observer { return h.watcher(cl) },
		MaxReplyBytes: replyRoom(cl, &pk)}
	if h.authz != nil {
		req.Allow = h.authz.keyCheck(cl)
	}
	if v, ok := userProp(pk.Properties.User, wire.PropTimestamp); ok {
		req.TS = &v
	}
	if v, ok := userProp(pk.Properties.User, wire.PropFencingToken); ok {
		req.FT = &v
	}
	h.notePersistRequest(cl, &pk)
	return h.store.Execute(req)
}
