package host

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

// tracker counts the goroutines that run runtime calls, so that Close can
// wait for them and name those still running.
type tracker struct {
	clock   clock.Clock // of the grace
	mu      sync.Mutex
	live    map[*task]struct{}
	changed chan struct{} // closed (and replaced) whenever a task ends
}

// task is one tracked goroutine.
type task struct {
	what      string        // e.g. "handle a.lua", "compile b.wasm"
	grace     time.Duration // of its rule: how long Close waits for it
	abandoned atomic.Bool
}

func newTracker(c clock.Clock) *tracker {
	return &tracker{clock: c, live: map[*task]struct{}{}, changed: make(chan struct{})}
}

// start registers a goroutine about to start.
func (t *tracker) start(what string, grace time.Duration) *task {
	k := &task{what: what, grace: grace}
	t.mu.Lock()
	t.live[k] = struct{}{}
	t.mu.Unlock()
	return k
}

// end records that k's goroutine is ending.
func (t *tracker) end(k *task) {
	t.mu.Lock()
	delete(t.live, k)
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// stuck returns how many abandoned tasks are still running.
func (t *tracker) stuck() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k := range t.live {
		if k.abandoned.Load() {
			n++
		}
	}
	return n
}

// wait waits until every task has ended, or ctx ends, or the longest grace
// of the tasks has passed; it returns the tasks still running then, sorted,
// abandoned ones marked.
func (t *tracker) wait(ctx context.Context) []string {
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
			if k.abandoned.Load() {
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

// aside runs call(ctx) in a tracked goroutine and returns its result. If it
// has not returned when ctx has ended and grace more has passed, it is
// abandoned: aside returns a *StuckError, and when call returns later,
// late (when not nil) gets its result to dispose of.
func aside[T any](calls *tracker, ctx context.Context, rule, what string, grace time.Duration, call func(context.Context) (T, error), late func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	out := make(chan result, 1)
	var phase atomic.Int32
	k := calls.start(what+" "+rule, grace)
	began := calls.clock.Now()
	go func() {
		defer calls.end(k)
		v, err := call(ctx)
		if phase.CompareAndSwap(asideRunning, asideReturned) {
			out <- result{v, err}
			return
		}
		if late != nil && err == nil {
			late(v)
		}
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
	k.abandoned.Store(true)
	var zero T
	return zero, &StuckError{Rule: rule, Call: what, Waited: calls.clock.Now().Sub(began)}
}
