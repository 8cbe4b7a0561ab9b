package host

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// worker is the goroutine that runs a rule: its events one at a time, and
// control functions (swap, stop) between two events. A rule has at most one
// live worker. A worker stuck in a handler call past the call's deadline
// plus the rule's grace is abandoned when the host needs the rule (see do):
// it is left to finish the call on its own, then closes the instance it ran
// and ends, touching nothing else of the rule; a reload starts a fresh
// worker in its place.
type worker struct {
	r      *rule
	ctx    context.Context // the rule's; cancelled when the worker is abandoned
	cancel context.CancelFunc
	done   chan struct{}
	task   *task
	// quit asks the worker to stop the rule and end (see stop); stopCtx,
	// set before quit is closed, bounds the release.
	quit    chan struct{}
	stopCtx context.Context

	exiting bool // owned by the worker goroutine

	// state is the handler call in progress: a sequence number << 2 | its
	// phase. The worker moves it from idle to call and back; whoever needs
	// the rule moves it from call to abandoned, once the call is overdue.
	state    atomic.Uint64
	started  atomic.Int64 // of the call in progress, on the monotonic clock (now)
	deadline atomic.Int64 //

	// The event of the call in progress, for the log; guarded by r.mu.
	key string
	op  abi.Op
}

const (
	phaseIdle uint64 = iota
	phaseCall
	phaseAbandoned
	phaseMask = 3
)

// startWorker starts a worker for r and makes it the live one.
func (r *rule) startWorker() *worker {
	ctx, cancel := context.WithCancel(r.ctx)
	w := &worker{r: r, ctx: ctx, cancel: cancel, done: make(chan struct{}), quit: make(chan struct{}),
		task: r.h.calls.start("handle "+r.name, r.config().Grace)}
	r.mu.Lock()
	r.w = w
	lost := len(r.lost) > 0
	r.mu.Unlock()
	// A worker abandoned in a call may have left events and lost locks
	// waiting, their signal already taken.
	if r.mailbox.len() > 0 {
		r.mailbox.signal()
	}
	if lost {
		select {
		case r.lostSignal <- struct{}{}:
		default:
		}
	}
	go w.run()
	return w
}

// worker returns the live worker, or nil.
func (r *rule) worker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w
}

func (w *worker) run() {
	r := w.r
	defer r.h.calls.end(w.task)
	defer close(w.done)
	defer w.cancel()
	for !w.exiting {
		select {
		case <-w.quit: // first, before anything else that is ready
			r.stop(w.stopCtx, w)
			return
		default:
		}
		select {
		case <-w.quit:
			r.stop(w.stopCtx, w)
			return
		case f := <-r.ctrl:
			f(w)
		case <-r.lostSignal:
			r.mu.Lock()
			lost := r.lost
			r.lost = nil
			r.mu.Unlock()
			for _, name := range lost {
				if !w.deliver(delivery{ev: abi.Event{Key: name, Op: abi.OpLockLost}}) {
					return
				}
			}
		case <-r.mailbox.ready:
			if d, ok := r.mailbox.pop(); ok && !w.deliver(d) {
				return
			}
		}
	}
}

// begin marks a call starting now with timeout and returns its state.
func (w *worker) begin(timeout time.Duration) uint64 {
	t := now()
	w.started.Store(t)
	w.deadline.Store(t + int64(timeout))
	s := (w.state.Load()>>2+1)<<2 | phaseCall
	w.state.Store(s)
	return s
}

// end marks the call s over; false means it was abandoned meanwhile and
// the worker must end.
func (w *worker) end(s uint64) bool {
	return w.state.CompareAndSwap(s, s&^phaseMask|phaseIdle)
}

// overdueIn returns how long until the call in progress is overdue (its
// deadline, or asked when cancelled is set and asked is earlier, plus grace),
// and the state it read; when no call is in progress it returns grace, the
// time to look again.
func (w *worker) overdueIn(asked int64, cancelled bool, grace time.Duration) (time.Duration, uint64) {
	s := w.state.Load()
	if s&phaseMask != phaseCall {
		return grace, s
	}
	at := w.deadline.Load()
	if cancelled && asked < at {
		at = asked
	}
	return time.Duration(at + int64(grace) - now()), s
}

// stuck reports whether the worker is in a call past its deadline plus grace.
func (w *worker) stuck(grace time.Duration) bool {
	d, s := w.overdueIn(0, false, grace)
	return s&phaseMask == phaseCall && d < 0
}

// abandonIfOverdue abandons w if the call in progress is overdue.
func (w *worker) abandonIfOverdue(asked int64, cancelled bool, grace time.Duration) bool {
	d, s := w.overdueIn(asked, cancelled, grace)
	return s&phaseMask == phaseCall && d <= 0 && w.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned)
}

// abandonNow abandons w if it is in a handler call, however long it has run.
func (w *worker) abandonNow() bool {
	s := w.state.Load()
	return s&phaseMask == phaseCall && w.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned)
}

var errStuck = errors.New("the rule is stuck in a call")

// do runs f in the live worker w between two events and waits for it. When
// w is stuck in a handler call past the call's deadline plus the grace, do
// abandons w and returns errStuck, without running f; the caller then owns
// what the worker owned (see abandoned).
func (r *rule) do(ctx context.Context, w *worker, f func(*worker)) error {
	finished := make(chan struct{})
	job := func(w *worker) { defer close(finished); f(w) }
	if err := w.await(ctx, false, r.ctrl, job); err != nil {
		return err
	}
	<-finished // the worker runs f to completion before it can exit
	return nil
}

// stop asks w to stop the rule, its call in progress cancelled (the rule's
// context is), and waits until it has, or abandons it once its call is
// overdue (the grace counting from now if the deadline is later) and
// releases the rule from here. When ctx ends first, w is abandoned if it is
// in a call; otherwise it goes on to stop the rule itself and stop returns
// ctx's error.
func (w *worker) stop(ctx context.Context, why string) error {
	w.stopCtx = ctx
	close(w.quit)
	err := w.await(ctx, true, nil, nil)
	if errors.Is(err, errStuck) || (err != nil && ctx.Err() != nil && w.abandonNow()) {
		w.r.abandoned(w, why)
		w.r.release(ctx)
		return nil
	}
	if errors.Is(err, errRuleStopped) {
		return nil
	}
	return err
}

// await waits until w takes job on ctrl (when ctrl is not nil), or w ends,
// or ctx ends, or w's call in progress is overdue, which abandons it
// (errStuck). cancelled says the rule's context was cancelled now: the
// grace counts from now when that is earlier than the call's deadline.
func (w *worker) await(ctx context.Context, cancelled bool, ctrl chan func(*worker), job func(*worker)) error {
	asked := now()
	grace := w.r.config().Grace
	d, _ := w.overdueIn(asked, cancelled, grace)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case ctrl <- job: // a nil ctrl never sends
			return nil
		case <-w.done:
			return errRuleStopped
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if w.abandonIfOverdue(asked, cancelled, grace) {
				return errStuck
			}
			d, _ := w.overdueIn(asked, cancelled, grace)
			t.Reset(d)
		}
	}
}

// abandoned takes the rule over from w, which the caller abandoned in a
// handler call: w's context is cancelled, its instance is replaced or
// stopped (the worker closes it when its call returns), and the
// abandonment is counted and logged with why the host needed the rule.
func (r *rule) abandoned(w *worker, why string) {
	w.cancel()
	w.task.abandoned.Store(true)
	r.abandons.Add(1)
	r.failed.Add(1)
	if in := r.cur; in != nil {
		in.b.closed.Store(true)
	}
	r.cur = nil
	r.mu.Lock()
	if r.w == w {
		r.w = nil
	}
	key, op, cfg := w.key, w.op, r.cfg
	r.mu.Unlock()
	r.h.log.Error("rule abandoned: its handler did not return within its deadline plus the grace; it is left to end on its own",
		"rule", r.name, "key", key, "op", string(op), "timeout", cfg.Timeout, "grace", cfg.Grace,
		"running", time.Duration(now()-w.started.Load()).Round(time.Millisecond), "for", why)
}
