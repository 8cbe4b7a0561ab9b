// Package loadretry keeps the rule files that failed to load (Outcomes:
// for the host's status and readiness) and schedules the loads again of
// those whose start failed (Retries), waiting longer after each failure of
// the same content.
package loadretry

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/serial"
)

// Rule files whose start failed are loaded again, later.
//
// A load fails for good when the file is no rule (no runtime runs it),
// cannot be read, or does not compile: only new content changes that, and a
// change of the file loads it again. A start may fail for a while only: the
// rule's initialisation raised an error because a store call was refused or
// timed out while the store was unreachable, it ran past its deadline on a
// busy host, a plugin's process did not come up. Left alone, such a rule
// would run nowhere until someone touched its file or restarted the host.
// So a file whose start failed while no version of it runs is loaded again
// after Config.LoadRetry (Default), the wait doubling after each
// failure of the same content up to Max, and at once after every
// reconnection to the store, until it starts, its content changes (a new
// content's failure starts again from the first wait), or it is removed.
// A failed reload is not retried: the previous version runs, and the new
// one's failure is in Status until the file changes. Nor is a start stuck
// past its deadline and grace (a *StuckError): its runtime ignored the
// deadline, and each try could leave another call running.
//
// A retry is a Load: in a group it loads only a rule this host owns (the
// group's hand-over and the retry are serialised by the loads lock), so a
// withdrawn version or a rule another member runs is left to the group
// (groupfailed.go).

// Default is the first wait before a rule file whose start failed
// is loaded again.
const Default = time.Second

// Max is the longest wait between two retries of a rule file.
const Max = 5 * time.Minute

// Retries schedules the loads of rule files whose start failed.
type Retries struct {
	first time.Duration // the first wait; none when negative
	Clock clock.Clock
	quiet *serial.Quiet
	wake  serial.Signal // a retry was scheduled or made due
	mu    sync.Mutex
	due   map[string]retry // by path
}

// retry is one file's next load.
type retry struct {
	hash [32]byte      // the content whose start failed
	wait time.Duration // the wait before at
	at   time.Time     // zero: taken by run, not yet failed again
}

func New(first time.Duration, c clock.Clock, q *serial.Quiet) *Retries {
	if first == 0 {
		first = Default
	}
	return &Retries{first: min(first, Max), Clock: c, quiet: q, wake: serial.NewSignal(q), due: map[string]retry{}}
}

// Failed schedules the load of the file at path, whose content hash failed
// to start at now, and returns when: after the first wait, or twice the
// last wait when that content failed before (up to Max). The
// zero time when q schedules nothing.
func (q *Retries) Failed(path string, hash [32]byte, now time.Time) time.Time {
	if q.first < 0 {
		return time.Time{}
	}
	q.mu.Lock()
	wait := q.first
	if was, ok := q.due[path]; ok && was.hash == hash {
		wait = min(2*was.wait, Max)
	}
	r := retry{hash: hash, wait: wait, at: now.Add(wait)}
	q.due[path] = r
	q.mu.Unlock()
	q.signal()
	return r.at
}

// Drop cancels the file's retry: it loaded, failed for good, or is gone.
func (q *Retries) Drop(path string) {
	q.mu.Lock()
	delete(q.due, path)
	q.mu.Unlock()
}

// At returns when the file at path is loaded again (zero: not scheduled).
func (q *Retries) At(path string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.due[path].at
}

// Now makes every scheduled retry due now (the store is back).
func (q *Retries) Now() {
	q.mu.Lock()
	t := q.Clock.Now()
	for p, r := range q.due {
		if !r.at.IsZero() && r.at.After(t) {
			r.at = t
			q.due[p] = r
		}
	}
	q.mu.Unlock()
	q.signal()
}

func (q *Retries) signal() { q.wake.Raise() }

// next returns when the earliest scheduled retry is due.
func (q *Retries) next() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var at time.Time
	for _, r := range q.due {
		if !r.at.IsZero() && (at.IsZero() || r.at.Before(at)) {
			at = r.at
		}
	}
	return at, !at.IsZero()
}

// take returns the files whose retry is due at t, sorted, and marks them
// taken: the outcome of each load schedules its next retry or drops it.
func (q *Retries) take(t time.Time) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for p, r := range q.due {
		if !r.at.IsZero() && !r.at.After(t) {
			r.at = time.Time{}
			q.due[p] = r
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Run calls load for each file whose retry is due, until ctx ends.
func (q *Retries) Run(ctx context.Context, load func(path string)) {
	t := serial.NewWake(q.Clock, q.quiet)
	defer t.Stop()
	defer q.wake.Drain()
	woke := func() {}
	for {
		t.Stop()
		if at, ok := q.next(); ok {
			t.Reset(at.Sub(q.Clock.Now()))
		}
		woke() // once the timer is set again: see wake
		select {
		case <-ctx.Done():
			return
		case <-q.wake.C:
			woke = q.wake.Took
		case <-t.C():
			woke = t.Took
		}
		for _, p := range q.take(q.Clock.Now()) {
			if ctx.Err() != nil {
				return
			}
			load(p)
		}
	}
}
