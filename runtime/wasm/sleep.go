package wasm

import (
	"context"
	"errors"
	"time"

	"github.com/tetratelabs/wazero/sys"
)

// sleeper is one instance's WASI sleep (its sys.Nanosleep): poll_oneoff
// waits on its clock subscriptions with it, and that is what sleeping
// compiles to in every guest language (Go's time.Sleep and idle scheduler,
// Rust's thread::sleep, ...). It sleeps for real, but no longer than the
// call in progress may run: wazero's WithSysNanosleep is a plain
// time.Sleep that nothing interrupts, so a guest asking for an hour would
// hold its call, and whoever waits for it, for an hour, deadline or not.
//
// A sleeper is bound to the context of each call into its instance by
// instance.call. Host functions run on the goroutine that called into the
// guest, so ctx needs no lock.
type sleeper struct {
	ctx context.Context // of the call in progress; nil between calls
}

// errSleepOutsideCall is a sleep with no call in progress, which wazero
// never does (instances have no start functions).
var errSleepOutsideCall = errors.New("wasm: WASI sleep outside a call")

// nanosleep implements sys.Nanosleep. When the call's context ends first,
// it stops the call as instance.call reports an interrupted one, with a
// *sys.ExitError whose code says why (classify turns it into abi.ErrTimeout
// or a cancellation): returning early would let the guest go on past its
// deadline, or sleep again.
func (s *sleeper) nanosleep(ns int64) {
	ctx := s.ctx
	if ctx == nil {
		panic(errSleepOutsideCall)
	}
	if ns <= 0 {
		if err := ctx.Err(); err != nil {
			panic(exitError(err))
		}
		return
	}
	t := time.NewTimer(time.Duration(ns))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		panic(exitError(ctx.Err()))
	}
}

// exitError is the exit wazero gives a call whose context ended with err.
func exitError(err error) *sys.ExitError {
	if errors.Is(err, context.DeadlineExceeded) {
		return sys.NewExitError(sys.ExitCodeDeadlineExceeded)
	}
	return sys.NewExitError(sys.ExitCodeContextCanceled)
}
