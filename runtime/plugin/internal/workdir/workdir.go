// Package workdir keeps the private working directories of plugin runtimes:
// one "ssrun-plugins-*" directory per runtime under a base directory
// (os.TempDir() by default), holding the copies of the plugin binaries it
// runs and go-plugin's unix sockets.
//
// On Linux each directory holds an owner lock (flock(2) on its file
// ".owner") for as long as its runtime lives. The kernel drops the lock
// when the owning process dies, however it dies, so a directory whose lock
// can be taken was left behind by a process that is gone (SIGKILL, a crash,
// a killed container) and is safe to remove, whatever pid namespace its
// owner ran in. RemoveStale removes those; a directory without the lock
// file (made by an older ssrun, or by something else) is never touched.
// Elsewhere there is no lock, and nothing is ever found stale.
package workdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Prefix starts the name of every working directory.
const Prefix = "ssrun-plugins-"

// lockName is the owner lock file in a working directory.
const lockName = ".owner"

// Dir is a working directory owned by this process.
type Dir struct {
	Path string
	lock *os.File // holds the owner lock; nil where there is none
}

// Create makes a new working directory under base and takes its owner lock.
func Create(base string) (*Dir, error) {
	path, err := os.MkdirTemp(base, Prefix)
	if err != nil {
		return nil, err
	}
	lock, err := ownerLock(path)
	if err != nil {
		_ = os.RemoveAll(path)
		return nil, fmt.Errorf("owner lock in %s: %w", path, err)
	}
	return &Dir{Path: path, lock: lock}, nil
}

// Remove removes the directory and everything in it, then drops its lock.
func (d *Dir) Remove() error {
	err := os.RemoveAll(d.Path)
	if d.lock != nil {
		_ = d.lock.Close()
	}
	return err
}

// RemoveStale removes the working directories under base whose owner is
// gone, and returns them. Only directories of this user with an owner lock
// nobody holds are removed. It fails only when base cannot be listed; a
// directory that could not be removed is reported in the error too, and
// the others are still removed.
func RemoveStale(base string) ([]string, error) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), Prefix) || !e.IsDir() { // IsDir: never a symbolic link
			continue
		}
		path := filepath.Join(base, e.Name())
		if !ownedByUs(path) {
			continue
		}
		ok, err := RemoveIfStale(path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}
