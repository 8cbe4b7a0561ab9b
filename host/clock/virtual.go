package clock

import (
	"slices"
	"sync"
	"time"
)

// Virtual is a Clock that moves only when told to (ssrun test and
// replay): Now reads the time it was set to, and AfterFunc calls wait
// until Fire runs them. Safe for concurrent use.
type Virtual struct {
	mu    sync.Mutex
	now   time.Time
	calls []*virtualCall // pending, in the order they run
}

// NewVirtual returns a virtual clock at start.
func NewVirtual(start time.Time) *Virtual {
	return &Virtual{now: start}
}

// Now implements Clock.
func (c *Virtual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock: f is called by Fire once the clock has
// reached now+d.
func (c *Virtual) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	vc := &virtualCall{c: c, at: c.now.Add(max(d, 0)), f: f}
	// After every call due no later: calls due at once run in the order
	// they were made.
	i, _ := slices.BinarySearchFunc(c.calls, vc.at, func(x *virtualCall, at time.Time) int {
		if x.at.After(at) {
			return 1
		}
		return -1
	})
	c.calls = slices.Insert(c.calls, i, vc)
	return vc
}

// Next returns when the earliest pending AfterFunc call is due.
func (c *Virtual) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) == 0 {
		return time.Time{}, false
	}
	return c.calls[0].at, true
}

// Set moves the clock to t (never back: an earlier t is ignored). It runs
// no call: Fire does.
func (c *Virtual) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// Fire runs the earliest call due at the clock's time, in the caller's
// goroutine, and reports whether there was one. Calls due at the same
// time run in the order they were made, one per Fire.
func (c *Virtual) Fire() bool {
	c.mu.Lock()
	if len(c.calls) == 0 || c.calls[0].at.After(c.now) {
		c.mu.Unlock()
		return false
	}
	vc := c.calls[0]
	c.calls = slices.Delete(c.calls, 0, 1)
	c.mu.Unlock()
	vc.f()
	return true
}

// virtualCall is one pending AfterFunc call of a Virtual.
type virtualCall struct {
	c  *Virtual
	at time.Time
	f  func()
}

// Stop implements Timer.
func (vc *virtualCall) Stop() bool {
	vc.c.mu.Lock()
	defer vc.c.mu.Unlock()
	i := slices.Index(vc.c.calls, vc)
	if i < 0 {
		return false
	}
	vc.c.calls = slices.Delete(vc.c.calls, i, i+1)
	return true
}
