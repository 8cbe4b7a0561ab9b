package wasm

import (
	"context"
	"sync"
	"time"
)

// guard lets another goroutine stop the guest call in progress on a script
// or a load check, without waiting for it: Script.Close and Runtime.Close
// never wait on a guest. Every call into a guest gets its context from
// begin; stop cancels that context, which ends the call at once (the
// instance's interrupt flag stops the guest within a few thousand loop
// iterations or calls, see instance.call, and sleeper ends a WASI sleep).
type guard struct {
	mu      sync.Mutex
	stopped bool
	busy    bool               // an operation holds the guarded instance
	cancel  context.CancelFunc // of the call in progress, or nil
}

// begin returns the context of one call into the guest: ctx bounded by
// timeout and by stop. end(cancel) must follow. It fails with ErrClosed
// once stopped.
func (g *guard) begin(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	g.cancel = cancel
	return ctx, cancel, nil
}

// end closes the call begin started.
func (g *guard) end(cancel context.CancelFunc) {
	g.mu.Lock()
	g.cancel = nil
	g.mu.Unlock()
	cancel()
}

// acquire marks an operation (such as one event: restart, calls, flush) as
// holding the guarded instance, so that stop leaves discarding it to the
// operation. It fails with ErrClosed once stopped.
func (g *guard) acquire() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return ErrClosed
	}
	g.busy = true
	return nil
}

// release ends the operation acquire started. It reports whether the
// guard was stopped meanwhile: the operation must then discard the
// instance itself.
func (g *guard) release() (stopped bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy = false
	return g.stopped
}

// stop stops the guard: the call in progress ends, and later begin and
// acquire fail. It reports whether an operation holds the instance (and
// will discard it on release).
func (g *guard) stop() (busy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	if g.cancel != nil {
		g.cancel()
	}
	return g.busy
}

// isStopped reports whether stop was called: a call that failed then
// failed because of it.
func (g *guard) isStopped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stopped
}
