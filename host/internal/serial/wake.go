package serial

import (
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/clock"
)

// Wake is a timer of the host's clock for a goroutine that waits on C
// among other things. Its ring counts as host activity (see quiet.go)
// until the goroutine has acted on it and called took, so that a host
// on a virtual clock is not idle between the ring and what it causes.
type Wake struct {
	clock clock.Clock
	sig   Signal
	mu    sync.Mutex
	t     clock.Timer
}

func NewWake(c clock.Clock, q *Quiet) *Wake {
	return &Wake{clock: c, sig: NewSignal(q)}
}

// C is signalled when the timer rings.
func (w *Wake) C() <-chan struct{} { return w.sig.C }

// Reset (re)arms the timer to ring after d, dropping a ring not yet taken.
func (w *Wake) Reset(d time.Duration) {
	w.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t = w.clock.AfterFunc(max(d, 0), w.sig.Raise)
}

// Stop disarms the timer and gives back a ring not taken.
func (w *Wake) Stop() {
	w.mu.Lock()
	if w.t != nil {
		w.t.Stop()
		w.t = nil
	}
	w.mu.Unlock()
	w.sig.Drain()
}

// Took ends the activity of a ring taken from C.
func (w *Wake) Took() { w.sig.Took() }

// Signal is a wake-up channel of capacity 1 between two goroutines of the
// host. A raise counts as host activity until the receiver has acted on it
// and called took (raises that find one pending fold into it).
type Signal struct {
	C chan struct{}
	q *Quiet // nil: nothing is counted
}

func NewSignal(q *Quiet) Signal { return Signal{C: make(chan struct{}, 1), q: q} }

// Raise signals the receiver without blocking.
func (s Signal) Raise() {
	s.q.Add(1)
	select {
	case s.C <- struct{}{}:
	default:
		s.q.Add(-1)
	}
}

// Took ends the activity of a signal received from c.
func (s Signal) Took() { s.q.Add(-1) }

// Drain takes a pending signal, if any, and ends its activity (its
// receiver will not act on it).
func (s Signal) Drain() {
	select {
	case <-s.C:
		s.q.Add(-1)
	default:
	}
}

// Sleep waits on c for d, or until done is closed; it reports whether the
// time passed. Only for goroutines whose work counts as activity already
// (a rule's worker in an event): what they do after it is counted.
func Sleep(c clock.Clock, q *Quiet, d time.Duration, done <-chan struct{}) bool {
	w := NewWake(c, q)
	w.Reset(d)
	defer w.Stop()
	select {
	case <-w.C():
		w.Took()
		return true
	case <-done:
		return false
	}
}
