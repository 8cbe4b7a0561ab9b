// Package mailbox is a rule's bounded FIFO of events, which holds memory
// only while events wait. When it is full it conflates by key (see
// conflate.go): the rule then sees the latest state of every key.
package mailbox

import (
	"slices"
	"sync"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/host/provenance"
)

// Delivery is one event queued for a rule, with its lineage (see host/internal/lineage),
// or the timer whose firing it is.
type Delivery struct {
	Ev     abi.Event
	Lin    provenance.Lineage // the event's place in a chain of rule writes
	Timer  *timers.Timer
	Ticket uint64 // its place in a serial host's order (package serial); 0 otherwise
}

// Box is a rule's bounded FIFO of events. It grows up to its bound as
// events arrive and releases its memory when it drains, so an idle rule
// costs no queue memory (a buffered channel of the bound would allocate it
// all at load).
type Box struct {
	mu    sync.Mutex
	q     []Delivery
	head  int
	holes int // events taken from behind the head (PopFree), left as holes
	limit int
	// Conflation (conflate.go): keys bounds the events waiting once the
	// mailbox is full; idx, built when it first fills and kept until it
	// drains, maps a key to the sequence number of its last waiting
	// event; seq0 is the sequence number of q[head].
	keys   int
	idx    map[string]uint64
	seq0   uint64
	latest bool          // conflate always, not only when full (SetLatest)
	Ready  chan struct{} // cap 1: signalled while events wait
	// In a serial host, each event counts as its rule's work from push
	// until its worker is done with it (done), and takes a ticket.
	quiet *serial.Quiet
	rq    *serial.Rule
}

// New returns an empty mailbox of limit events, which conflates by key
// when full, up to keys events waiting (see conflate.go).
func New(limit, keys int, q *serial.Quiet, rq *serial.Rule) *Box {
	return &Box{limit: limit, keys: keys, Ready: make(chan struct{}, 1), quiet: q, rq: rq}
}

// Outcome is what Push did with an event.
type Outcome uint8

const (
	Dropped   Outcome = iota // refused: see Push
	Queued                   // appended
	Coalesced                // replaced the waiting event of its key
)

// Push appends d while fewer than the limit wait. A full mailbox conflates
// (see conflate.go); a timer's firing is refused when it is full (its
// owner keeps it until Refill), and any event past the bound of keys.
func (m *Box) Push(d Delivery) Outcome {
	out, _ := m.PushReplacing(d)
	return out
}

// PushReplacing is Push, which also returns the event d replaced when it
// coalesced (Coalesced): the key's change that waited, for a trace.
func (m *Box) PushReplacing(d Delivery) (Outcome, Delivery) {
	m.mu.Lock()
	if len(m.q)-m.head-m.holes >= m.limit || m.idx != nil || m.latest {
		out, old := m.pushFullLocked(d)
		m.mu.Unlock()
		if out == Queued {
			m.Signal()
		}
		return out, old
	}
	m.appendLocked(d)
	m.mu.Unlock()
	m.Signal()
	return Queued, Delivery{}
}

// PushAlways appends d even past the bounds, never conflated into a
// waiting event: for the events of a pattern watch's scans
// (host/internal/patternwatch), which max_watched_keys bounds. Later
// changes of its key queue behind it (it is indexed), and conflate with it
// only if it is not a resync event, as any event.
func (m *Box) PushAlways(d Delivery) {
	m.mu.Lock()
	if m.idx != nil && keyed(&d) {
		m.idx[d.Ev.Key] = m.seq0 + uint64(len(m.q)-m.head)
	}
	m.appendLocked(d)
	m.mu.Unlock()
	m.Signal()
}

// PutBack returns d, an event taken from the mailbox and never handled,
// to the head of the queue: it came before the events waiting, so it is
// taken first again and a newer change of its key still comes after it
// (a rule's worker abandoned with events its pool had taken but not
// started: host/concurrency.go). d keeps its ticket; it counts as work
// again until Done.
func (m *Box) PutBack(d Delivery) {
	m.mu.Lock()
	m.quiet.Work(m.rq, 1)
	if m.head > 0 {
		m.head--
		m.q[m.head] = d
	} else {
		m.q = slices.Insert(m.q, 0, d)
	}
	m.seq0-- // d's; the others keep theirs
	if m.idx != nil && keyed(&d) {
		if _, ok := m.idx[d.Ev.Key]; !ok {
			m.idx[d.Ev.Key] = m.seq0
		}
	}
	m.mu.Unlock()
	m.Signal()
}

func (m *Box) appendLocked(d Delivery) {
	m.quiet.Work(m.rq, 1)
	d.Ticket = m.quiet.Ticket()
	m.q = append(m.q, d)
}

func (m *Box) Signal() {
	select {
	case m.Ready <- struct{}{}:
	default:
	}
}

// Pop removes the oldest event. When more wait, it signals ready again so
// the owner comes back for them after doing anything else between events.
func (m *Box) Pop() (Delivery, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.head == len(m.q) {
		return Delivery{}, false
	}
	d := m.q[m.head]
	m.q[m.head] = Delivery{}
	m.popIndexLocked(d)
	m.head++
	if m.holes > 0 { // left by PopFree, under a concurrency since lowered
		m.skipHolesLocked()
	}
	m.settleLocked()
	return d, true
}

// settleLocked gives back the memory of a drained queue, or compacts it
// once its head has moved far, and signals ready while events wait.
func (m *Box) settleLocked() {
	switch {
	case m.head == len(m.q):
		m.idx = nil
		if cap(m.q) > 64 {
			m.q = nil // drained after a burst: give the memory back
		} else {
			m.q = m.q[:0]
		}
		m.head = 0
	case m.head >= 64 && m.head*2 >= len(m.q):
		n := copy(m.q, m.q[m.head:])
		clear(m.q[n:])
		m.q, m.head = m.q[:n], 0
	}
	if m.head < len(m.q) {
		m.Signal()
	}
}

// Done ends the work of an event popped, once its worker is done with it.
func (m *Box) Done() { m.quiet.Work(m.rq, -1) }

// Drop discards the waiting events (the rule stopped).
func (m *Box) Drop() {
	m.mu.Lock()
	n := len(m.q) - m.head - m.holes
	m.q, m.head, m.idx, m.holes = nil, 0, nil, 0
	m.seq0 += uint64(n)
	m.mu.Unlock()
	m.quiet.Work(m.rq, -n)
}

// Len is the number of waiting events.
func (m *Box) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q) - m.head - m.holes
}

// SetLimit changes the bounds (keys: see conflate.go); events already
// waiting stay.
func (m *Box) SetLimit(limit, keys int) {
	m.mu.Lock()
	m.limit, m.keys = limit, keys
	m.mu.Unlock()
}
