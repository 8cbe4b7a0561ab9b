// Package clock is the host's time: the Clock interface, the machine's clock
// (Real) and the virtual clock of ssrun test and replay (Virtual), which
// moves only when told to.
package clock

import (
	"time"
)

// Clock is the host's time: every part of the host that reads the time or
// waits for it uses its host.Config.Clock (Real when nil): rule timers and
// now(), leases and lock waits, the feedback-loop damper's and the log
// budget's windows, canary windows, load retries, the deadlines and grace
// of runtime calls (abandonment), the provenance journal's and statuses'
// timestamps. ssrun test and replay run the host on a Virtual, which
// moves only when they move it.
type Clock interface {
	// Now is the current time. A real clock's reading carries the
	// monotonic clock, so durations between two readings do not jump
	// with the wall clock.
	Now() time.Time
	// AfterFunc calls f once d has passed, unless the returned timer is
	// stopped first: in its own goroutine (a real clock), or in the
	// goroutine that moves a virtual clock past the deadline.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call of a Clock.
type Timer interface {
	// Stop prevents the call; false when it has run or was stopped.
	Stop() bool
}

// Real is the machine's clock: time.Now and time.AfterFunc.
type Real struct{}

// Now implements Clock.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc implements Clock.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// epoch is the origin of Mono: readings of the host's clock as
// nanoseconds, what the damper, the log budget and the workers time their
// windows and calls with.
var epoch = time.Now()

// Mono is the time on c in nanoseconds since epoch (monotonic for a real
// clock).
func Mono(c Clock) int64 { return int64(c.Now().Sub(epoch)) }
