package host

import (
	"container/heap"
	"sync"
	"time"
)

// VirtualClock is a Clock that moves only when told to (ssrun test and
// replay): Now reads the time it was set to, and AfterFunc calls wait
// until Fire runs them. Safe for concurrent use.
type VirtualClock struct {
	mu    sync.Mutex
	now   time.Time
	seq   uint64
	calls virtualCalls
}

// NewVirtualClock returns a virtual clock at start.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start}
}

// Now implements Clock.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock: f is called by Fire once the clock has
// reached now+d.
func (c *VirtualClock) AfterFunc(d time.Duration, f func()) ClockTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	vc := &virtualCall{c: c, at: c.now.Add(max(d, 0)), seq: c.seq, f: f, index: -1}
	heap.Push(&c.calls, vc)
	return vc
}

// Next returns when the earliest pending AfterFunc call is due.
func (c *VirtualClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) == 0 {
		return time.Time{}, false
	}
	return c.calls[0].at, true
}

// Set moves the clock to t (never back: an earlier t is ignored). It runs
// no call: Fire does.
func (c *VirtualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// Fire runs the earliest call due at the clock's time, in the caller's
// goroutine, and reports whether there was one. Calls due at the same
// time run in the order they were made, one per Fire.
func (c *VirtualClock) Fire() bool {
	c.mu.Lock()
	if len(c.calls) == 0 || c.calls[0].at.After(c.now) {
		c.mu.Unlock()
		return false
	}
	vc := heap.Pop(&c.calls).(*virtualCall)
	c.mu.Unlock()
	vc.f()
	return true
}

// virtualCall is one pending AfterFunc call of a VirtualClock.
type virtualCall struct {
	c     *VirtualClock
	at    time.Time
	seq   uint64
	f     func()
	index int // in the heap; -1 when not in it
}

// Stop implements ClockTimer.
func (vc *virtualCall) Stop() bool {
	vc.c.mu.Lock()
	defer vc.c.mu.Unlock()
	if vc.index < 0 {
		return false
	}
	heap.Remove(&vc.c.calls, vc.index)
	return true
}

// virtualCalls orders calls by time, then by when they were made.
type virtualCalls []*virtualCall

func (h virtualCalls) Len() int { return len(h) }
func (h virtualCalls) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h virtualCalls) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *virtualCalls) Push(x any) {
	vc := x.(*virtualCall)
	vc.index = len(*h)
	*h = append(*h, vc)
}
func (h *virtualCalls) Pop() any {
	old := *h
	vc := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	vc.index = -1
	return vc
}
