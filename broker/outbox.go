package broker

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// This file is the state store's output to one MQTT session: the responses
// to its requests and the notifications of the keys it registered
// (statestore-protocol.md §3, §13.3, §13.4), in order, written by one
// goroutine per connection (writer.go) so a slow or dead client stalls
// nobody else.
//
// The outbox belongs to the session (the client id), not to one connection:
// what is queued or written but unacknowledged when a connection ends stays
// for a connection that resumes the session (Clean Start 0), which gets the
// unacknowledged messages again first, DUP and with their packet ids
// (MQTT-4.4.0-1), then the rest. A session that ends with its connection, or
// is started clean, or expires, drops its outbox.
//
// The store's QoS 1 messages are tracked here, not in mochi's inflight store
// (mochi.go says why: sharing it deadlocked mochi and lost replies): the
// outbox gives each one the connection's next packet id that neither mochi
// nor the outbox has in flight, and releases it when the client's PUBACK
// arrives (the hook's OnPacketRead). Writes respect the client's Receive
// Maximum (MQTT-3.3.4-9), counting mochi's own messages in flight to it.
//
// The outbox is bounded in messages and bytes, counting both what waits to
// be written and what was written but not yet acknowledged: a client that
// stops reading or acknowledging cannot make the broker hold more than the
// bound for it, across its reconnections too. A client that overflows it is
// disconnected with reason code 0x97 (quota exceeded) and its outbox
// emptied, so its SDK reconnects, registers its keys again and re-reads
// them; the overflow is logged and counted, never a silent drop.
//
// With a data directory, a message reporting a change waits on the writer
// goroutine until the change is durable (persist.go): the request's
// goroutine never blocks on the disk, and a message whose change could not
// be persisted is dropped (counted), never sent.

// Outbox bounds used when Config leaves them zero.
const (
	DefaultClientQueueBytes = 16 << 20
	DefaultClientQueueLen   = 4096
)

// codeOutboxOverflow disconnects a client whose outbox overflowed.
var codeOutboxOverflow = packets.Code{Code: packets.ErrQuotaExceeded.Code, Reason: "state store output queue full: the client is not reading or acknowledging"}

// overflowWait bounds the DISCONNECT write to an overflowing client before
// its socket is closed.
const overflowWait = time.Second

// message is one PUBLISH the store sends to a session.
type message struct {
	topic    string
	payload  []byte
	props    packets.Properties
	response bool      // only delivered through a matching subscription
	key      []byte    // notification key, for logs
	pos      uint64    // journal position to be durable before it is written (0: none)
	gen      uint64    // the outbox's generation when queued (see outbox.gen)
	queued   time.Time // when queued, for a message with a Message Expiry

	// Set once written at QoS 1, until acknowledged:
	pk      *packets.Packet // as written; resent with DUP on a resumed session
	seq     uint64          // write order
	current bool            // written on the attached connection (counts against its Receive Maximum)
}

func (m *message) size() int {
	return len(m.topic) + len(m.payload) + len(m.props.CorrelationData) + 64
}

// outboxStats are the counters every outbox of a broker adds to.
type outboxStats struct {
	overflows atomic.Uint64 // clients disconnected because their outbox overflowed
	dropped   atomic.Uint64 // messages not delivered (session ended, write failed)
	notified  atomic.Uint64 // notifications queued
}

// outbox delivers the store's messages to one session.
type outbox struct {
	id       string // the session's client id
	srv      *mqtt.Server
	log      *slog.Logger
	stats    *outboxStats
	store    *store.Store // waitDurable
	maxBytes int
	maxLen   int
	wg       *sync.WaitGroup  // the broker's: the writers' goroutines
	offline  *offlineOutboxes // the bound of sessions without a connection

	mu         sync.Mutex
	w          *writer             // the attached connection's; nil while none is
	queue      []*message          // not written yet, in order
	resend     []*message          // unacknowledged, written on an earlier connection: written again first
	unacked    map[uint16]*message // written at QoS 1, not acknowledged yet
	onConn     int                 // of unacked, written on w's connection
	bytes      int                 // queued + unacknowledged
	seq        uint64
	gen        uint64 // counts emptyings: a message of an earlier generation holds no room
	overflowed bool   // emptied for overflowing; refuses messages until a connection attaches
	closed     bool   // the session ended
}

func newOutbox(h *storeHook, id string) *outbox {
	return &outbox{id: id, srv: h.srv, log: h.log, stats: &h.outStats, store: h.store,
		maxBytes: h.queueBytes, maxLen: h.queueLen, wg: &h.wg, offline: h.offline, unacked: map[uint16]*message{}}
}

// push queues m without blocking (the store calls it with its lock held). It
// reports false when m was not queued: the session ended, or it overflowed.
func (o *outbox) push(m *message) bool {
	if len(m.topic) > 65535 {
		o.drop(m, "topic longer than 65535 bytes")
		return false
	}
	o.mu.Lock()
	if o.closed || o.overflowed {
		o.mu.Unlock()
		o.drop(m, "session ended or overflowed")
		return false
	}
	sz := m.size()
	if len(o.queue)+len(o.unacked) >= o.maxLen || (o.bytes > 0 && o.bytes+sz > o.maxBytes) {
		queued, bytes := len(o.queue)+len(o.unacked), o.bytes
		w := o.w
		o.emptyLocked()
		o.overflowed = true
		o.w = nil
		o.offline.remove(o) // it holds nothing and takes nothing until a connection attaches
		o.mu.Unlock()
		o.overflow(w, m, queued, bytes)
		return false
	}
	m.gen = o.gen
	if m.props.MessageExpiryInterval > 0 {
		m.queued = o.store.Now()
	}
	o.queue = append(o.queue, m)
	o.bytes += sz
	w := o.w
	victims := o.syncOfflineLocked()
	o.mu.Unlock()
	if w != nil {
		w.signal()
	}
	evict(victims)
	return true
}

// syncOfflineLocked tells the offline bound what o holds while no
// connection holds its session; it returns the outboxes to evict.
func (o *outbox) syncOfflineLocked() []*outbox {
	if o.w == nil && !o.closed && !o.overflowed {
		return o.offline.set(o, o.bytes)
	}
	o.offline.remove(o)
	return nil
}

// evict empties the outboxes of sessions without a connection that the
// offline bound chose (oldest first); one that has a connection again is
// left alone.
func evict(victims []*outbox) {
	for _, o := range victims {
		o.mu.Lock()
		if o.w != nil || o.closed {
			o.mu.Unlock()
			continue
		}
		n, bytes := len(o.queue)+len(o.unacked), o.bytes
		o.emptyLocked()
		o.offline.remove(o)
		o.mu.Unlock()
		if n == 0 {
			continue
		}
		o.stats.dropped.Add(uint64(n))
		o.log.Warn("state store session without a connection: its queued replies and notifications are dropped (sessions without a connection hold more than the offline bound)",
			"client", o.id, "messages", n, "bytes", bytes, "limit_bytes", o.offline.max)
	}
}

// emptyLocked forgets every message of the session.
func (o *outbox) emptyLocked() {
	o.queue, o.resend, o.unacked = nil, nil, map[uint16]*message{}
	o.bytes, o.onConn = 0, 0
	o.gen++
}

// overflow counts and logs an overflow and disconnects the connection of w
// (nil: the session has none) with a reason code, from a goroutine: the
// DISCONNECT write may block on a client that stopped reading, and closing
// its socket after overflowWait unblocks it.
func (o *outbox) overflow(w *writer, m *message, queued, bytes int) {
	o.stats.overflows.Add(1)
	if w == nil {
		o.log.Warn("state store session's output queue is full while no connection holds the session: its messages are dropped",
			"client", o.id, "queued", queued, "bytes", bytes,
			"limit_messages", o.maxLen, "limit_bytes", o.maxBytes, "key", string(m.key))
		return
	}
	o.log.Warn("state store client disconnected: its output queue is full (not reading or acknowledging)",
		"client", o.id, "queued", queued, "bytes", bytes,
		"limit_messages", o.maxLen, "limit_bytes", o.maxBytes, "key", string(m.key))
	w.stop()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = o.srv.DisconnectClient(w.cl, codeOutboxOverflow)
		}()
		t := time.NewTimer(overflowWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			w.cl.Stop(codeOutboxOverflow) // closes the socket: the write fails
			<-done
		}
	}()
}

func (o *outbox) drop(m *message, why string) {
	if n := o.stats.dropped.Add(1); n%1000 == 1 {
		o.log.Warn("state store message not delivered", "client", o.id, "topic_bytes", len(m.topic),
			"key", string(m.key), "reason", why, "dropped_total", n)
	}
}

// attach makes cl the session's connection: it gets the unacknowledged
// messages again first (DUP, their packet ids), then the queue.
func (o *outbox) attach(cl *mqtt.Client) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	if o.w != nil {
		o.w.stop()
	}
	o.overflowed = false
	o.resend = o.resend[:0]
	var last uint16
	for _, m := range o.unacked {
		m.current = false
		o.resend = append(o.resend, m)
	}
	slices.SortFunc(o.resend, func(a, b *message) int { return int(a.seq - b.seq) })
	if n := len(o.resend); n > 0 {
		last = o.resend[n-1].pk.PacketID
	}
	o.onConn = 0
	o.w = newWriter(o, cl, last)
	o.offline.remove(o)
	o.wg.Add(1)
	go o.w.run()
}

// detach ends cl's part in the session (its connection ended); what is
// queued or unacknowledged stays for a connection that resumes it.
func (o *outbox) detach(cl *mqtt.Client) {
	o.mu.Lock()
	var victims []*outbox
	if o.w != nil && o.w.cl == cl {
		o.w.stop()
		o.w = nil
		victims = o.syncOfflineLocked()
	}
	o.mu.Unlock()
	evict(victims)
}

// attached reports whether a connection holds the session.
func (o *outbox) attached() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.w != nil
}

// close ends the session's output: its messages are forgotten.
func (o *outbox) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
	if o.w != nil {
		o.w.stop()
		o.w = nil
	}
	o.emptyLocked()
	o.offline.remove(o)
}

// acked releases the message with packet id id that cl acknowledged.
func (o *outbox) acked(cl *mqtt.Client, id uint16) {
	o.mu.Lock()
	w := o.w
	m := o.unacked[id]
	if w == nil || w.cl != cl || m == nil {
		o.mu.Unlock()
		return
	}
	delete(o.unacked, id)
	o.bytes -= m.size()
	if m.current {
		o.onConn--
		cl.State.Inflight.IncreaseSendQuota() // atomic; see writer.write
	} else {
		// Acknowledged before it was written again on this connection: it
		// need not be.
		o.resend = slices.DeleteFunc(o.resend, func(r *message) bool { return r == m })
	}
	o.mu.Unlock()
	w.signal()
}

// wake tells the writer of cl that room may have been freed (mochi's own
// messages to cl were acknowledged).
func (o *outbox) wake(cl *mqtt.Client) {
	o.mu.Lock()
	w := o.w
	o.mu.Unlock()
	if w != nil && w.cl == cl {
		w.signal()
	}
}

// next waits until w may write a message: it returns the next one (resent
// first), or nil once w is stopped. A message to resend comes with its
// packet as written before.
func (o *outbox) next(w *writer) *message {
	for {
		room := receiveMaximum(w.cl) - mochiInflight(w.cl)
		o.mu.Lock()
		if o.w != w {
			o.mu.Unlock()
			return nil
		}
		if room-o.onConn > 0 {
			var m *message
			switch {
			case len(o.resend) > 0:
				m = o.resend[0]
				o.resend = o.resend[1:]
				m.current = true
				o.onConn++
			case len(o.queue) > 0:
				m = o.queue[0]
				o.queue[0] = nil
				o.queue = o.queue[1:]
				if len(o.queue) == 0 {
					o.queue = nil // let a burst's backing array go
				}
			}
			if m != nil {
				o.mu.Unlock()
				return m
			}
		}
		o.mu.Unlock()
		select {
		case <-w.done:
			return nil
		case <-w.wake:
		}
	}
}

// track records m, about to be written by w as pk, as unacknowledged. It
// reports taken when pk's packet id is held by another unacknowledged
// message (try the next id), and stale when w is no longer the session's
// writer (then m goes back to the front of the queue, for the next
// connection).
func (o *outbox) track(w *writer, m *message, pk *packets.Packet) (taken, stale bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.w != w {
		o.putBackLocked(m)
		return false, true
	}
	if o.unacked[pk.PacketID] != nil {
		return true, false
	}
	o.seq++
	m.pk, m.seq, m.current = pk, o.seq, true
	o.unacked[pk.PacketID] = m
	o.onConn++
	return false, false
}

// putBack returns m, taken by a writer that stopped before writing it, to
// the front of the queue.
func (o *outbox) putBack(m *message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.putBackLocked(m)
}

func (o *outbox) putBackLocked(m *message) {
	if m.gen == o.gen && !o.closed {
		o.queue = slices.Insert(o.queue, 0, m)
	}
}

// release gives back the room of a message that is not kept: written at
// QoS 0, or not to be written.
func (o *outbox) release(m *message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if m.gen == o.gen {
		o.bytes -= m.size()
		o.syncOfflineLocked() // less held: nobody to evict
	}
}

// untrack forgets the unacknowledged message with packet id id whose write
// failed for good (m is not resent: the connection is gone and a resumed
// session gets it from the unacknowledged set only if it was kept).
func (o *outbox) untrack(id uint16, m *message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.unacked[id] == m {
		delete(o.unacked, id)
		o.bytes -= m.size()
		if m.current {
			o.onConn--
		}
		o.syncOfflineLocked() // less held: nobody to evict
	}
}

// notify queues a notification for the session.
func (o *outbox) notify(n store.Notification) {
	user := []packets.UserProperty{
		{Key: wire.PropTimestamp, Val: n.Version.String()},
		{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
	}
	if n.Src != "" { // §13.3: optional; names the writer, for provenance (ssrun why)
		user = append(user, packets.UserProperty{Key: wire.PropSourceID, Val: n.Src})
	}
	queued := o.push(&message{
		topic:   wire.NotifyTopic(o.id, n.Key),
		payload: n.Payload(),
		props: packets.Properties{
			ContentType:       wire.ContentType,
			PayloadFormatFlag: true,
			User:              user,
		},
		key: n.Key,
		pos: n.Pos,
	})
	if queued {
		o.stats.notified.Add(1)
	}
}
