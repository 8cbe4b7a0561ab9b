//go:build wasip1

package ssrun

import "runtime"

// The guard makes a host call and what the SDK does with its result one
// unit (the shared result buffer, last_error, the failure count, the
// result blocks), and guards the lazy text of verb errors.
//
// A wasip1 program runs on one thread, and a goroutine gives the thread
// up only inside a call (a blocking operation, a stack check asking it to
// yield, a GC assist). So a flag that is tested and set with no call in
// between is a lock: no other goroutine can run between the test and the
// set. A sync.Mutex costs a Go guest about 1.5 floor host calls per Lock
// and Unlock (its atomics are calls of their own on wasm), the flag next
// to nothing (runtime/wasm BenchmarkGuestSteps).
//
// A goroutine that finds the flag held (another one stopped inside a verb)
// yields until it is free. Code between enter and leave must not panic:
// the flag would stay held (a trap of a host call discards the instance,
// and with it the flag).

// busy is the guard: set while a goroutine is inside a verb.
var busy bool

// enter takes the guard.
func enter() {
	if busy {
		waitGuard()
	}
	busy = true
}

// leave releases the guard.
func leave() { busy = false }

// waitGuard yields until the guard is free. The caller sets it on return,
// with no call in between.
//
//go:noinline
func waitGuard() {
	for busy {
		runtime.Gosched()
	}
}
