package plugin

import (
	"os/exec"
	"syscall"
)

// dieWithHost makes the kernel kill the plugin (SIGKILL) when the host dies,
// even by SIGKILL, so a plugin never outlives it. Linux ties this to the
// thread that started the process; the Go runtime only ends a thread whose
// goroutine locked it (runtime.LockOSThread) and exited, which ssrun does
// not do.
func dieWithHost(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
