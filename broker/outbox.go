package broker

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/protocol/wire"
)

// This file is the state store's output to one MQTT connection: the
// responses to its requests and the notifications of the keys it registered
// (statestore-protocol.md §3, §13.3, §13.4), in order, written by one
// goroutine per connection so a slow or dead client stalls nobody else.
//
// The outbox is bounded in messages and bytes, counting both what waits to
// be written and what was written but not yet acknowledged (QoS 1): a client
// that stops reading or acknowledging cannot make the broker hold more than
// the bound for it. A client that overflows it is disconnected with reason
// code 0x97 (quota exceeded), so its SDK reconnects, registers its keys again
// and re-reads them; the overflow is logged and counted, never a silent drop.
// Writes also respect the client's Receive Maximum (MQTT-3.3.4-9): past it
// the outbox waits for acknowledgements.
//
// With a data directory, a message reporting a change waits here, on the
// writer goroutine, until the change is durable (persist.go): the request's
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

// message is one PUBLISH the store sends to a connection.
type message struct {
	topic    string
	payload  []byte
	props    packets.Properties
	response bool   // only delivered through a matching subscription
	key      []byte // notification key, for logs
	pos      uint64 // journal position to be durable before it is written (0: none)
}

func (m *message) size() int {
	return len(m.topic) + len(m.payload) + len(m.props.CorrelationData) + 64
}

// outboxStats are the counters every outbox of a broker adds to.
type outboxStats struct {
	overflows atomic.Uint64 // clients disconnected because their outbox overflowed
	dropped   atomic.Uint64 // messages not delivered (connection gone, write failed)
	notified  atomic.Uint64 // notifications queued
}

// outbox delivers the store's messages to one connection.
type outbox struct {
	srv      *mqtt.Server
	cl       *mqtt.Client
	log      *slog.Logger
	stats    *outboxStats
	store    *store // waitDurable
	maxBytes int
	maxLen   int
	wg       *sync.WaitGroup // the broker's: this outbox's goroutines
	// mayRead, when set, filters notifications: the ACL may have been
	// reloaded since the client registered (acl_authz.go).
	mayRead func(key []byte) bool

	wake chan struct{} // cap 1: queue grew or an ack arrived
	done chan struct{} // closed by stop
	once sync.Once

	mu       sync.Mutex
	queue    []*message
	bytes    int            // queued + unacknowledged
	unacked  map[uint16]int // packet id -> size, written QoS 1 messages
	overflow bool
}

func newOutbox(srv *mqtt.Server, cl *mqtt.Client, log *slog.Logger, stats *outboxStats, s *store, maxBytes, maxLen int, wg *sync.WaitGroup) *outbox {
	return &outbox{srv: srv, cl: cl, log: log, stats: stats, store: s, maxBytes: maxBytes, maxLen: maxLen, wg: wg,
		wake: make(chan struct{}, 1), done: make(chan struct{}), unacked: map[uint16]int{}}
}

func (o *outbox) clientID() string { return o.cl.ID }

// notify queues a notification; it never blocks (the store calls it with its
// lock held).
func (o *outbox) notify(n notification) {
	if o.mayRead != nil && !o.mayRead(n.key) {
		return
	}
	user := []packets.UserProperty{
		{Key: wire.PropTimestamp, Val: n.version.String()},
		{Key: wire.PropProtVer, Val: wire.ProtocolVersion},
	}
	if n.src != "" { // §13.3: optional; names the writer, for provenance (ssrun why)
		user = append(user, packets.UserProperty{Key: wire.PropSourceID, Val: n.src})
	}
	queued := o.push(&message{
		topic:   wire.NotifyTopic(o.cl.ID, n.key),
		payload: n.payload(),
		props: packets.Properties{
			ContentType:       wire.ContentType,
			PayloadFormatFlag: true,
			User:              user,
		},
		key: n.key,
		pos: n.pos,
	})
	if queued {
		o.stats.notified.Add(1)
	}
}

// push queues m without blocking. It reports false when m was not queued:
// the outbox is stopped, or it overflowed (the client is being disconnected).
func (o *outbox) push(m *message) bool {
	if len(m.topic) > 65535 {
		o.drop(m, "topic longer than 65535 bytes")
		return true // nothing more can be done for it; not the client's fault
	}
	select {
	case <-o.done:
		return false
	default:
	}
	o.mu.Lock()
	if o.overflow {
		o.mu.Unlock()
		return false
	}
	sz := m.size()
	if len(o.queue)+len(o.unacked) >= o.maxLen || (o.bytes > 0 && o.bytes+sz > o.maxBytes) {
		o.overflow = true
		queued, bytes := len(o.queue)+len(o.unacked), o.bytes
		o.queue = nil
		o.mu.Unlock()
		o.overflowed(m, queued, bytes)
		return false
	}
	o.queue = append(o.queue, m)
	o.bytes += sz
	o.mu.Unlock()
	o.signal()
	return true
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// overflowed disconnects the client with a reason code, from a goroutine:
// the DISCONNECT write may block on a client that stopped reading, and
// closing its socket after overflowWait unblocks it.
func (o *outbox) overflowed(m *message, queued, bytes int) {
	o.stats.overflows.Add(1)
	o.log.Warn("state store client disconnected: its output queue is full (not reading or acknowledging)",
		"client", o.cl.ID, "remote", o.cl.Net.Remote, "queued", queued, "bytes", bytes,
		"limit_messages", o.maxLen, "limit_bytes", o.maxBytes, "key", string(m.key))
	o.stop()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = o.srv.DisconnectClient(o.cl, codeOutboxOverflow)
		}()
		t := time.NewTimer(overflowWait)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			o.cl.Stop(codeOutboxOverflow) // closes the socket: the write fails
			<-done
		}
	}()
}

func (o *outbox) drop(m *message, why string) {
	if n := o.stats.dropped.Add(1); n%1000 == 1 {
		o.log.Warn("state store message not delivered", "client", o.cl.ID, "topic_bytes", len(m.topic),
			"key", string(m.key), "reason", why, "dropped_total", n)
	}
}

// acked releases the room of a written message the client acknowledged (or
// that mochi dropped from its inflight store).
func (o *outbox) acked(id uint16) {
	o.mu.Lock()
	sz, ok := o.unacked[id]
	if ok {
		delete(o.unacked, id)
		o.bytes -= sz
	}
	o.mu.Unlock()
	if ok {
		o.signal()
	}
}

func (o *outbox) stop() { o.once.Do(func() { close(o.done) }) }

// start runs the writer goroutine.
func (o *outbox) start() {
	o.wg.Add(1)
	go o.run()
}

func (o *outbox) run() {
	defer o.wg.Done()
	for {
		m := o.next()
		if m == nil {
			return
		}
		if err := o.store.waitDurable(m.pos, o.done); err != nil {
			o.release(m.size())
			if errors.Is(err, errJournalClosed) {
				return // stopped
			}
			o.drop(m, "change not persisted: "+err.Error())
			continue
		}
		o.write(m)
	}
}

// next waits for a message that may be written now: the queue is not empty
// and the client's Receive Maximum leaves room. It returns nil once stopped.
func (o *outbox) next() *message {
	for {
		o.mu.Lock()
		if len(o.queue) > 0 && len(o.unacked) < receiveMaximum(o.cl) {
			m := o.queue[0]
			o.queue[0] = nil
			o.queue = o.queue[1:]
			if len(o.queue) == 0 {
				o.queue = nil // let a burst's backing array go
			}
			o.mu.Unlock()
			return m
		}
		o.mu.Unlock()
		select {
		case <-o.done:
			return nil
		case <-o.wake:
		}
	}
}

// write sends m into the client's session: a response only through a
// matching subscription of this client (at its QoS and identifiers), a
// notification whether or not one matches (§13.4), exactly once.
func (o *outbox) write(m *message) {
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   m.topic,
		Payload:     m.payload,
		Properties:  m.props,
		Created:     time.Now().Unix(),
	}
	subscribed := applySubscription(o.srv, o.cl, &out)
	sz := m.size()
	if m.response && !subscribed {
		o.release(sz)
		return // unsubscribed since the request: nobody is listening
	}
	if out.FixedHeader.Qos == 0 {
		err := o.cl.WritePacket(out)
		o.release(sz)
		if err != nil {
			o.drop(m, "write failed: "+err.Error())
		}
		return
	}
	id, ok := trackInflight(o.srv, o.cl, &out)
	if !ok {
		o.release(sz)
		o.drop(m, "packet ids exhausted")
		return
	}
	o.mu.Lock()
	o.unacked[id] = sz
	o.mu.Unlock()
	if err := o.cl.WritePacket(out); err != nil {
		untrackInflight(o.srv, o.cl, id)
		o.acked(id)
		o.drop(m, "write failed: "+err.Error())
	}
}

func (o *outbox) release(sz int) {
	o.mu.Lock()
	o.bytes -= sz
	o.mu.Unlock()
}
