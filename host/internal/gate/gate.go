// Package gate bounds how many handler calls a host runs at once: a rule's
// worker takes a place before its call's deadline starts and gives it back
// when the call returns or is abandoned.
package gate

import (
	"context"
	"sync/atomic"
)

// DefaultMax bounds the handler calls a host runs at once
// (host.Config.MaxConcurrentCalls when zero). A handler spends most of its time
// waiting for store replies, and one connection carries them all: 64 calls
// in flight keep the connection as busy as it gets (the end-to-end
// benchmark saturates it at 64 requests in flight) while a burst that wakes
// a thousand rules queues in their mailboxes, where waiting costs nothing,
// instead of on the connection, where it would count against each call's
// deadline.
const DefaultMax = 64

// Gate bounds how many handler calls run at once. A rule's worker
// enters it before a call's deadline starts and leaves it when the call
// returns, or when the call is abandoned (a stuck call does not keep its
// place). Without it, a burst of changes to keys watched by many rules
// starts every rule's handler at once; their store requests queue on the
// host's one connection, and the wait, which is no rule's doing, counts
// against each call's timeout: with 1,000 rules calls took over a second,
// and ten such failures in a row disable a rule.
//
// A handler waiting for a lock (lock with wait) keeps its place: the wait
// is bounded by the lock's wait and the call's deadline.
type Gate chan struct{}

func New(n int) Gate {
	if n <= 0 {
		n = DefaultMax
	}
	return make(Gate, n)
}

// Enter takes a place, waiting until one is free or ctx ends; held is set
// for leave.
func (g Gate) Enter(ctx context.Context, held *atomic.Bool) error {
	select {
	case g <- struct{}{}:
		held.Store(true)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Leave gives back the place held, once: the call's return and its
// abandonment may both call it.
func (g Gate) Leave(held *atomic.Bool) {
	if held.CompareAndSwap(true, false) {
		<-g
	}
}
