package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/internal/gate"
	"github.com/ssrun/ssrun/host/internal/serial"
)

// worker is the goroutine that runs a rule: its events one at a time, and
// control functions (swap, stop) between two events; the rule gives it its
// loop (see rule.run). A rule has at most one live worker. A worker stuck in
// a handler call past the call's deadline plus the rule's grace is abandoned
// when the host needs the rule (see await): it is left to finish the call on
// its own, then closes the instance it ran and ends, touching nothing else
// of the rule; a reload starts a fresh worker in its place.
type worker struct {
	ctx    context.Context // the rule's; cancelled when the worker is abandoned
	cancel context.CancelFunc
	done   chan struct{}
	calls  *abandon.Tracker
	clock  clock.Clock // of its calls' deadlines and grace
	quiet  *serial.Quiet
	task   *abandon.Task
	ctrl   chan func() // control functions, run between two events (do)
	// quit asks the worker to stop the rule and end (see stop); stopCtx,
	// set before quit is closed, bounds the release.
	quit    chan struct{}
	stopCtx context.Context

	// state is the handler call in progress: a sequence number << 2 | its
	// phase. The worker moves it from idle to call and back; whoever needs
	// the rule moves it from call to abandoned, once the call is overdue.
	state    atomic.Uint64
	gated    atomic.Bool  // the call in progress holds a place in the host's gate (internal/gate)
	started  atomic.Int64 // of the call in progress, on the monotonic clock (now)
	deadline atomic.Int64 //

	mu  sync.Mutex // the event of the call in progress, for the log
	key string
	op  abi.Op
}

const (
	phaseIdle uint64 = iota
	phaseCall
	phaseAbandoned
	phaseMask = 3
)

var (
	errStuck       = errors.New("the rule is stuck in a call")
	errRuleStopped = errors.New("rule stopped")
)

// newWorker returns a worker under ctx, tracked in the host's calls as
// what ("handle x.lua") with the rule's grace. run starts it.
func newWorker(ctx context.Context, svc *services, what string, grace time.Duration) *worker {
	ctx, cancel := context.WithCancel(ctx)
	return &worker{ctx: ctx, cancel: cancel, done: make(chan struct{}), calls: svc.calls, clock: svc.clock, quiet: svc.quiet,
		task: svc.calls.Start(what, grace), ctrl: make(chan func()), quit: make(chan struct{})}
}

// run starts the worker's goroutine, which runs loop until it returns.
func (w *worker) run(loop func()) {
	go func() {
		defer w.calls.End(w.task)
		defer close(w.done)
		defer w.cancel()
		loop()
	}()
}

// begin marks a call of the event (key, op) starting now with timeout and
// returns its state.
func (w *worker) begin(timeout time.Duration, key string, op abi.Op) uint64 {
	w.mu.Lock()
	w.key, w.op = key, op
	w.mu.Unlock()
	t := clock.Mono(w.clock)
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

// call returns the event of the call in progress (or the last one) and how
// long it has run.
func (w *worker) call() (key string, op abi.Op, running time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.key, w.op, time.Duration(clock.Mono(w.clock) - w.started.Load())
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
	return time.Duration(at + int64(grace) - clock.Mono(w.clock)), s
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

// release lets go of a worker abandoned in a call: its context is cancelled
// and it counts as stuck until the call returns.
func (w *worker) release(g gate.Gate) {
	g.Leave(&w.gated)
	w.cancel()
	w.task.Abandoned.Store(true)
}

// do runs f in w between two events and waits for it. When w is stuck in a
// handler call past the call's deadline plus grace, do abandons w and
// returns errStuck, without running f; the caller then owns what the worker
// owned (see rule.abandoned).
func (w *worker) do(ctx context.Context, grace time.Duration, f func()) error {
	finished := make(chan struct{})
	job := func() { defer close(finished); f() }
	if err := w.await(ctx, false, grace, w.ctrl, job); err != nil {
		return err
	}
	<-finished // the worker runs f to completion before it can exit
	return nil
}

// stop asks w to stop the rule (its loop does, under ctx) and end, and waits
// until it has (errRuleStopped), or ctx ends, or its call in progress is
// overdue, which abandons it (errStuck): the grace counts from now if the
// call's deadline is later, since the rule's context, and so the call, was
// cancelled now.
func (w *worker) stop(ctx context.Context, grace time.Duration) error {
	w.stopCtx = ctx
	close(w.quit)
	return w.await(ctx, true, grace, nil, nil)
}

// await waits until w takes job on ctrl (when ctrl is not nil), or w ends,
// or ctx ends, or w's call in progress is overdue, which abandons it
// (errStuck). cancelled says the rule's context was cancelled now: the
// grace counts from now when that is earlier than the call's deadline.
func (w *worker) await(ctx context.Context, cancelled bool, grace time.Duration, ctrl chan func(), job func()) error {
	asked := clock.Mono(w.clock)
	d, _ := w.overdueIn(asked, cancelled, grace)
	t := serial.NewWake(w.clock, w.quiet)
	t.Reset(d)
	defer t.Stop()
	for {
		select {
		case ctrl <- job: // a nil ctrl never sends
			return nil
		case <-w.done:
			return errRuleStopped
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C():
			t.Took()
			if w.abandonIfOverdue(asked, cancelled, grace) {
				return errStuck
			}
			d, _ := w.overdueIn(asked, cancelled, grace)
			t.Reset(d)
		}
	}
}
