package testutil

import (
	"sync/atomic"
	"time"
)

// Clock is a settable clock for a Config.Now, to the millisecond: it stands
// still until Advance moves it. It is safe for concurrent use.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a Clock at start. Tests of the store over MQTT start it
// at the real time, so that a client's own (real) HLC stays within the
// store's skew limit.
func NewClock(start time.Time) *Clock {
	c := &Clock{}
	c.ms.Store(start.UnixMilli())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Advance moves the clock by d (back if d is negative).
func (c *Clock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }
