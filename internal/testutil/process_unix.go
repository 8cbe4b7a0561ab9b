//go:build unix

package testutil

import (
	"errors"
	"syscall"
)

// NoProcess reports whether no process has pid (signal 0 finds none).
func NoProcess(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
