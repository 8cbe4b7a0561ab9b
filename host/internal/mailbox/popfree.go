package mailbox

import "github.com/ssrun/ssrun/abi"

// Taking events out of order, for a rule that handles events of different
// keys at once (host/concurrency.go). PopFree takes the oldest event whose
// key is not busy; the events of busy keys stay where they wait, so they
// keep their order and keep conflating with newer changes of their key.
// An event taken from behind the head leaves a hole in its place, so the
// index of conflation (positions counted from the head) stays right; the
// head skips holes as it reaches them.
//
// Cost: PopFree looks at the events ahead of the first one it can take:
// at most the events of busy keys waiting (a rule has at most its
// concurrency of keys busy). Pop, the path of a rule of concurrency 1, pays
// one comparison for it (holes are only left behind when the concurrency
// was lowered by a reload).

// opHole marks a hole: an event PopFree took from behind the head.
const opHole abi.Op = "\x00taken"

// PopFree removes the oldest event for which busy is false, skipping the
// others, which keep their places. When more wait after it, it signals
// ready again; when every waiting event is busy, it returns false without
// signalling (the owner calls it again once a key is free).
func (m *Box) PopFree(busy func(*Delivery) bool) (Delivery, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := m.head; i < len(m.q); i++ {
		e := &m.q[i]
		if e.Ev.Op == opHole || busy(e) {
			continue
		}
		d := *e
		seq := m.seq0 + uint64(i-m.head)
		if m.idx != nil && keyed(&d) && m.idx[d.Ev.Key] == seq {
			delete(m.idx, d.Ev.Key)
		}
		*e = Delivery{Ev: abi.Event{Op: opHole}}
		m.holes++
		m.skipHolesLocked()
		m.settleLocked()
		return d, true
	}
	return Delivery{}, false
}

// skipHolesLocked moves the head past the holes it reaches.
func (m *Box) skipHolesLocked() {
	for m.head < len(m.q) && m.q[m.head].Ev.Op == opHole {
		m.q[m.head] = Delivery{}
		m.head++
		m.seq0++
		m.holes--
	}
	if m.head == len(m.q) {
		m.idx = nil
	}
}
