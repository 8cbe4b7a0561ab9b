//go:build unix && !solaris && !aix

package ocirules

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, refusing if another process
// (or another Source of this one) holds it. The kernel drops the lock when
// the holder exits, however it exits: no stale locks after a kill -9.
func lockFile(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is locked: another ssrun runs these rules from this cache (give one of them another --oci-cache)", path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f.Close, nil // closing the only descriptor releases the flock
}
