package host

import (
	"sync"

	"github.com/ssrun/ssrun/abi"
)

// delivery is one event queued for a rule, with its lineage (see lineage),
// or the timer whose firing it is.
type delivery struct {
	ev     abi.Event
	lin    lineageEntry // the event's place in a chain of rule writes
	timer  *timer
	ticket uint64 // its place in a serial host's order (quiet.go); 0 otherwise
}

// mailbox is a rule's bounded FIFO of events. It grows up to its bound as
// events arrive and releases its memory when it drains, so an idle rule
// costs no queue memory (a buffered channel of the bound would allocate it
// all at load).
type mailbox struct {
	mu    sync.Mutex
	q     []delivery
	head  int
	limit int
	ready chan struct{} // cap 1: signalled while events wait
	// In a serial host, each event counts as its rule's work from push
	// until its worker is done with it (done), and takes a ticket.
	quiet *quiet
	rq    *ruleQuiet
}

func newMailbox(limit int, q *quiet, rq *ruleQuiet) *mailbox {
	return &mailbox{limit: limit, ready: make(chan struct{}, 1), quiet: q, rq: rq}
}

// push appends d, or reports false when the mailbox is full.
func (m *mailbox) push(d delivery) bool { return m.put(d, false) }

// pushAlways appends d even past the bound: for the events of a pattern
// watch's scans (patternrule.go), which max_watched_keys bounds.
func (m *mailbox) pushAlways(d delivery) { m.put(d, true) }

func (m *mailbox) put(d delivery, always bool) bool {
	m.mu.Lock()
	if !always && len(m.q)-m.head >= m.limit {
		m.mu.Unlock()
		return false
	}
	m.quiet.work(m.rq, 1)
	d.ticket = m.quiet.ticket()
	m.q = append(m.q, d)
	m.mu.Unlock()
	m.signal()
	return true
}

func (m *mailbox) signal() {
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// pop removes the oldest event. When more wait, it signals ready again so
// the owner comes back for them after doing anything else between events.
func (m *mailbox) pop() (delivery, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.head == len(m.q) {
		return delivery{}, false
	}
	d := m.q[m.head]
	m.q[m.head] = delivery{}
	m.head++
	switch {
	case m.head == len(m.q):
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
		m.signal()
	}
	return d, true
}

// done ends the work of an event popped, once its worker is done with it.
func (m *mailbox) done() { m.quiet.work(m.rq, -1) }

// drop discards the waiting events (the rule stopped).
func (m *mailbox) drop() {
	m.mu.Lock()
	n := len(m.q) - m.head
	m.q, m.head = nil, 0
	m.mu.Unlock()
	m.quiet.work(m.rq, -n)
}

// len is the number of waiting events.
func (m *mailbox) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.q) - m.head
}

// setLimit changes the bound; events already waiting stay.
func (m *mailbox) setLimit(limit int) {
	m.mu.Lock()
	m.limit = limit
	m.mu.Unlock()
}
