package host

import (
	"sync"
	"time"
)

// Clock is the host's time: every part of the host that reads the time or
// waits for it uses its Config.Clock (RealClock when nil): rule timers and
// now(), leases and lock waits, the feedback-loop damper's and the log
// budget's windows, canary windows, load retries, the deadlines and grace
// of runtime calls (abandonment), the provenance journal's and statuses'
// timestamps. ssrun test and replay run the host on a VirtualClock, which
// moves only when they move it.
type Clock interface {
	// Now is the current time. A real clock's reading carries the
	// monotonic clock, so durations between two readings do not jump
	// with the wall clock.
	Now() time.Time
	// AfterFunc calls f once d has passed, unless the returned timer is
	// stopped first: in its own goroutine (a real clock), or in the
	// goroutine that moves a virtual clock past the deadline.
	AfterFunc(d time.Duration, f func()) ClockTimer
}

// ClockTimer is a pending AfterFunc call of a Clock.
type ClockTimer interface {
	// Stop prevents the call; false when it has run or was stopped.
	Stop() bool
}

// RealClock is the machine's clock: time.Now and time.AfterFunc.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (RealClock) AfterFunc(d time.Duration, f func()) ClockTimer { return time.AfterFunc(d, f) }

// epoch is the origin of mono: readings of the host's clock as
// nanoseconds, what the damper, the log budget and the workers time their
// windows and calls with.
var epoch = time.Now()

// mono is the time on c in nanoseconds since epoch (monotonic for a real
// clock).
func mono(c Clock) int64 { return int64(c.Now().Sub(epoch)) }

// wake is a timer of the host's clock for a goroutine that waits on C
// among other things. Its ring counts as host activity (see quiet.go)
// until the goroutine has acted on it and called took, so that a host
// on a virtual clock is not idle between the ring and what it causes.
type wake struct {
	clock Clock
	sig   signal
	mu    sync.Mutex
	t     ClockTimer
}

func newWake(c Clock, q *quiet) *wake {
	return &wake{clock: c, sig: newSignal(q)}
}

// C is signalled when the timer rings.
func (w *wake) C() <-chan struct{} { return w.sig.c }

// reset (re)arms the timer to ring after d, dropping a ring not yet taken.
func (w *wake) reset(d time.Duration) {
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t = w.clock.AfterFunc(max(d, 0), w.sig.raise)
}

// stop disarms the timer and gives back a ring not taken.
func (w *wake) stop() {
	w.mu.Lock()
	if w.t != nil {
		w.t.Stop()
		w.t = nil
	}
	w.mu.Unlock()
	w.sig.drain()
}

// took ends the activity of a ring taken from C.
func (w *wake) took() { w.sig.took() }

// signal is a wake-up channel of capacity 1 between two goroutines of the
// host. A raise counts as host activity until the receiver has acted on it
// and called took (raises that find one pending fold into it).
type signal struct {
	c chan struct{}
	q *quiet // nil: nothing is counted
}

func newSignal(q *quiet) signal { return signal{c: make(chan struct{}, 1), q: q} }

// raise signals the receiver without blocking.
func (s signal) raise() {
	s.q.add(1)
	select {
	case s.c <- struct{}{}:
	default:
		s.q.add(-1)
	}
}

// took ends the activity of a signal received from c.
func (s signal) took() { s.q.add(-1) }

// drain takes a pending signal, if any, and ends its activity (its
// receiver will not act on it).
func (s signal) drain() {
	select {
	case <-s.c:
		s.q.add(-1)
	default:
	}
}

// sleep waits on c for d, or until done is closed; it reports whether the
// time passed. Only for goroutines whose work counts as activity already
// (a rule's worker in an event): what they do after it is counted.
func sleep(c Clock, q *quiet, d time.Duration, done <-chan struct{}) bool {
	w := newWake(c, q)
	w.reset(d)
	defer w.stop()
	select {
	case <-w.C():
		w.took()
		return true
	case <-done:
		return false
	}
}
