// Package serial keeps a serial host's activity (ssrun test and replay run one
// handler at a time, in ticket order, and ask when the host is idle) and the
// waits and wake-ups between the host's goroutines that count as activity:
// Signal, Wake and Sleep on the host's clock, and a handler parked in a lock
// wait (Parker). A nil *Quiet counts nothing.
package serial

import (
	"context"
	"errors"
	"sync"
)

// A serial host (host.Config.Serial: ssrun test and replay) runs one handler at
// a time, in a fixed order, and can tell when it is idle, so that a test
// step ends deterministically, without sleeping.
//
// Idle means: every event the store client queued has been routed to the
// rules' mailboxes; no rule has an event waiting or being handled (a
// handler waiting for a lock on the clock does not count until it is
// woken); no signal between the host's goroutines is pending (a resync, a
// timer scheduler's wake-up, a lease renewal, a load retry, a canary's
// window); and no handler holds the turn. Time-driven work starts only
// when a clock call runs (a virtual clock's Fire), and counts as activity
// from then until it is done.
//
// Order: each event queued for a rule takes a ticket (a global sequence
// number) as it enters the rule's mailbox, or, for a LOCK_LOST, as the
// lease is lost; a handler woken in a lock wait takes a new one when it is
// woken. Handlers run one at a time (the turn): the turn goes to the
// waiting handler with the smallest ticket, once every rule that has work
// and is not parked in a lock wait is waiting for it, no event is left to
// route and no other activity is pending. So the handlers run in the
// order their events were queued across all rules, which is the order of
// the store's notifications (rules in name order for one notification),
// and a test's writes, logs and versions are the same in every run.
type Quiet struct {
	queued func() uint64 // the events the store client queued so far

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) on every change
	routed  uint64        // events the dispatcher has handled
	other   int           // signals raised and not taken (signal, wake)
	active  int           // rules with work that are not parked
	waiting map[*Rule]uint64
	holder  any // the turn's holder: a *Rule, or a hold (Host.Hold)
	seq     uint64
}

// Rule is a rule's part in its serial host's activity.
type Rule struct {
	work   int  // events queued or being handled
	parked bool // its handler waits for a lock, on the clock
}

// ErrNotSerial is returned by the idle and hold calls of a host that is not
// serial.
var ErrNotSerial = errors.New("host: not a serial host (Config.Serial)")

func New(queued func() uint64) *Quiet {
	return &Quiet{queued: queued, changed: make(chan struct{}), waiting: map[*Rule]uint64{}}
}

// changedLocked wakes everyone waiting for a change.
func (q *Quiet) changedLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// Add counts n signals raised (or, negative, taken).
func (q *Quiet) Add(n int) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.other += n
	q.changedLocked()
	q.mu.Unlock()
}

// RoutedOne counts an event handled by the dispatcher.
func (q *Quiet) RoutedOne() {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.routed++
	q.changedLocked()
	q.mu.Unlock()
}

// Ticket returns the next ticket (0 when not serial).
func (q *Quiet) Ticket() uint64 {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.seq++
	return q.seq
}

// isActive reports whether rq counts as active.
func (rq *Rule) isActive() bool { return rq.work > 0 && !rq.parked }

// update applies f to rq and recounts the active rules.
func (q *Quiet) update(rq *Rule, f func()) {
	if q == nil || rq == nil {
		return
	}
	q.mu.Lock()
	was := rq.isActive()
	f()
	if now := rq.isActive(); now != was {
		if now {
			q.active++
		} else {
			q.active--
		}
	}
	q.changedLocked()
	q.mu.Unlock()
}

// Work counts n events queued for rq (negative: handled or dropped).
func (q *Quiet) Work(rq *Rule, n int) { q.update(rq, func() { rq.work += n }) }

// Park marks rq's handler as waiting on the clock (or a wake-up) and gives
// up its turn.
func (q *Quiet) Park(rq *Rule) {
	q.update(rq, func() {
		rq.parked = true
		if q.holder == rq {
			q.holder = nil
		}
	})
}

// Unpark marks rq's handler as woken: it waits for the turn again with a
// new ticket, which Unpark returns.
func (q *Quiet) Unpark(rq *Rule) (ticket uint64) {
	q.update(rq, func() {
		rq.parked = false
		q.seq++
		ticket = q.seq
	})
	return ticket
}

// grantableLocked reports whether the turn may go to a waiting handler.
func (q *Quiet) grantableLocked() bool {
	return q.holder == nil && q.other == 0 && q.routed == q.queued() && q.active == len(q.waiting)
}

// Enter waits for rq's turn to handle the event of ticket, or until ctx
// ends.
func (q *Quiet) Enter(ctx context.Context, rq *Rule, ticket uint64) error {
	q.mu.Lock()
	q.waiting[rq] = ticket
	q.changedLocked()
	err := q.awaitLocked(ctx, func() bool { return q.grantableLocked() && q.smallestLocked() == rq })
	delete(q.waiting, rq)
	if err == nil {
		q.holder = rq
	}
	q.changedLocked()
	q.mu.Unlock()
	return err
}

// awaitLocked waits, q.mu held (and released while it waits), until cond
// holds or ctx ends.
func (q *Quiet) awaitLocked(ctx context.Context, cond func() bool) error {
	for !cond() {
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			q.mu.Lock()
			return ctx.Err()
		}
		q.mu.Lock()
	}
	return nil
}

// smallestLocked returns the waiting rule with the smallest ticket.
func (q *Quiet) smallestLocked() *Rule {
	var best *Rule
	var min uint64
	for rq, t := range q.waiting {
		if best == nil || t < min {
			best, min = rq, t
		}
	}
	return best
}

// Leave gives the turn back.
func (q *Quiet) Leave(rq *Rule) {
	q.mu.Lock()
	if q.holder == rq {
		q.holder = nil
	}
	q.changedLocked()
	q.mu.Unlock()
}

// idleLocked reports whether the host is idle (see above).
func (q *Quiet) idleLocked() bool {
	return q.holder == nil && q.other == 0 && q.active == 0 && q.routed == q.queued()
}

// WaitIdle waits until the host is idle, or ctx ends.
func (q *Quiet) WaitIdle(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.awaitLocked(ctx, q.idleLocked)
}

// Hold takes the turn for the caller once it is free, so that no handler
// runs until release.
func (q *Quiet) Hold(ctx context.Context) (release func(), err error) {
	token := new(int)
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.awaitLocked(ctx, func() bool { return q.holder == nil }); err != nil {
		return nil, err
	}
	q.holder = token
	q.changedLocked()
	return func() {
		q.mu.Lock()
		if q.holder == token {
			q.holder = nil
		}
		q.changedLocked()
		q.mu.Unlock()
	}, nil
}
