package serial

import (
	"context"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/clock"
)

// Parker is a handler waiting in a host call (a lock wait) for a wake-up
// or for time to pass on the host's clock. In a serial host (quiet.go) the
// waiting handler counts as idle and gives up its turn: other rules go on
// (the lock's holder may be one of them), and a host on a virtual clock is
// idle until the clock is moved or someone wakes the handler, which then
// waits for its turn again.
type Parker struct {
	quiet *Quiet
	clock clock.Clock
	rq    *Rule // the rule's, when the caller is its handler (nil: not counted)
	ch    chan struct{}

	mu     sync.Mutex
	parked bool
	ticket uint64 // taken when woken
}

// NewParker returns a parker on the host's activity q and clock c for a
// call of the rule whose activity is rq; handler says the caller is the
// rule's handler (only a handler's wait is counted: a start or a plugin's
// own goroutine has no turn).
func NewParker(q *Quiet, c clock.Clock, rq *Rule, handler bool) *Parker {
	p := &Parker{quiet: q, clock: c, ch: make(chan struct{}, 1)}
	if handler && q != nil {
		p.rq = rq
	}
	return p
}

// Wake ends the wait, or the next one if none is in progress.
func (p *Parker) Wake() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked {
		p.parked = false
		p.ticket = p.quiet.Unpark(p.rq)
	}
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// Wait waits until wake, or d has passed on the host's clock, or ctx ends
// (its error), then for the handler's turn.
func (p *Parker) Wait(ctx context.Context, d time.Duration) error {
	defer p.clock.AfterFunc(d, p.Wake).Stop()
	p.mu.Lock()
	select {
	case <-p.ch: // woken before it parked
		p.mu.Unlock()
		return nil
	default:
	}
	if p.rq != nil {
		p.parked = true
		p.quiet.Park(p.rq)
	}
	p.mu.Unlock()
	var err error
	select {
	case <-p.ch:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if p.rq == nil {
		return err
	}
	p.mu.Lock()
	if p.parked {
		p.parked = false
		p.ticket = p.quiet.Unpark(p.rq)
	}
	ticket := p.ticket
	p.mu.Unlock()
	if e := p.quiet.Enter(ctx, p.rq, ticket); e != nil && err == nil {
		err = e
	}
	return err
}
