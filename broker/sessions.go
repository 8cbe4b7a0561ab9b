package broker

import (
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/ssrun/ssrun/store"
)

// This file follows MQTT sessions for the store: the outbox of each session
// the store sent to (outbox.go), from connection to connection, and the
// watcher of each connection that registered keys. Registrations belong to
// a connection (statestore-protocol.md §13.1: they end with it); what the
// store has sent or queued belongs to the session, like any MQTT message.

// watcher owns one connection's KEYNOTIFY registrations and delivers their
// notifications into the session's outbox.
type watcher struct {
	cl  *mqtt.Client
	box *outbox
	// mayRead, when set, filters notifications: the ACL may have been
	// reloaded since the client registered (acl_authz.go).
	mayRead func(key []byte) bool
}

func (w *watcher) ClientID() string { return w.cl.ID }

// Notify queues a notification; it never blocks (the store calls it with
// its lock held).
func (w *watcher) Notify(n store.Notification) {
	if w.mayRead != nil && !w.mayRead(n.Key) {
		return
	}
	w.box.notify(n)
}

// outbox returns the outbox of cl's session, creating it on first use and
// attaching cl to it when cl is the session's connection.
func (h *storeHook) outbox(cl *mqtt.Client) *outbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o := h.boxes[cl.ID]; o != nil {
		return o
	}
	o := newOutbox(h, cl.ID)
	if h.closed {
		o.close()
		return o
	}
	h.boxes[cl.ID] = o
	// The connection holding the session, which is not cl when cl is being
	// taken over and still runs its last requests.
	if cur := h.conns[cl.ID]; cur != nil {
		o.attach(cur)
	}
	return o
}

// watcher returns cl's watcher, creating it on first use. It is registered
// even if cl is already closing: its OnDisconnect, which drops it and its
// registrations, is still to come on the goroutine calling us.
func (h *storeHook) watcher(cl *mqtt.Client) *watcher {
	box := h.outbox(cl)
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.watchers[cl]; w != nil {
		return w
	}
	w := &watcher{cl: cl, box: box}
	if h.authz != nil {
		if check := h.authz.keyCheck(cl); check != nil {
			// A reload may revoke a key the client registered for.
			w.mayRead = func(key []byte) bool { return check(store.Read, key) }
		}
	}
	if !h.closed {
		h.watchers[cl] = w
	}
	return w
}

// OnSessionEstablished runs once mochi has sent the CONNACK, before it reads
// the connection's first packet: a connection that resumes a session takes
// over its outbox (and gets its unacknowledged messages again); a clean
// start drops it.
func (h *storeHook) OnSessionEstablished(cl *mqtt.Client, pk packets.Packet) {
	h.mu.Lock()
	h.conns[cl.ID] = cl
	h.since[cl] = time.Now()
	o := h.boxes[cl.ID]
	if o != nil && pk.Connect.Clean {
		delete(h.boxes, cl.ID)
	}
	h.mu.Unlock()
	switch {
	case o == nil:
	case pk.Connect.Clean:
		o.close()
	default:
		o.attach(cl)
	}
}

// disconnected drops cl's registrations, and only those (a newer connection
// with the same client id keeps its own), and detaches cl from its
// session's outbox, which is dropped if the session ends (expire).
func (h *storeHook) disconnected(cl *mqtt.Client, expire bool) {
	h.mu.Lock()
	w := h.watchers[cl]
	delete(h.watchers, cl)
	delete(h.since, cl)
	if h.conns[cl.ID] == cl {
		delete(h.conns, cl.ID)
	}
	o := h.boxes[cl.ID]
	h.mu.Unlock()
	if w != nil {
		h.store.DropObserver(w)
	}
	if o == nil {
		return
	}
	o.detach(cl)
	if expire && !o.attached() { // not resumed by a newer connection
		h.dropOutbox(o)
	}
}

// expired drops the outbox of a session mochi expired, unless a connection
// resumed it meanwhile.
func (h *storeHook) expired(cl *mqtt.Client) {
	h.mu.Lock()
	o := h.boxes[cl.ID]
	h.mu.Unlock()
	if o != nil && !o.attached() {
		h.dropOutbox(o)
	}
}

func (h *storeHook) dropOutbox(o *outbox) {
	h.mu.Lock()
	if h.boxes[o.id] == o {
		delete(h.boxes, o.id)
	}
	h.mu.Unlock()
	o.close()
}

// OnPacketRead hands a client's PUBACK to its session's outbox (mochi's
// processPuback ignores the ids of the store's messages, mochi.go), caps
// the session expiry a DISCONNECT sets (sessionexpiry.go) and resolves a
// PUBLISH's topic alias (mochi.go resolveTopicAlias).
func (h *storeHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		resolveTopicAlias(cl, &pk)
	case packets.Puback:
		if o := h.box(cl.ID); o != nil {
			o.acked(cl, pk.PacketID)
		}
	case packets.Disconnect:
		capDisconnectExpiry(&pk, h.maxSessionExpiry)
	}
	return pk, nil
}

// OnQosComplete and OnQosDropped wake cl's writer: mochi's own messages in
// flight to cl count against its Receive Maximum.
func (h *storeHook) OnQosComplete(cl *mqtt.Client, _ packets.Packet) { h.wake(cl) }
func (h *storeHook) OnQosDropped(cl *mqtt.Client, _ packets.Packet)  { h.wake(cl) }

func (h *storeHook) wake(cl *mqtt.Client) {
	if o := h.box(cl.ID); o != nil {
		o.wake(cl)
	}
}

func (h *storeHook) box(id string) *outbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.boxes[id]
}

// closeBoxes stops every outbox and waits for their writers.
func (h *storeHook) closeBoxes() {
	h.mu.Lock()
	h.closed = true
	boxes, watchers := h.boxes, h.watchers
	h.boxes, h.watchers, h.conns = map[string]*outbox{}, map[*mqtt.Client]*watcher{}, map[string]*mqtt.Client{}
	clear(h.since)
	h.mu.Unlock()
	for _, w := range watchers {
		h.store.DropObserver(w)
	}
	for _, o := range boxes {
		o.close()
	}
	h.wg.Wait()
}
