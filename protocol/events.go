package protocol

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/paho"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// Notification operations carried in Event.Op.
const (
	OpSet    = resp.OpSet    // "SET": the key was written; Value is the new value
	OpDelete = resp.OpDelete // "DELETE": the key was deleted or expired
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// EventNotify is a key change: Key, Op, Value (SET only), Version.
	EventNotify EventKind = iota + 1
	// EventConnected follows every (re)connection, after the subscriptions
	// are in place and every watched key has been re-registered: changes
	// after it are notified, changes while disconnected are not, so
	// re-read watched keys here.
	EventConnected
	// EventDisconnected reports the loss of a connection for which
	// EventConnected was emitted; Err says why when known.
	EventDisconnected
	// EventOverflow stands where notifications were dropped because the
	// event queue was full; Err (wrapping ErrEventsDropped) says how many.
	// Re-read watched keys to catch up.
	EventOverflow
)

func (k EventKind) String() string {
	switch k {
	case EventNotify:
		return "notify"
	case EventConnected:
		return "connected"
	case EventDisconnected:
		return "disconnected"
	case EventOverflow:
		return "overflow"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one item of the Events stream.
type Event struct {
	Kind    EventKind
	Key     []byte
	Op      string // OpSet or OpDelete
	Value   []byte
	Version hlc.HLC
	// Source is the notification's __srcId: the client id of the change's
	// writer when the store names it (ssrun's embedded broker does; the
	// protocol leaves it optional, so it may be empty or the store's id).
	Source string
	Err    error // why, for EventDisconnected and EventOverflow
}

// Events returns the client's single ordered event stream: notifications in
// arrival order, interleaved with connection changes. It is closed by Close.
// Events are queued (up to Config.EventBuffer) so that the MQTT receive path
// never blocks on a slow reader.
func (c *Client) Events() <-chan Event { return c.events.out }

// EventsQueued is how many events the client has queued on its Events
// stream so far (dropped notifications are not counted; an EventOverflow
// is). A reader that counts the events it has handled knows none is in
// flight when its count equals this one: with a client of a store in the
// same process (NewLocal), a change's notification is queued before the
// call that made it returns.
func (c *Client) EventsQueued() uint64 { return c.events.queued.Load() }

// lastNotify is the last notification delivered for a watched key, for
// duplicate suppression.
type lastNotify struct {
	op      string
	version hlc.HLC
	seen    bool
}

// handleNotify validates a notification and queues it. It runs on paho's
// delivery goroutine and never blocks. Notifications are accepted whether
// they arrived through the subscription or were pushed without one.
//
// A notification that comes before the connection is ready (a persistent
// session's message redelivered as it resumes, while the client still
// subscribes) is dropped: it reports a change from before the outage,
// which the events after EventConnected cover (the host re-reads every
// watched key then), and handled now it would run a rule whose calls
// fail, the connection not being ready, with nothing to redo them.
func (c *Client) handleNotify(p *paho.Publish) {
	c.mu.Lock()
	ready := c.ready != nil
	c.mu.Unlock()
	if !ready {
		c.stats.notificationsEarly.Add(1)
		c.log.Debug("dropping a notification that came before the connection was ready: the resync after it covers the key", "topic", p.Topic)
		return
	}
	key, ok := wire.ParseNotifyTopic(c.clientID, p.Topic)
	if !ok {
		c.dropNotify("topic is not a notification topic of this client", "topic", p.Topic)
		return
	}
	var ts, src string
	if p.Properties != nil {
		ts, ok = userProp(p.Properties.User, wire.PropTimestamp)
		src, _ = userProp(p.Properties.User, wire.PropSourceID)
	}
	if !ok {
		c.dropNotify("notification without "+wire.PropTimestamp, "key", keyText(key))
		return
	}
	version, err := hlc.Parse(ts)
	if err != nil {
		c.dropNotify("notification with a malformed "+wire.PropTimestamp, "key", keyText(key), "err", err)
		return
	}
	n, err := resp.ParseNotify(p.Payload)
	if err == nil && n.Op != OpSet && n.Op != OpDelete {
		err = fmt.Errorf("unknown operation %q", n.Op)
	}
	if err == nil && n.Op == OpSet && n.Value == nil {
		err = fmt.Errorf("SET without VALUE")
	}
	if err != nil {
		c.dropNotify("malformed notification payload", "key", keyText(key), "err", err)
		return
	}
	if err := c.clock.Observe(version); err != nil {
		c.dropNotify("notification version too far ahead", "key", keyText(key), "err", err)
		return
	}
	if n.Op == OpDelete {
		n.Value = nil
	}
	c.rmu.Lock()
	last := c.watched[string(key)]
	dup := last != nil && last.seen && last.op == n.Op && last.version == version
	if last != nil && !dup {
		*last = lastNotify{op: n.Op, version: version, seen: true}
	}
	c.rmu.Unlock()
	if dup {
		c.stats.duplicatesSuppressed.Add(1)
		return
	}
	c.stats.notifications.Add(1)
	c.events.push(Event{Kind: EventNotify, Key: key, Op: n.Op, Value: n.Value, Version: version, Source: src})
}

func (c *Client) dropNotify(msg string, args ...any) {
	c.stats.notificationsDropped.Add(1)
	c.log.Warn("dropping notification: "+msg, args...)
}

// eventQueue is an unbounded-by-design FIFO with a bound on notifications,
// drained into an unbuffered channel by one goroutine. push never blocks.
type eventQueue struct {
	log   *slog.Logger
	bound int
	out   chan Event

	mu      sync.Mutex
	buf     []Event
	head    int
	lost    uint64 // notifications dropped since the last EventOverflow
	dropped atomic.Uint64
	queued  atomic.Uint64 // events appended to buf, ever
	closed  bool

	wake chan struct{} // cap 1
	stop chan struct{}
	done chan struct{}
}

func newEventQueue(bound int, log *slog.Logger) *eventQueue {
	q := &eventQueue{
		log:   log,
		bound: bound,
		out:   make(chan Event),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	go q.pump()
	return q
}

// push appends e. A notification is dropped (counted, logged when the
// overflow starts) when the queue holds bound events; the next event that
// fits is preceded by one EventOverflow. Connection events always fit.
func (q *eventQueue) push(e Event) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	n := len(q.buf) - q.head
	if e.Kind == EventNotify && (n >= q.bound || q.lost > 0 && n+1 >= q.bound) {
		q.lost++
		q.dropped.Add(1)
		if q.lost == 1 {
			q.log.Warn("event queue full: dropping notifications until the reader catches up", "bound", q.bound)
		}
		q.mu.Unlock()
		return
	}
	if q.lost > 0 {
		q.log.Warn("event queue has room again", "dropped", q.lost)
		q.buf = append(q.buf, Event{Kind: EventOverflow, Err: fmt.Errorf("%w: %d", ErrEventsDropped, q.lost)})
		q.queued.Add(1)
		q.lost = 0
	}
	q.buf = append(q.buf, e)
	q.queued.Add(1)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) pop() (Event, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.buf) {
		q.buf, q.head = q.buf[:0], 0
		if cap(q.buf) > 4096 { // give back the memory of a burst
			q.buf = nil
		}
		return Event{}, false
	}
	e := q.buf[q.head]
	q.buf[q.head] = Event{}
	q.head++
	if q.head > 1024 && q.head*2 > len(q.buf) { // compact
		q.buf = q.buf[:copy(q.buf, q.buf[q.head:])]
		q.head = 0
	}
	return e, true
}

func (q *eventQueue) pump() {
	defer close(q.done)
	defer close(q.out)
	for {
		e, ok := q.pop()
		if !ok {
			select {
			case <-q.wake:
				continue
			case <-q.stop:
				return
			}
		}
		select {
		case q.out <- e:
		case <-q.stop:
			return
		}
	}
}

// close stops the pump, discards queued events and closes out.
func (q *eventQueue) close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	q.buf, q.head = nil, 0
	q.mu.Unlock()
	close(q.stop)
	<-q.done
}

func (q *eventQueue) droppedTotal() uint64 { return q.dropped.Load() }
