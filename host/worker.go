package host

import (
	"context"
	"errors"
	"slices"
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
	ctrl   chan func()   // control functions, run between two events (do)
	nudge  chan struct{} // cap 1: a control function stopped waiting (do)
	// quit asks the worker to stop the rule and end (see stop); stopCtx,
	// set before quit is closed, bounds the release.
	quit    chan struct{}
	stopCtx context.Context

	// cs is the handler call in progress; a worker of a rule with
	// concurrency > 1 also has one per instance of its pool (pool, see
	// concurrency.go), set while it runs the pool.
	cs   callState
	pmu  sync.Mutex
	pool []*callState
	// lost are the calls w was abandoned in (under pmu); gone is set once
	// it was: a pool then takes no more events.
	lost []lostCall
	gone atomic.Bool
	// taken counts the events the worker or its pool took from the mailbox
	// (counted just before they leave it) and not yet accounted for: in
	// flight, from the mailbox's point of view.
	taken atomic.Int32
	// wantCtrl counts control functions waiting for a pool to drain (do):
	// the pool stops starting calls meanwhile.
	wantCtrl atomic.Int32
}

// lostCall is a call a worker was abandoned in: its event and how long it
// had run.
type lostCall struct {
	key     string
	op      abi.Op
	running time.Duration
}

// callState is one handler call of a worker: a sequence number << 2 | its
// phase. The worker moves it from idle to call and back; whoever needs
// the rule moves it from call to abandoned, once the call is overdue.
type callState struct {
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
		task: svc.calls.Start(what, grace), ctrl: make(chan func()), nudge: make(chan struct{}, 1), quit: make(chan struct{})}
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
	c := &w.cs
	c.mark(w.clock, timeout, key, op)
	s := (c.state.Load()>>2+1)<<2 | phaseCall
	c.state.Store(s)
	return s
}

// mark records the event (key, op) of a call starting now with timeout.
func (c *callState) mark(clk clock.Clock, timeout time.Duration, key string, op abi.Op) {
	c.mu.Lock()
	c.key, c.op = key, op
	c.mu.Unlock()
	t := clock.Mono(clk)
	c.started.Store(t)
	c.deadline.Store(t + int64(timeout))
}

// end marks the call s over; false means it was abandoned meanwhile and
// the worker must end.
func (w *worker) end(s uint64) bool { return w.cs.end(s) }

// end marks the call s over; false means it was abandoned meanwhile.
func (c *callState) end(s uint64) bool {
	return c.state.CompareAndSwap(s, s&^phaseMask|phaseIdle)
}

// info returns the event of c and how long it has run.
func (c *callState) info(clk clock.Clock) (key string, op abi.Op, running time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key, c.op, time.Duration(clock.Mono(clk) - c.started.Load())
}

// eachCall calls f with each call state of w: its own, then its pool's.
func (w *worker) eachCall(f func(*callState)) {
	f(&w.cs)
	w.pmu.Lock()
	defer w.pmu.Unlock()
	for _, c := range w.pool {
		f(c)
	}
}

// overdueIn returns how long until the first of w's calls in progress is
// overdue (its deadline, or asked when cancelled is set and asked is
// earlier, plus grace), that call and the state it read; when no call is
// in progress it returns grace, the time to look again, and nil.
func (w *worker) overdueIn(asked int64, cancelled bool, grace time.Duration) (time.Duration, *callState, uint64) {
	now := clock.Mono(w.clock)
	d, c, s := w.cs.overdueIn(now, asked, cancelled, grace)
	if c == nil {
		d = grace
	}
	w.pmu.Lock()
	defer w.pmu.Unlock()
	for _, pc := range w.pool {
		if pd, pc, ps := pc.overdueIn(now, asked, cancelled, grace); pc != nil && (c == nil || pd < d) {
			d, c, s = pd, pc, ps
		}
	}
	return d, c, s
}

// overdueIn returns how long until c's call is overdue, c and its state,
// or a nil call state when c is not in a call.
func (c *callState) overdueIn(now, asked int64, cancelled bool, grace time.Duration) (time.Duration, *callState, uint64) {
	s := c.state.Load()
	if s&phaseMask != phaseCall {
		return 0, nil, s
	}
	at := c.deadline.Load()
	if cancelled && asked < at {
		at = asked
	}
	return time.Duration(at + int64(grace) - now), c, s
}

// stuck reports whether the worker is in a call past its deadline plus grace.
func (w *worker) stuck(grace time.Duration) bool {
	d, c, _ := w.overdueIn(0, false, grace)
	return c != nil && d < 0
}

// inFlight counts w's handler calls in progress: its own, and the events
// it or its pool has taken from the mailbox and not yet accounted for.
func (w *worker) inFlight() int {
	n := int(w.taken.Load())
	if w.cs.state.Load()&phaseMask == phaseCall {
		n = max(n, 1) // alone, the call's event is counted in taken too
	}
	return n
}

// abandonIfOverdue abandons w if a call in progress is overdue.
func (w *worker) abandonIfOverdue(asked int64, cancelled bool, grace time.Duration) bool {
	d, c, s := w.overdueIn(asked, cancelled, grace)
	if c == nil || d > 0 || !c.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned) {
		return false
	}
	w.abandoned(c)
	return true
}

// abandonNow abandons w if it is in a handler call, however long it has run.
func (w *worker) abandonNow() bool {
	s := w.cs.state.Load()
	if s&phaseMask == phaseCall && w.cs.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned) {
		w.abandoned(&w.cs)
		return true
	}
	_, c, s := w.overdueIn(0, false, 0)
	if c == nil || !c.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned) {
		return false
	}
	w.abandoned(c)
	return true
}

// abandoned records that w was abandoned in the call c, and abandons
// every call state of its pool, in a call or idle: a call ending finds it
// abandoned, and the pool starts no new call (see callState.beginPool).
func (w *worker) abandoned(c *callState) {
	w.gone.Store(true)
	key, op, running := c.info(w.clock)
	w.pmu.Lock()
	defer w.pmu.Unlock()
	w.lost = append(w.lost, lostCall{key, op, running})
	for _, pc := range w.pool {
		for pc != c {
			s := pc.state.Load()
			if s&phaseMask == phaseAbandoned {
				break
			}
			if pc.state.CompareAndSwap(s, s&^phaseMask|phaseAbandoned) {
				if s&phaseMask == phaseCall {
					key, op, running := pc.info(w.clock)
					w.lost = append(w.lost, lostCall{key, op, running})
				}
				break
			}
		}
	}
}

// lostCalls returns the calls w was abandoned in, the overdue one first.
func (w *worker) lostCalls() []lostCall {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	return slices.Clone(w.lost)
}

// beginPool marks a call of a pool's instance starting now, as begin
// does; false when w was abandoned (the call must not start).
func (c *callState) beginPool(clk clock.Clock, timeout time.Duration, key string, op abi.Op) (uint64, bool) {
	s := c.state.Load()
	if s&phaseMask == phaseAbandoned {
		return 0, false
	}
	c.mark(clk, timeout, key, op)
	n := (s>>2+1)<<2 | phaseCall
	return n, c.state.CompareAndSwap(s, n)
}

// setPool gives w n call states for a pool's instances (0: none).
func (w *worker) setPool(n int) []*callState {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	w.pool = make([]*callState, n)
	for i := range w.pool {
		w.pool[i] = &callState{}
	}
	return w.pool
}

// release lets go of a worker abandoned in a call: its context is cancelled
// and it counts as stuck until the call returns.
func (w *worker) release(g gate.Gate) {
	w.eachCall(func(c *callState) { g.Leave(&c.gated) })
	w.cancel()
	w.task.Abandoned.Store(true)
}

// do runs f in w between two events and waits for it. When w is stuck in a
// handler call past the call's deadline plus grace, do abandons w and
// returns errStuck, without running f; the caller then owns what the worker
// owned (see rule.abandoned).
func (w *worker) do(ctx context.Context, grace time.Duration, f func()) error {
	w.wantCtrl.Add(1) // a pool stops starting calls (concurrency.go)
	defer func() {
		w.wantCtrl.Add(-1)
		select { // a pool waiting for it starts calls again
		case w.nudge <- struct{}{}:
		default:
		}
	}()
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
	d, _, _ := w.overdueIn(asked, cancelled, grace)
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
			d, _, _ := w.overdueIn(asked, cancelled, grace)
			t.Reset(d)
		}
	}
}
