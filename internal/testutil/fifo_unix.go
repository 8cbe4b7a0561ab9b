//go:build unix

package testutil

import (
	"errors"
	"os"
	"syscall"
	"testing"
)

// Mkfifo makes a named pipe at path. When the test ends it opens the pipe
// for writing, without blocking, and closes it: a reader stuck opening it
// (the very defect a test of it looks for) gets end of file and returns,
// so its goroutine ends with the test.
func Mkfifo(tb testing.TB, path string) {
	tb.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		tb.Fatalf("mkfifo %s: %v", path, err)
	}
	tb.Cleanup(func() {
		f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			_ = f.Close()
		} else if !errors.Is(err, syscall.ENXIO) && !errors.Is(err, os.ErrNotExist) { // ENXIO: no reader
			tb.Errorf("releasing readers of %s: %v", path, err)
		}
	})
}
