//go:build unix && !solaris && !aix

package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// TryLock takes the lock of the file at path, creating it if need be,
// without waiting: ErrLocked if another holder has it.
func TryLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("flock %s: %w", path, err)
	}
	return &Lock{release: f.Close}, nil // closing the only descriptor releases the flock
}
