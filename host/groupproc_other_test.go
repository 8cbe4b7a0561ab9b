//go:build !unix

package host

import "os"

// resume does nothing: no test stops a process on this system (see
// groupproc_unix_test.go).
func resume(*os.Process) {}
