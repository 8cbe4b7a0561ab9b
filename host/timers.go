package host

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/serial"
)

// timer is one armed timer of a rule (see ruletimers.go, which owns its
// fields but at and index). One arm is one timer: re-arming a name makes a
// new one, so a firing of the replaced one is recognised as stale by
// identity; a periodic timer stays the same timer from one period to the
// next.
type timer struct {
	owner    timerOwner
	name     string
	payload  []byte
	deadline int64 // Unix ms on the host's clock (timeSource.nowMs)
	every    int64 // ms; 0 fires once
	late     bool  // its next event is late whatever the clock says (recovered past its deadline, or periods skipped)
	inflight bool  // its event is in the mailbox or being handled
	held     bool  // armed by a version not yet live: scheduled when it is

	// The scheduler's, under its lock.
	at    int64 // Unix ms: when the scheduler next looks at it (the deadline, or a retry)
	index int   // in the heap; -1 when not in it
}

// timerOwner receives the timers that are due: the rule's timers
// (ruletimers.go) queue their event, or ask for a retry.
type timerOwner interface {
	fire(t *timer, now int64)
	ownerName() string // the rule's file name
}

// timeSource is the clock of the timers: the time in Unix milliseconds, and
// alarms to wait for it. The host's is hostClock; tests inject a fake.
type timeSource interface {
	nowMs() int64
	newAlarm() alarm
}

// alarm is a resettable one-shot wake-up (a wake on the host's clock).
type alarm interface {
	C() <-chan struct{}
	setAt(at int64) // ring once when the clock reaches at (Unix ms), replacing an earlier setAt
	stop()
	took() // a ring taken from C was acted on (see wake)
}

// hostClock is the time of the host's hybrid logical clock: the host's
// Clock, or the client's HLC wall time when the store's clock runs ahead
// (so never behind a version the host has seen). Its alarms are wakes on
// the Clock.
type hostClock struct {
	client Store
	clock  clock.Clock
	quiet  *serial.Quiet
}

func (c hostClock) nowMs() int64 { return max(c.clock.Now().UnixMilli(), c.client.Now().Wall) }

func (c hostClock) newAlarm() alarm { return realAlarm{w: serial.NewWake(c.clock, c.quiet), c: c} }

type realAlarm struct {
	w *serial.Wake
	c hostClock
}

func (a realAlarm) C() <-chan struct{} { return a.w.C() }
func (a realAlarm) stop()              { a.w.Stop() }
func (a realAlarm) took()              { a.w.Took() }

// setAt waits until the Clock reaches at, less how far the host's clock
// runs ahead of it (the store's HLC): to the nanosecond, not to the
// millisecond of nowMs.
func (a realAlarm) setAt(at int64) {
	now := a.c.clock.Now()
	ahead := max(a.c.nowMs()-now.UnixMilli(), 0)
	a.w.Reset(time.UnixMilli(at - ahead).Sub(now))
}

// scheduler holds every pending timer of a host in a min-heap by due time,
// served by one goroutine (run) on one alarm set for the earliest: no
// goroutine and no time.Timer per timer. Due timers go to their owner
// outside the scheduler's lock.
type scheduler struct {
	clock timeSource
	mu    sync.Mutex
	h     timerHeap
	wake  serial.Signal // the earliest timer changed
}

// fireBatch bounds the timers handed out per turn of the loop, so that a
// flood of due timers does not hold up a new earlier one for long.
const fireBatch = 256

func newScheduler(c timeSource, q *serial.Quiet) *scheduler {
	return &scheduler{clock: c, wake: serial.NewSignal(q)}
}

// schedule puts t in the heap at at (Unix ms), or moves it there.
func (s *scheduler) schedule(t *timer, at int64) {
	s.mu.Lock()
	t.at = at
	if t.index >= 0 {
		heap.Fix(&s.h, t.index)
	} else {
		heap.Push(&s.h, t)
	}
	first := t.index == 0
	s.mu.Unlock()
	if first {
		s.wake.Raise()
	}
}

// unschedule takes t out of the heap, if it is there.
func (s *scheduler) unschedule(t *timer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.index >= 0 {
		heap.Remove(&s.h, t.index)
	}
}

// pending is the number of timers in the heap.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// run hands due timers to their owners until ctx ends. The host runs it in
// one goroutine and waits for it on Close.
func (s *scheduler) run(ctx context.Context) {
	a := s.clock.newAlarm()
	defer a.stop()
	defer s.wake.Drain()
	due := make([]*timer, 0, fireBatch)
	var woke func() // ends the activity of what woke the loop, once it has acted
	for {
		now := s.clock.nowMs()
		s.mu.Lock()
		for len(s.h) > 0 && s.h[0].at <= now && len(due) < fireBatch {
			due = append(due, heap.Pop(&s.h).(*timer))
		}
		next, pending := int64(0), len(s.h) > 0
		if pending {
			next = s.h[0].at
		}
		s.mu.Unlock()
		for i, t := range due {
			t.owner.fire(t, now)
			due[i] = nil
		}
		full := len(due) == fireBatch
		due = due[:0]
		if full && ctx.Err() == nil {
			continue
		}
		if pending {
			a.setAt(next)
		} else {
			a.stop()
		}
		if woke != nil {
			woke()
			woke = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake.C:
			woke = s.wake.Took
		case <-a.C():
			woke = a.took
		}
	}
}

// timerHeap orders timers by due time (container/heap).
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }

// Less orders by due time, then by rule and name, so that timers due at
// once fire in the same order in every run.
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if a, b := h[i].owner.ownerName(), h[j].owner.ownerName(); a != b {
		return a < b
	}
	return h[i].name < h[j].name
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	if cap(*h) > 1024 && len(*h) < cap(*h)/4 { // give the memory of a burst back
		*h = append(timerHeap(nil), *h...)
	}
	return t
}
