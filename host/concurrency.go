package host

import (
	"context"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/provenance"
)

// Per-key concurrency (RuleConfig.Concurrency). A rule of concurrency N
// runs N instances of its version (replica.go), and its worker runs them
// as a pool: it hands the oldest waiting event whose key no call is
// handling to a free instance, each call in a goroutine of its own, so up
// to N events of different keys are handled at once while one key's
// events are handled in order, one at a time. The events of a busy key
// stay in the mailbox (mailbox.PopFree), where they keep their order and
// keep conflating (modes latest and restart; any mode once full); in mode
// restart a newer change of a key cuts the call of that key only.
//
// Each call takes a place in the host's gate like any other, so
// Config.MaxConcurrentCalls bounds the calls of all rules together. A
// timer's events are keyed by the timer's name (one call per timer at a
// time). A lost lock's event (LOCK_LOST) runs alone: the pool starts
// nothing else until it returns. Control functions (a reload's swap) run
// once no call is in flight: a waiting one stops the pool from starting
// calls (worker.do). Stopping waits for every call in flight. A call past
// its deadline plus the grace abandons the worker with all its calls, as a
// stuck call does with concurrency 1 (worker.abandoned): the host goes on
// with a new worker, and the old one closes the version's instances once
// every call has returned. The events the pool had taken and not started
// (waiting for a place in the gate) go back to the head of the mailbox,
// for the new worker: only the calls running are lost with it.
//
// In a serial host (ssrun test, replay) the pool runs one call at a time,
// in the order of the mailbox, so a run is deterministic.

// poolResult is a call of a pool that returned.
type poolResult struct {
	slot     int
	key      string // its key in busy
	ok       bool   // false: the worker was abandoned in or before it
	lockLost bool   // a LOCK_LOST event, run alone
}

// busyKey is d's key among the pool's busy keys: its store key, or its
// timer's name apart from store keys.
func busyKey(d *mailbox.Delivery) string {
	if d.Timer != nil || d.Ev.Op == abi.OpTimer {
		return "\x00timer\x00" + d.Ev.Key
	}
	return d.Ev.Key
}

// runPool is the loop of the worker w while the running version has a
// pool (r.cur.members). It returns true when a control function installed
// another version (see loop), false when w ends: stopped (it stopped the
// rule) or abandoned (it closed the version's instances).
func (r *rule) runPool(w *worker) bool {
	in := r.cur
	slots := w.setPool(len(in.members))
	limit := len(slots)
	if r.svc.quiet != nil {
		limit = 1 // a serial host: one call at a time, in order
	}
	free := make([]int, 0, len(slots))
	for i := len(slots) - 1; i >= 0; i-- {
		free = append(free, i)
	}
	busy := make(map[string]struct{}, len(slots))
	isBusy := func(d *mailbox.Delivery) bool {
		_, ok := busy[busyKey(d)]
		return ok
	}
	results := make(chan poolResult, len(slots))
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := 0
	var (
		gone      bool         // w was abandoned
		quitting  bool         // asked to stop
		exclusive bool         // a LOCK_LOST call runs: nothing else starts
		lost      []lease.Lost // lost locks whose events wait for the pool to drain
	)
	start := func(d mailbox.Delivery, lockLost bool) {
		i := free[len(free)-1]
		free = free[:len(free)-1]
		key := busyKey(&d)
		if !lockLost {
			busy[key] = struct{}{}
		}
		inflight++ // w.taken counted d already
		wg.Go(func() {
			ok := r.callPooled(w, slots[i], in.members[i], d)
			if ok && d.Timer != nil {
				r.timers.Fired(d.Timer) // as deliver does
			}
			results <- poolResult{slot: i, key: key, ok: ok, lockLost: lockLost}
		})
	}
	for {
		if !quitting {
			select {
			case <-w.quit: // first, before anything else that is ready (as run)
				quitting = true
			default:
			}
		}
		switch {
		case inflight > 0:
		case gone:
			if len(lost) > 0 { // theirs to deliver, in the rule's next worker
				r.locks.GiveBack(lost)
			}
			if err := in.closeScripts(context.Background()); err != nil {
				r.svc.log.Warn("closing an abandoned version failed", "rule", r.name, "err", err)
			}
			return false
		case quitting:
			r.shutdown(w.stopCtx)
			return false
		case len(lost) > 0: // drained: the oldest lost lock's event, alone
			l := lost[0]
			lost = lost[1:]
			d := mailbox.Delivery{Ev: abi.Event{Key: l.Name, Op: abi.OpLockLost}, Ticket: l.Ticket}
			if !r.admit(&d) {
				r.svc.quiet.Work(r.quiet, -1)
				continue
			}
			exclusive = true
			w.taken.Add(1)
			start(d, true)
		}
		if !gone && w.gone.Load() {
			gone = true
			r.mailbox.Signal() // a ready signal this pool took is the next worker's
		}
		canStart := !gone && !quitting && !exclusive && len(lost) == 0 && w.wantCtrl.Load() == 0
		if canStart && inflight < limit {
			if sh := r.shadowing(); sh != nil {
				sh.due()
			}
			for inflight < limit && !w.gone.Load() {
				// Counted in flight before it leaves the mailbox: a status
				// read between the two would see the rule with nothing
				// queued and nothing in flight while it has an event.
				w.taken.Add(1)
				d, ok := r.mailbox.PopFree(isBusy)
				if !ok {
					w.taken.Add(-1)
					break
				}
				if !r.admit(&d) {
					r.mailbox.Done()
					w.taken.Add(-1)
					continue
				}
				start(d, false)
			}
			r.timers.Refill() // timers that were due while the mailbox was full
		}
		var ready <-chan struct{}
		if canStart && inflight < limit {
			ready = r.mailbox.Ready
		}
		var ctrl chan func()
		if inflight == 0 && !gone && !quitting {
			ctrl = w.ctrl
		}
		var lostC, quit <-chan struct{}
		if !gone && !quitting {
			lostC, quit = r.locks.LostSignal(), w.quit
		}
		select {
		case <-quit:
			quitting = true
		case f := <-ctrl:
			f()
			if r.cur != in {
				w.setPool(0)
				return true // another version: loop starts its pool, or runs it alone
			}
		case <-lostC:
			if w.gone.Load() { // abandoned meanwhile: the signal is the next worker's
				r.locks.SignalLost()
				continue
			}
			lost = append(lost, r.locks.TakeLost()...)
		case <-ready:
		case <-w.nudge:
		case res := <-results:
			inflight--
			free = append(free, res.slot)
			if res.lockLost {
				exclusive = false
				r.svc.quiet.Work(r.quiet, -1)
			} else {
				delete(busy, res.key)
				r.mailbox.Done()
			}
			w.taken.Add(-1)
			if !gone && !res.ok {
				gone = true
				r.mailbox.Signal()
			}
		}
	}
}

// admit checks d before the pool starts a call on it: false when it is no
// longer for the running version (see skipLocked), or is a timer's firing
// cancelled or re-armed since it was queued. A timer's firing skipped is
// recorded as fired, as deliver does.
func (r *rule) admit(d *mailbox.Delivery) bool {
	if d.Timer != nil && !r.timers.Take(d.Timer, &d.Ev) {
		return false
	}
	if why := r.skipReason(*d); why != "" {
		r.skipped(*d, why)
		if d.Timer != nil {
			r.timers.Fired(d.Timer)
		}
		return false
	}
	return true
}

// putBack gives d, which a pool of the abandoned worker took and never
// started, to the rule's next worker: a change goes back to the head of
// the mailbox (it came before the events waiting), a lost lock's event
// to the leases' lost ones; a timer's firing is fired again by the next
// version, late, as an abandoned call's is.
func (r *rule) putBack(d mailbox.Delivery) {
	switch {
	case d.Timer != nil:
		r.timers.Again(d.Ev.Key)
	case d.Ev.Op == abi.OpLockLost: // its lock's loss, as those the pool had not taken
		r.svc.quiet.Work(r.quiet, 1) // work again until delivered
		r.locks.GiveBack([]lease.Lost{{Name: d.Ev.Key, Ticket: d.Ticket}})
	default:
		r.requeue(d)
	}
}

// callPooled runs the handler of the pool's instance m on d, in c, one of
// w's call states; false when w was abandoned (the caller must end).
func (r *rule) callPooled(w *worker, c *callState, m poolMember, d mailbox.Delivery) bool {
	timeout := r.config().Timeout
	if err := r.svc.gate.Enter(w.ctx, &c.gated); err != nil {
		if w.gone.Load() { // abandoned while d waited for a place: not lost
			r.putBack(d)
			return false
		}
		return true // shutting down
	}
	if q := r.svc.quiet; q != nil {
		if err := q.Enter(w.ctx, r.quiet, d.Ticket); err != nil {
			r.svc.gate.Leave(&c.gated)
			return true
		}
		defer q.Leave(r.quiet)
	}
	var start time.Time
	if r.svc.obs != nil || r.svc.trace != nil {
		start = time.Now()
	}
	if r.svc.rec != nil {
		r.svc.rec.RecordEvent(r.name, r.svc.timers.Clock.NowMs(), d.Ev)
	}
	s, ok := c.beginPool(w.clock, timeout, d.Ev.Key, d.Ev.Op)
	if !ok { // abandoned as it was handed over: it never started
		r.svc.gate.Leave(&c.gated)
		r.putBack(d)
		return false
	}
	m.own.set(d.Lin, provenance.CauseOf(d.Ev, d.Lin))
	ctx, endCuttable := r.beginCuttableKey(w.ctx, d.Ev)
	err := m.script.Handle(ctx, d.Ev)
	cut := endCuttable()
	r.svc.gate.Leave(&c.gated)
	m.own.set(provenance.Lineage{}, provenance.Cause{}) // outside a handler a write answers no event
	if !c.end(s) {
		return false
	}
	r.after(w, d, start, err, cut)
	return true
}
