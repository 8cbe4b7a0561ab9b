package workdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ownerLock creates dir's lock file already locked: it is locked under a
// temporary name and then renamed, so whoever opens ".owner" finds it held.
// The file is opened close-on-exec (as os opens every file), so no child
// process inherits the lock.
func ownerLock(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, lockName+"-")
	if err != nil {
		return nil, err
	}
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		_, err = fmt.Fprintf(f, "pid %d\n", os.Getpid()) // for people; never read
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, lockName))
	}
	if err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}

// RemoveIfStale removes the working directory at path if its owner lock
// exists and nobody holds it (its owner is gone), and reports whether it
// did. Holding the lock while removing keeps two callers from racing.
func RemoveIfStale(path string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(path, lockName), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, nil // no lock file: not provably ours, or already removed
	}
	defer f.Close()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false, nil // its owner lives
	case err != nil:
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("remove stale %s: %w", path, err)
	}
	return true, nil
}

// ownedByUs reports whether path belongs to this process's effective user.
func ownedByUs(path string) bool {
	info, err := os.Lstat(path)
	if err != nil {
		return false
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}
