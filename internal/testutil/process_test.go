package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// TestProcessGone: a process that runs is not gone; once killed and
// reaped it is, and ProcessGone returns.
func TestProcessGone(t *testing.T) {
	if NoProcess(os.Getpid()) {
		t.Fatal("NoProcess of this process: true")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNoSuchTest$", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), "SSRUN_TESTUTIL_HANG=1") // see TestMain: waits for its stdin
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	pid := cmd.Process.Pid
	if NoProcess(pid) {
		t.Fatalf("NoProcess of the running child %d: true", pid)
	}
	if err := Kill(pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // reaped: its pid is free
	ProcessGone(t, pid)
}
