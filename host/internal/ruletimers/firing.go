package ruletimers

import (
	"bytes"
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/timers"
)

// A timer's firing: its event queued in the rule's mailbox (or kept
// waiting while the mailbox is full), taken by the worker, and recorded in
// the store once the handler returned.

// LateTolerance is how long after its deadline a timer's event may
// reach the rule's handler and still not be marked late. A timer found past
// its deadline when its rule loads (the host was down) is always late.
const LateTolerance = 100 * time.Millisecond

// OwnerName implements the owner of a timers.Timer.
func (rt *Timers) OwnerName() string { return rt.rule }

// Fire implements the owner of a timers.Timer: it queues t's event in the
// rule's mailbox, or, when the mailbox is full, keeps it waiting until
// there is room (Refill): a timer is never dropped for a full mailbox.
func (rt *Timers) Fire(t *timers.Timer, _ int64) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped || t.Inflight || !rt.currentLocked(t) {
		return
	}
	t.Inflight = true
	if len(rt.waiting) > 0 || rt.box.Push(rt.deliveryLocked(t)) != mailbox.Queued {
		rt.waiting = append(rt.waiting, t)
		rt.parked.Store(true)
	}
}

func (rt *Timers) deliveryLocked(t *timers.Timer) mailbox.Delivery {
	return mailbox.Delivery{Ev: abi.Event{Op: abi.OpTimer, Key: t.Name, Value: bytes.Clone(t.Payload), Deadline: t.Deadline}, Timer: t}
}

// Refill queues the timers waiting for room in the mailbox, in order, as
// far as there is room. The rule's worker calls it after taking an event.
func (rt *Timers) Refill() {
	if !rt.parked.Load() {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	i := 0
	for ; i < len(rt.waiting); i++ {
		t := rt.waiting[i]
		if !rt.currentLocked(t) || rt.stopped {
			continue
		}
		if rt.box.Push(rt.deliveryLocked(t)) != mailbox.Queued {
			break
		}
	}
	n := copy(rt.waiting, rt.waiting[i:])
	clear(rt.waiting[n:])
	rt.waiting = rt.waiting[:n]
	rt.parked.Store(n > 0)
}

// Hold keeps the queued timer t until a version of the rule is live again
// (GoLive), late if late.
func (rt *Timers) Hold(t *timers.Timer, late bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !t.Inflight || !rt.currentLocked(t) || rt.stopped {
		return
	}
	t.Inflight, t.Held = false, true
	t.Late = t.Late || late
	rt.held = append(rt.held, t)
}

// Again holds the timer name, whose event a worker was abandoned in: its
// firing was not recorded, so the next live version gets it, late.
func (rt *Timers) Again(name string) {
	rt.mu.Lock()
	t := rt.idx[timers.TimerShard(name)][name]
	rt.mu.Unlock()
	if t != nil {
		rt.Hold(t, true)
	}
}

// Take is called by the worker before it hands t's event to the handler:
// false when t was cancelled or re-armed since it was queued (its event is
// dropped); otherwise it marks the event late when it is.
func (rt *Timers) Take(t *timers.Timer, ev *abi.Event) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !t.Inflight || !rt.currentLocked(t) {
		return false
	}
	ev.Late = t.Late || rt.svc.Scheduler.Clock.NowMs()-t.Deadline > LateTolerance.Milliseconds()
	return true
}

// Fired records t's firing once the handler returned: a one-shot timer is
// deleted, a periodic one moves to its next deadline (the next multiple of
// its period after its deadline that is still ahead). A timer cancelled or
// re-armed meanwhile is left alone. Store writes are tried a few times; one
// that still fails is logged (the store then keeps the old record, and the
// timer fires again, late, when the rule loads next).
func (rt *Timers) Fired(t *timers.Timer) {
	rt.io.Lock()
	defer rt.io.Unlock()
	rt.mu.Lock()
	if !rt.currentLocked(t) {
		rt.mu.Unlock()
		return
	}
	t.Inflight, t.Late = false, false
	deadline, every := t.Deadline, t.Every
	rt.mu.Unlock()
	ctx := rt.svc.Ctx
	key := timers.TimerKey(rt.rule, t.Name)
	if every == 0 {
		rt.retry(ctx, "delete the record of a fired timer", t.Name, func(ctx context.Context) error {
			return delTimerKey(ctx, rt.svc, rt.rule, key)
		})
		shard := timers.TimerShard(t.Name)
		names := rt.forget(t, shard)
		rt.retry(ctx, "update the timer index", t.Name, func(ctx context.Context) error {
			return rt.writeIndex(ctx, shard, names)
		})
		return
	}
	next := deadline + every
	if now := rt.svc.Scheduler.Clock.NowMs(); next <= now {
		next += ((now-next)/every + 1) * every // skip the periods that passed
	}
	rec := timers.EncodeTimerRecord(next, every, t.Payload)
	rt.retry(ctx, "move a periodic timer to its next deadline", t.Name, func(ctx context.Context) error {
		return setTimerKey(ctx, rt.svc, rt.rule, key, rec)
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	t.Deadline = next
	rt.placeLocked(t, nil)
}

// retry runs f up to timerWriteAttempts times, and logs its last error.
func (rt *Timers) retry(ctx context.Context, what, name string, f func(ctx context.Context) error) {
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return
		}
		if fenceRefused(err) { // the rule is not this host's any more: its next owner records the timer
			rt.svc.Log.Debug("timer: "+what+" refused: the rule's ownership was lost; not retried",
				"rule", rt.rule, "timer", name, "err", err)
			return
		}
		if attempt == timerWriteAttempts || ctx.Err() != nil {
			rt.svc.Log.Error("timer: could not "+what+"; the timer fires again when the rule loads next",
				"rule", rt.rule, "timer", name, "attempts", attempt, "err", err)
			return
		}
		serial.Sleep(rt.svc.Clock, rt.svc.Quiet, time.Duration(attempt)*100*time.Millisecond, ctx.Done())
	}
}
