//go:build !unix

package testutil

import "os"

// NoProcess reports whether no process has pid: os.FindProcess opens
// the process on Windows, which fails once it is gone.
func NoProcess(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	_ = p.Release()
	return false
}
