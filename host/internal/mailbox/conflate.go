package mailbox

import "github.com/ssrun/ssrun/abi"

// Conflation. While fewer than its limit of events wait, a mailbox is a
// plain FIFO. Once it is full it conflates by key: a key's change replaces
// the key's last waiting event in that event's place (so keys are served in
// the order they first waited, and none starves), and Coalesced counts the
// changes it replaced; a DELETE after a SET is a DELETE. A change of a key
// with no waiting event is appended while fewer than the bound of keys
// wait, and dropped past it: only then is a change lost. So after any burst
// the rule sees the latest value and version of every key, and memory is
// bounded by the keys waiting, not by the changes.
//
// Resync events (each stands for a reconnect) are never replaced and never
// replace; a key's change after one is appended behind it, so a key's
// versions still reach the rule in increasing order. A timer's firing is
// keyed by the timer's name, not a store key, and is never conflated: a
// full mailbox refuses it and its owner keeps it (see Push).
//
// The index from key to last waiting event is built when the mailbox first
// fills (one pass over the events waiting) and dropped when it drains, so
// an unloaded rule pays nothing for it.

// SetLatest makes the mailbox conflate a key's changes whenever one of
// the key waits, full or not (a rule's mode: latest); false restores
// conflating only when full.
func (m *Box) SetLatest(on bool) {
	m.mu.Lock()
	m.latest = on
	m.mu.Unlock()
}

// keyed reports whether d is a change of a store key (its Key is one).
func keyed(d *Delivery) bool {
	return d.Timer == nil && (d.Ev.Op == abi.OpSet || d.Ev.Op == abi.OpDelete)
}

// conflatable reports whether d may replace, or be replaced by, another
// change of its key.
func conflatable(d *Delivery) bool { return keyed(d) && !d.Ev.Resync }

// pushFullLocked pushes d into a mailbox that is full or still indexed;
// when d coalesced, it returns the event it replaced.
func (m *Box) pushFullLocked(d Delivery) (Outcome, Delivery) {
	n := len(m.q) - m.head
	full := n >= m.limit
	if m.idx == nil {
		m.indexLocked()
	}
	if (full || m.latest) && conflatable(&d) {
		if s, ok := m.idx[d.Ev.Key]; ok {
			old := &m.q[m.head+int(s-m.seq0)]
			if conflatable(old) {
				d.Ev.Coalesced += old.Ev.Coalesced + 1
				d.Ticket = old.Ticket // its place in a serial host's order too
				replaced := *old
				*old = d
				return Coalesced, replaced
			}
		}
	}
	if full && (d.Timer != nil || n >= m.keys) {
		return Dropped, Delivery{}
	}
	if keyed(&d) {
		m.idx[d.Ev.Key] = m.seq0 + uint64(n)
	}
	m.appendLocked(d)
	return Queued, Delivery{}
}

// indexLocked builds the index of the events waiting.
func (m *Box) indexLocked() {
	m.idx = make(map[string]uint64)
	for i := m.head; i < len(m.q); i++ {
		if keyed(&m.q[i]) {
			m.idx[m.q[i].Ev.Key] = m.seq0 + uint64(i-m.head)
		}
	}
}

// popIndexLocked accounts for d leaving the head of the queue.
func (m *Box) popIndexLocked(d Delivery) {
	if m.idx != nil && keyed(&d) && m.idx[d.Ev.Key] == m.seq0 {
		delete(m.idx, d.Ev.Key)
	}
	m.seq0++
}
