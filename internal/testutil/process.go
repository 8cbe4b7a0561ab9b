package testutil

import (
	"fmt"
	"os"
	"testing"
)

// ProcessGone waits (up to WaitBound) until no process has pid: it exited
// and was reaped (a zombie still has its pid). A pid <= 0 fails the test.
func ProcessGone(tb testing.TB, pid int) {
	tb.Helper()
	if pid <= 0 {
		tb.Fatalf("bad pid %d", pid)
	}
	WaitFor(tb, fmt.Sprintf("process %d to be gone", pid), func() bool { return NoProcess(pid) })
}

// Kill kills the process pid at once (SIGKILL on unix).
func Kill(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}
