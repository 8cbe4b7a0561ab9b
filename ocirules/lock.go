package ocirules

import (
	"errors"
	"fmt"

	"github.com/ssrun/ssrun/internal/filelock"
)

// lockFile locks the file at path, refusing if another process (or
// another Source of this one) holds it. Where flock(2) is missing it
// refuses too: two processes could swap one cache folder under each other,
// and the folder's links need POSIX symlinks.
func lockFile(path string) (unlock func() error, err error) {
	l, err := filelock.TryLock(path)
	switch {
	case errors.Is(err, filelock.ErrLocked):
		return nil, fmt.Errorf("%s is locked: another ssrun runs these rules from this cache (give one of them another --oci-cache)", path)
	case errors.Is(err, errors.ErrUnsupported):
		return nil, errors.New("rules from an OCI registry (oci://) are supported on Linux, macOS and the BSDs only")
	case err != nil:
		return nil, err
	}
	return l.Release, nil
}
