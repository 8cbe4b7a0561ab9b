package store

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ssrun/ssrun/internal/filelock"
)

// lockFile is the data directory's lock, held by the broker using it.
const lockFile = "LOCK"

// lockDir locks dir/LOCK, refusing (ErrDataLocked) if another process, or
// another broker in this one, holds it. Where flock(2) is missing it
// refuses too: without it the broker cannot keep a second one off the same
// directory (nor, on Windows, sync a directory).
func lockDir(dir string) (*filelock.Lock, error) {
	path := filepath.Join(dir, lockFile)
	l, err := filelock.TryLock(path)
	switch {
	case errors.Is(err, filelock.ErrLocked):
		return nil, fmt.Errorf("%w (%s is locked: stop the ssrun broker or dev using it, or pick another directory)", ErrDataLocked, path)
	case errors.Is(err, errors.ErrUnsupported):
		return nil, errors.New("persistence (Config.DataDir, --data) is supported on Linux, macOS and the BSDs only")
	case err != nil:
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	return l, nil
}
