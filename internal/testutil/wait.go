package testutil

import (
	"testing"
	"time"
)

// WaitBound is how long WaitFor waits before it fails the test: far above
// what any condition takes on a loaded machine, so that it bounds a test
// that would hang without ever deciding one that passes.
const WaitBound = 30 * time.Second

// WaitFor polls cond every few milliseconds until it holds. If it does not
// hold within WaitBound, the test fails (Fatal) with "timed out after 30s
// waiting for <what>".
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	waitFor(tb, WaitBound, what, cond)
}

func waitFor(tb testing.TB, bound time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", bound, what)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Returns runs f in a goroutine and waits, up to WaitBound, for it to
// return; if it does not, the test fails (Fatal) with "timed out after 30s
// waiting for <what> to return". It is for calls that must not block (a
// test of a call that used to hang). The goroutine is left to end on its
// own then: whatever made it block must be released by the test's
// cleanups (see Mkfifo).
func Returns(tb testing.TB, what string, f func()) {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(WaitBound):
		tb.Fatalf("timed out after %v waiting for %s to return", WaitBound, what)
	}
}
