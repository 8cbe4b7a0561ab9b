//go:build unix

package safefile

import "syscall"

// openFlags makes opening a named pipe return at once (it is then refused)
// instead of waiting for a writer. Regular files ignore it.
const openFlags = syscall.O_NONBLOCK
