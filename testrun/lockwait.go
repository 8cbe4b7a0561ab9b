package testrun

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Locks in the in-memory world, as the host takes them (host/locks.go): a
// lock is its key, written with the holder's value ("ssrun-test:<rule
// file>", as the host writes "<client id>:<rule file>") by a SET NEX, and
// its fencing token is the version of that write. The key is taken when
// it is absent or already holds the rule's value; otherwise the lock is
// BUSY, at once without wait, or after the rule has waited, on the virtual
// clock, for wait: until the key is deleted (an unlock, a lost lease, a
// delete step) the rule's handler is parked and the others go on; at the
// deadline it gets BUSY. The host renews a lease while the rule holds it:
// here it never expires, and its token does not change.

// testClientID is the client id of the world's host, in lock values.
const testClientID = "ssrun-test"

// lockWait is a rule's handler waiting in Lock for the key name.
type lockWait struct {
	b        *binding
	name     string
	ttl      time.Duration
	deadline int64 // virtual Unix ms
	ch       chan lockResult
}

type lockResult struct {
	token string
	err   error
}

// holder is the value of the lock keys the rule holds.
func (b *binding) holder() string { return testClientID + ":" + b.name }

// tryLock takes the lock name for b if its key is free for b. Under mu.
func (w *world) tryLock(b *binding, name string) (string, bool) {
	if e, ok := w.store[name]; ok && string(e.value) != b.holder() {
		return "", false
	}
	// Not one of the rule's own writes for the host: its own watch of
	// the key sees it.
	token := w.put(name, []byte(b.holder()), 0, nil, b.hop+1)
	l := lease{n: w.seq, token: token}
	w.locks[name] = b
	b.held[name] = l
	w.newest[name] = l.n
	return token, true
}

// waitLock parks b's handler until the lock name is free for it or the
// wait passes, and returns the outcome. Called under mu, which it releases
// while parked.
func (w *world) waitLock(b *binding, name string, ttl, wait time.Duration) (string, error) {
	lw := &lockWait{b: b, name: name, ttl: ttl, deadline: w.now + max(wait.Milliseconds(), 1), ch: make(chan lockResult, 1)}
	w.waiters = append(w.waiters, lw)
	w.mu.Unlock()
	b.parked <- struct{}{} // drain goes on with the other rules
	res := <-lw.ch
	w.mu.Lock()
	return res.token, res.err
}

// wakeWaiters ends the lock waits that can end now: a free key is taken
// by the first rule waiting for it, a wait past its deadline is BUSY. The
// woken handlers are resumed by drain, in order. Under mu.
func (w *world) wakeWaiters() {
	kept := w.waiters[:0]
	for _, lw := range w.waiters {
		var res lockResult
		if tok, ok := w.tryLock(lw.b, lw.name); ok {
			res.token = tok
		} else if w.now >= lw.deadline {
			res.err = lw.b.fail(abi.StatusBusy, "lock %s: held by another holder past the wait", lw.name)
		} else {
			kept = append(kept, lw)
			continue
		}
		lw.ch <- res
		w.resumed = append(w.resumed, lw.b)
	}
	clear(w.waiters[len(kept):])
	w.waiters = kept
}

// finish ends the waits still parked when a case or replay ends (BUSY) and
// waits for their handlers, so that no goroutine outlives the world.
func (w *world) finish(ctx context.Context) {
	w.mu.Lock()
	for _, lw := range w.waiters {
		lw.ch <- lockResult{err: lw.b.fail(abi.StatusBusy, "lock %s: the case ended while waiting", lw.name)}
		w.resumed = append(w.resumed, lw.b)
	}
	w.waiters = nil
	w.queue = nil
	w.mu.Unlock()
	w.drain(ctx)
}

// handle runs d in a goroutine of its own and waits until it returns or
// parks in a lock wait.
func (w *world) handle(ctx context.Context, d delivery) {
	b := d.to
	b.running, b.ev = make(chan error, 1), d.ev
	go func() { b.running <- b.script.Handle(ctx, d.ev) }()
	w.await(b)
}

// await waits until b's running handler returns (and counts it) or parks.
func (w *world) await(b *binding) {
	select {
	case <-b.parked:
		return
	case err := <-b.running:
		w.mu.Lock()
		defer w.mu.Unlock()
		b.running = nil
		if err != nil {
			b.failed++
			w.logf("%s: error: rule failed on %s %s: %v", b.name, b.ev.Op, b.ev.Key, err)
		} else {
			b.handled++
		}
	}
}
