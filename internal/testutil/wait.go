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
