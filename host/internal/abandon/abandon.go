// Package abandon runs the runtime calls a host cannot trust to return: each
// in a tracked goroutine, given up (a StuckError) past its deadline and grace,
// and counted until it really ends, so that Close knows what is left.
package abandon

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/host/clock"
)

// The host calls runtimes it does not trust to return: a runtime should stop
// a call at its deadline, but a bug, or a guest sleeping where its runtime
// cannot interrupt it, may keep it forever. So every runtime call runs in a
// goroutine the host tracks (a rule's worker, or one started for the call),
// and whoever needs the call over (a reload, a remove, Close) waits only
// until its deadline, or its cancellation, plus the rule's grace. Past that
// the call is abandoned: reported, counted in Stats.Stuck, and left to end
// on its own; the goroutine stays tracked, and Close waits for it within a
// bound and names it if it is still running.

// StuckError is a runtime call that did not return within its bound (its
// deadline, or the moment it was cancelled, plus the grace). The host
// abandoned it: it runs on until it returns, and its result is discarded.
type StuckError struct {
	Rule   string        // file name of the rule
	Call   string        // "compile", "start", "handle" or "close"
	Waited time.Duration // how long the host waited for it
}

func (e *StuckError) Error() string {
	return fmt.Sprintf("%s %s: the runtime did not return within %v (its deadline plus the grace); abandoned",
		e.Call, e.Rule, e.Waited.Round(time.Millisecond))
}

// Tracker counts the goroutines that run runtime calls, so that Close can
// wait for them and name those still running.
type Tracker struct {
	clock   clock.Clock // of the grace
	mu      sync.Mutex
	live    map[*Task]struct{}
	changed chan struct{} // closed (and replaced) whenever a task ends
}

// Task is one tracked goroutine.
type Task struct {
	what      string        // e.g. "handle a.lua", "compile b.wasm"
	grace     time.Duration // of its rule: how long Close waits for it
	Abandoned atomic.Bool
}

func NewTracker(c clock.Clock) *Tracker {
	return &Tracker{clock: c, live: map[*Task]struct{}{}, changed: make(chan struct{})}
}

// Start registers a goroutine about to start.
func (t *Tracker) Start(what string, grace time.Duration) *Task {
	k := &Task{what: what, grace: grace}
	t.mu.Lock()
	t.live[k] = struct{}{}
	t.mu.Unlock()
	return k
}

// End records that k's goroutine is ending.
func (t *Tracker) End(k *Task) {
	t.mu.Lock()
	delete(t.live, k)
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// Stuck returns how many abandoned tasks are still running.
func (t *Tracker) Stuck() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k := range t.live {
		if k.Abandoned.Load() {
			n++
		}
	}
	return n
}

// Wait waits until every task has ended, or ctx ends, or the longest grace
// of the tasks has passed; it returns the tasks still running then, sorted,
// abandoned ones marked.
func (t *Tracker) Wait(ctx context.Context) []string {
	var grace time.Duration
	t.mu.Lock()
	for k := range t.live {
		grace = max(grace, k.grace)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer t.clock.AfterFunc(grace, cancel).Stop()
	for {
		t.mu.Lock()
		if len(t.live) == 0 {
			t.mu.Unlock()
			return nil
		}
		changed := t.changed
		t.mu.Unlock()
		select {
		case <-changed:
			continue
		case <-ctx.Done():
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		left := make([]string, 0, len(t.live))
		for k := range t.live {
			s := k.what
			if k.Abandoned.Load() {
				s += " (stuck, abandoned)"
			}
			left = append(left, s)
		}
		sort.Strings(left)
		return left
	}
}

// Phases of a call made aside (see aside).
const (
	asideRunning int32 = iota
	asideReturned
	asideAbandoned
)

// Aside runs call(ctx) in a tracked goroutine and returns its result. If it
// has not returned when ctx has ended and grace more has passed, it is
// abandoned: Aside returns a *StuckError, and when call returns later,
// late (when not nil) gets its result to dispose of.
func Aside[T any](calls *Tracker, ctx context.Context, rule, what string, grace time.Duration, call func(context.Context) (T, error), late func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	out := make(chan result, 1)
	var phase atomic.Int32
	k := calls.Start(what+" "+rule, grace)
	began := calls.clock.Now()
	go func() {
		ended := false
		defer func() {
			if !ended { // call panicked
				calls.End(k)
			}
		}()
		v, err := call(ctx)
		if phase.CompareAndSwap(asideRunning, asideReturned) {
			// Not counted once its result is handed back: the caller may
			// ask the tracker right after (what still runs?).
			ended = true
			calls.End(k)
			out <- result{v, err}
			return
		}
		if late != nil && err == nil {
			late(v)
		}
		ended = true
		calls.End(k)
	}()
	select {
	case r := <-out:
		return r.v, r.err
	case <-ctx.Done():
	}
	graced := make(chan struct{})
	defer calls.clock.AfterFunc(grace, func() { close(graced) }).Stop()
	select {
	case r := <-out:
		return r.v, r.err
	case <-graced:
	}
	if !phase.CompareAndSwap(asideRunning, asideAbandoned) {
		r := <-out // returned just now
		return r.v, r.err
	}
	k.Abandoned.Store(true)
	var zero T
	return zero, &StuckError{Rule: rule, Call: what, Waited: calls.clock.Now().Sub(began)}
}

// Live returns what the tracker still counts as running (workers,
// compiles, starts, closes), in no order.
func (c *Tracker) Live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, 0, len(c.live))
	for t := range c.live {
		out = append(out, t.what)
	}
	return out
}
