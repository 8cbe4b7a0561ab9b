// Package timers keeps rules' timers: the scheduler (one heap and one goroutine
// for every pending timer of a host, on the host's hybrid logical clock) and
// the keys and encodings of timers in the store, under the reserved prefix.
package timers

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Timer is one armed timer of a rule (see host/internal/ruletimers, which owns its
// fields but at and index). One arm is one timer: re-arming a name makes a
// new one, so a firing of the replaced one is recognised as stale by
// identity; a periodic timer stays the same timer from one period to the
// next.
type Timer struct {
	Owner    timerOwner
	Name     string
	Payload  []byte
	Deadline int64 // Unix ms on the host's clock (TimeSource.NowMs)
	Every    int64 // ms; 0 fires once
	Late     bool  // its next event is late whatever the clock says (recovered past its deadline, or periods skipped)
	Inflight bool  // its event is in the mailbox or being handled
	Held     bool  // armed by a version not yet live: scheduled when it is

	// The scheduler's, under its lock.
	at    int64 // Unix ms: when the scheduler next looks at it (the deadline, or a retry)
	Index int   // in the heap; -1 when not in it
}

// timerOwner receives the timers that are due: the rule's timers
// (host/internal/ruletimers) queue their event, or ask for a retry.
type timerOwner interface {
	Fire(t *Timer, now int64)
	OwnerName() string // the rule's file name
}

// TimeSource is the clock of the timers: the time in Unix milliseconds, and
// alarms to wait for it. The host's is hostClock; tests inject a fake.
type TimeSource interface {
	NowMs() int64
	NewAlarm() Alarm
}

// Alarm is a resettable one-shot wake-up (a wake on the host's clock).
type Alarm interface {
	C() <-chan struct{}
	SetAt(at int64) // ring once when the clock reaches at (Unix ms), replacing an earlier setAt
	Stop()
	Took() // a ring taken from C was acted on (see wake)
}

// HostClock is the time of the host's hybrid logical clock: the host's
// Clock, or the client's HLC wall time when the store's clock runs ahead
// (so never behind a version the host has seen). Its alarms are wakes on
// the Clock.
type HostClock struct {
	Client interface{ Now() hlc.HLC } // the store client's hybrid logical clock
	Clock  clock.Clock
	Quiet  *serial.Quiet
}

func (c HostClock) NowMs() int64 { return max(c.Clock.Now().UnixMilli(), c.Client.Now().Wall) }

func (c HostClock) NewAlarm() Alarm { return realAlarm{w: serial.NewWake(c.Clock, c.Quiet), c: c} }

type realAlarm struct {
	w *serial.Wake
	c HostClock
}

func (a realAlarm) C() <-chan struct{} { return a.w.C() }
func (a realAlarm) Stop()              { a.w.Stop() }
func (a realAlarm) Took()              { a.w.Took() }

// SetAt waits until the Clock reaches at, less how far the host's clock
// runs ahead of it (the store's HLC): to the nanosecond, not to the
// millisecond of nowMs.
func (a realAlarm) SetAt(at int64) {
	now := a.c.Clock.Now()
	ahead := max(a.c.NowMs()-now.UnixMilli(), 0)
	a.w.Reset(time.UnixMilli(at - ahead).Sub(now))
}

// Scheduler holds every pending timer of a host in a min-heap by due time,
// served by one goroutine (run) on one alarm set for the earliest: no
// goroutine and no time.Timer per timer. Due timers go to their owner
// outside the scheduler's lock.
type Scheduler struct {
	Clock TimeSource
	mu    sync.Mutex
	h     timerHeap
	wake  serial.Signal // the earliest timer changed
}

// fireBatch bounds the timers handed out per turn of the loop, so that a
// flood of due timers does not hold up a new earlier one for long.
const fireBatch = 256

func NewScheduler(c TimeSource, q *serial.Quiet) *Scheduler {
	return &Scheduler{Clock: c, wake: serial.NewSignal(q)}
}

// Schedule puts t in the heap at at (Unix ms), or moves it there.
func (s *Scheduler) Schedule(t *Timer, at int64) {
	s.mu.Lock()
	t.at = at
	if t.Index >= 0 {
		heap.Fix(&s.h, t.Index)
	} else {
		heap.Push(&s.h, t)
	}
	first := t.Index == 0
	s.mu.Unlock()
	if first {
		s.wake.Raise()
	}
}

// Unschedule takes t out of the heap, if it is there.
func (s *Scheduler) Unschedule(t *Timer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.Index >= 0 {
		heap.Remove(&s.h, t.Index)
	}
}

// pending is the number of timers in the heap.
func (s *Scheduler) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.h)
}

// Run hands due timers to their owners until ctx ends. The host runs it in
// one goroutine and waits for it on Close.
func (s *Scheduler) Run(ctx context.Context) {
	a := s.Clock.NewAlarm()
	defer a.Stop()
	defer s.wake.Drain()
	due := make([]*Timer, 0, fireBatch)
	var woke func() // ends the activity of what woke the loop, once it has acted
	for {
		now := s.Clock.NowMs()
		s.mu.Lock()
		for len(s.h) > 0 && s.h[0].at <= now && len(due) < fireBatch {
			due = append(due, heap.Pop(&s.h).(*Timer))
		}
		next, pending := int64(0), len(s.h) > 0
		if pending {
			next = s.h[0].at
		}
		s.mu.Unlock()
		for i, t := range due {
			t.Owner.Fire(t, now)
			due[i] = nil
		}
		full := len(due) == fireBatch
		due = due[:0]
		if full && ctx.Err() == nil {
			continue
		}
		if pending {
			a.SetAt(next)
		} else {
			a.Stop()
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
			woke = a.Took
		}
	}
}

// timerHeap orders timers by due time (container/heap).
type timerHeap []*Timer

func (h timerHeap) Len() int { return len(h) }

// Less orders by due time, then by rule and name, so that timers due at
// once fire in the same order in every run.
func (h timerHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if a, b := h[i].Owner.OwnerName(), h[j].Owner.OwnerName(); a != b {
		return a < b
	}
	return h[i].Name < h[j].Name
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].Index, h[j].Index = i, j
}

func (h *timerHeap) Push(x any) {
	t := x.(*Timer)
	t.Index = len(*h)
	*h = append(*h, t)
}

func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.Index = -1
	if cap(*h) > 1024 && len(*h) < cap(*h)/4 { // give the memory of a burst back
		*h = append(timerHeap(nil), *h...)
	}
	return t
}
