//go:build !unix || solaris || aix

package filelock

import (
	"errors"
	"fmt"
)

// TryLock refuses where flock(2) is missing (errors.ErrUnsupported).
func TryLock(path string) (*Lock, error) {
	return nil, fmt.Errorf("lock %s: %w", path, errors.ErrUnsupported)
}
