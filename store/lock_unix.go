//go:build unix && !solaris && !aix

package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFile is the data directory's lock, held by the broker using it.
const lockFile = "LOCK"

// lockDir takes an exclusive flock on dir/LOCK, refusing (ErrDataLocked) if
// another process, or another broker in this one, holds it. The kernel
// drops the lock when the holder exits, however it exits: no stale locks
// after a kill -9.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s is locked: stop the ssrun broker or dev using it, or pick another directory)", ErrDataLocked, path)
		}
		return nil, fmt.Errorf("lock data directory: flock %s: %w", path, err)
	}
	return f, nil
}

// unlockDir releases the lock taken by lockDir.
func unlockDir(f *os.File) error {
	if f == nil {
		return nil
	}
	return f.Close() // closing the only descriptor releases the flock
}
