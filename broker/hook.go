package broker

import (
	"container/list"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
)

// This file is the mochi glue: the hook that answers state store requests
// inside the broker (statestore-protocol.md §2-§4), the duplicate-request
// cache, authentication, the PUBLISH property fix, and NOTIFY delivery
// straight into registered sessions (§13.3, §13.4).

// inlineClientID names the inline client that publishes responses. It holds
// a NUL byte, which MQTT forbids in client ids, so no real client can share
// it (a No-Local subscription of a client with the same id would otherwise
// swallow its responses).
const inlineClientID = "\x00statestore"

// Reason codes for requests the store refuses at the transport level (§4).
var (
	// PUBACK of a request that has no usable response topic: the client
	// learns at once that no answer will come.
	codeNoResponseTopic = packets.Code{Code: packets.ErrImplementationSpecificError.Code, Reason: "state store request without a valid response topic"}
	// DISCONNECT of a client whose response topic points into the state
	// store's own topic space.
	codeForbiddenResponseTopic = packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "response topic inside the state store topic space"}
)

// Limits of the duplicate-request cache (§4.7).
const (
	dedupDefaultTTL = 60 * time.Second // requests without a message expiry
	dedupMaxEntries = 16384
	dedupMaxBytes   = 32 << 20 // cached reply payloads
)

// notifyQueueLen bounds the notifications waiting for one connection.
const notifyQueueLen = 1024

// storeHook is the single mochi hook of the broker.
type storeHook struct {
	mqtt.HookBase
	srv    *mqtt.Server
	inline *mqtt.Client
	store  *store
	log    *slog.Logger
	creds  *credentials // nil: open access
	dedup  dedupCache

	notifyDropped atomic.Uint64

	mu     sync.Mutex
	conns  map[*mqtt.Client]*conn // connections that registered a key
	closed bool
	wg     sync.WaitGroup // conn delivery goroutines
}

// ID implements mqtt.Hook.
func (h *storeHook) ID() string { return "ssrun-statestore" }

// Provides implements mqtt.Hook.
func (h *storeHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnPublish, mqtt.OnDisconnect, mqtt.OnPacketEncode,
		mqtt.OnSessionEstablish:
		return true
	}
	return false
}

// OnConnectAuthenticate admits everyone without a password file, else only
// users whose password matches. This is the only auth hook (mochi ORs them).
func (h *storeHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if h.creds == nil {
		return true
	}
	if h.creds.check(pk.Connect.Username, pk.Connect.Password) {
		return true
	}
	h.log.Warn("mqtt connection refused: bad username or password", "client", cl.ID, "user", string(pk.Connect.Username), "remote", cl.Net.Remote)
	return false
}

// OnACLCheck allows every topic to authenticated clients (E7 never fires).
func (h *storeHook) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

// OnPacketEncode keeps user properties and reason strings on PUBLISH,
// CONNACK and DISCONNECT when a client set Request Problem Information to 0
// (MQTT-3.1.2-29 allows them there; mochi strips them, so __stat and __ts
// would vanish), and announces the maximum packet size in CONNACK.
func (h *storeHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Publish, packets.Disconnect:
		pk.Mods.DisallowProblemInfo = false
	case packets.Connack:
		pk.Mods.DisallowProblemInfo = false
		if pk.ReasonCode < packets.ErrUnspecifiedError.Code {
			pk.Properties.MaximumPacketSize = MaxPacketSize
		}
	}
	return pk
}

// takeoverWait bounds how long a new connection waits for an old one with
// the same client id to be removed.
const takeoverWait = 2 * time.Second

// OnSessionEstablish runs on a new connection's goroutine before mochi takes
// over or replaces a session with the same client id. mochi v2.7.9 removes an
// ending session (expiry 0, or MQTT 3 clean) by client id, and unsubscribes
// its filters by client id, after its disconnect hook returns; if that old
// connection is still winding down when the new one registers, it deletes
// the new one, which stays connected but never receives anything. So an old
// connection whose session ends is closed here and the new one proceeds only
// once mochi has removed it. (Persistent sessions are never removed that way;
// mochi's own takeover handles them.)
func (h *storeHook) OnSessionEstablish(cl *mqtt.Client, _ packets.Packet) {
	old, ok := h.srv.Clients.Get(cl.ID)
	if !ok || old == cl || !sessionEnds(old) {
		return
	}
	if !old.Closed() {
		_ = h.srv.DisconnectClient(old, packets.ErrSessionTakenOver)
	}
	deadline := time.Now().Add(takeoverWait)
	for time.Now().Before(deadline) {
		if cur, ok := h.srv.Clients.Get(cl.ID); !ok || cur != old {
			return
		}
		time.Sleep(time.Millisecond)
	}
	h.log.Warn("previous connection with the same client id still not removed; continuing", "client", cl.ID)
}

// sessionEnds reports whether cl's session ends with its connection, mochi's
// own test in attachClient.
func sessionEnds(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval == 0
	}
	return cl.Properties.Clean
}

// OnDisconnect drops the registrations of the connection that ended, and
// only those: a newer connection with the same client id keeps its own.
func (h *storeHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.mu.Lock()
	c := h.conns[cl]
	delete(h.conns, cl)
	h.mu.Unlock()
	if c != nil {
		h.store.dropObserver(c)
		c.stop()
	}
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
	}
	if v, ok := userProp(pk.Properties.User, wire.PropProtVer); ok && !supportedVersion(v) {
		h.respond(rt, pk, nil, []packets.UserProperty{
			{Key: wire.PropStatus, Val: wire.StatusUnsupportedVersion},
			{Key: wire.PropStatusMsg, Val: "unsupported protocol version " + strconv.Quote(v) + "; supported major versions: " + wire.SupportedMajorVersions},
			{Key: wire.PropRequestVer, Val: v},
			{Key: wire.PropSupportedVer, Val: wire.SupportedMajorVersions},
			{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
		})
		return pk, packets.CodeSuccessIgnore
	}
	if len(pk.Properties.CorrelationData) == 0 {
		h.respond(rt, pk, nil, []packets.UserProperty{
			{Key: wire.PropStatus, Val: wire.StatusBadRequest},
			{Key: wire.PropStatusMsg, Val: "the request has no correlation data"},
			{Key: wire.PropName, Val: "Correlation Data"},
			{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
		})
		return pk, packets.CodeSuccessIgnore
	}

	ttl := dedupDefaultTTL
	if pk.Properties.MessageExpiryInterval > 0 {
		ttl = time.Duration(pk.Properties.MessageExpiryInterval) * time.Second
	}
	e, first := h.dedup.begin(dedupKey{string(pk.Properties.CorrelationData), rt}, time.Now(), ttl)
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
	if r.hasVersion {
		props = append(props, packets.UserProperty{Key: wire.PropTimestamp, Val: r.version.String()})
	}
	h.respond(rt, pk, r.payload, props)
	return pk, packets.CodeSuccessIgnore
}

func (h *storeHook) execute(cl *mqtt.Client, pk packets.Packet) reply {
	req := request{payload: pk.Payload, clientID: cl.ID, observer: func() observer { return h.conn(cl) }}
	if v, ok := userProp(pk.Properties.User, wire.PropTimestamp); ok {
		req.ts = &v
	}
	if v, ok := userProp(pk.Properties.User, wire.PropFencingToken); ok {
		req.ft = &v
	}
	return h.store.execute(req)
}

// respond publishes a response (§3) on rt through the inline client.
func (h *storeHook) respond(rt string, req packets.Packet, payload []byte, props []packets.UserProperty) {
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   rt,
		Payload:     payload,
		PacketID:    1, // required for a QoS 1 publish; the inline client tracks nothing
		Properties: packets.Properties{
			CorrelationData:       req.Properties.CorrelationData,
			ContentType:           wire.ContentType,
			PayloadFormat:         0,
			PayloadFormatFlag:     true,
			MessageExpiryInterval: req.Properties.MessageExpiryInterval,
			User:                  props,
		},
	}
	if err := h.srv.InjectPacket(h.inline, out); err != nil {
		h.log.Warn("state store response not published", "response_topic", rt, "error", err)
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

// --- duplicate-request cache (§4.7) ---

type dedupKey struct{ corr, topic string }

type dedupEntry struct {
	key     dedupKey
	done    chan struct{} // closed once reply is set
	reply   reply
	expires time.Time
	elem    *list.Element
}

// dedupCache remembers the reply to each (correlation data, response topic)
// until the request's message expiry, bounded in entries and bytes (oldest
// evicted first).
type dedupCache struct {
	mu    sync.Mutex
	m     map[dedupKey]*dedupEntry
	order list.List // of *dedupEntry, oldest first
	bytes int
}

// begin returns the live entry for k; first=true means the caller must
// execute the request and call finish.
func (c *dedupCache) begin(k dedupKey, now time.Time, ttl time.Duration) (e *dedupEntry, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[dedupKey]*dedupEntry)
	}
	if e := c.m[k]; e != nil && now.Before(e.expires) {
		return e, false
	}
	c.evictLocked(now)
	e = &dedupEntry{key: k, done: make(chan struct{}), expires: now.Add(ttl)}
	e.elem = c.order.PushBack(e)
	c.m[k] = e
	return e, true
}

func (e *dedupEntry) finish(r reply, c *dedupCache) {
	c.mu.Lock()
	e.reply = r
	if e.elem != nil {
		c.bytes += len(r.payload)
	}
	c.mu.Unlock()
	close(e.done)
}

// evictLocked drops expired entries from the front and the oldest entries
// while over a bound.
func (c *dedupCache) evictLocked(now time.Time) {
	for f := c.order.Front(); f != nil; f = c.order.Front() {
		e := f.Value.(*dedupEntry)
		if now.Before(e.expires) && c.order.Len() < dedupMaxEntries && c.bytes <= dedupMaxBytes {
			return
		}
		c.order.Remove(f)
		c.bytes -= len(e.reply.payload)
		e.elem = nil
		if c.m[e.key] == e {
			delete(c.m, e.key)
		}
	}
}

// --- NOTIFY delivery (§13.3, §13.4) ---

// conn is the store's view of one MQTT connection that registered keys. It
// queues the connection's notifications in change order and writes them
// from its own goroutine, so a slow or dead client stalls nobody else.
type conn struct {
	h       *storeHook
	cl      *mqtt.Client
	q       chan notification
	done    chan struct{}
	once    sync.Once
	dropped atomic.Uint64
}

// conn returns the delivery state of cl, creating it (and its goroutine) on
// first use.
func (h *storeHook) conn(cl *mqtt.Client) *conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.conns[cl]; c != nil {
		return c
	}
	c := &conn{h: h, cl: cl, q: make(chan notification, notifyQueueLen), done: make(chan struct{})}
	if h.closed {
		c.stop()
		return c
	}
	h.conns[cl] = c
	h.wg.Add(1)
	go c.run()
	return c
}

// closeConns stops every delivery goroutine and waits for them.
func (h *storeHook) closeConns() {
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	for _, c := range conns {
		h.store.dropObserver(c)
		c.stop()
	}
	h.wg.Wait()
}

func (c *conn) clientID() string { return c.cl.ID }

// notify queues n without blocking; a full queue drops it (counted, logged).
func (c *conn) notify(n notification) {
	select {
	case <-c.done:
		c.drop(n, "connection closed")
	case c.q <- n:
	default:
		c.drop(n, "notification queue full")
	}
}

func (c *conn) drop(n notification, why string) {
	c.h.notifyDropped.Add(1)
	if d := c.dropped.Add(1); d%1000 == 1 {
		c.h.log.Warn("notification dropped", "client", c.cl.ID, "key", string(n.key), "reason", why, "dropped_for_client", d)
	}
}

func (c *conn) stop() { c.once.Do(func() { close(c.done) }) }

func (c *conn) run() {
	defer c.h.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case n := <-c.q:
			c.deliver(n)
		}
	}
}

// deliver writes one NOTIFY into the client's session whether or not it
// holds a matching subscription, exactly once: at the subscription's QoS
// (and with its identifiers) if it has one, else QoS 1.
func (c *conn) deliver(n notification) {
	topic := wire.NotifyTopic(c.cl.ID, n.key)
	if len(topic) > 65535 {
		c.drop(n, "notify topic longer than 65535 bytes")
		return
	}
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   topic,
		Payload:     n.payload(),
		Properties: packets.Properties{
			ContentType:       wire.ContentType,
			PayloadFormatFlag: true,
			User: []packets.UserProperty{
				{Key: wire.PropTimestamp, Val: n.version.String()},
				{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
			},
		},
		Created: time.Now().Unix(),
	}
	if sub, ok := c.h.srv.Topics.Subscribers(topic).Subscriptions[c.cl.ID]; ok {
		out.FixedHeader.Qos = min(sub.Qos, 1)
		for _, id := range sub.Identifiers {
			if id > 0 {
				out.Properties.SubscriptionIdentifier = append(out.Properties.SubscriptionIdentifier, id)
			}
		}
		sort.Ints(out.Properties.SubscriptionIdentifier)
	}
	if out.FixedHeader.Qos > 0 {
		id, err := c.cl.NextPacketID()
		if err != nil {
			c.drop(n, "packet ids exhausted")
			return
		}
		out.PacketID = uint16(id)
		if c.cl.State.Inflight.Set(out) {
			atomic.AddInt64(&c.h.srv.Info.Inflight, 1)
		}
		c.cl.State.Inflight.DecreaseSendQuota()
	}
	if err := c.cl.WritePacket(out); err != nil {
		if out.FixedHeader.Qos > 0 && c.cl.State.Inflight.Delete(out.PacketID) {
			atomic.AddInt64(&c.h.srv.Info.Inflight, -1)
			c.cl.State.Inflight.IncreaseSendQuota()
		}
		c.drop(n, "write failed: "+err.Error())
	}
}
