// Package filelock takes the exclusive, advisory lock that keeps a second
// process (or a second user in this one) off a folder: flock(2), which the
// kernel drops when the holder exits, however it exits, so a kill -9
// leaves no stale lock behind.
package filelock

import "errors"

// ErrLocked is returned by TryLock when another holder has the lock.
var ErrLocked = errors.New("locked by another holder")

// Lock is a lock taken by TryLock.
type Lock struct{ release func() error }

// Release gives the lock up. It is safe on a nil Lock.
func (l *Lock) Release() error {
	if l == nil {
		return nil
	}
	return l.release()
}
