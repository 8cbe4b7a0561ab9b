//go:build !unix

package broker

import (
	"errors"
	"os"
)

// lockDir refuses: without flock the broker cannot keep a second one off
// the same directory, nor sync a directory, so persistence is unix-only.
func lockDir(dir string) (*os.File, error) {
	return nil, errors.New("persistence (Config.DataDir, --data) is only supported on unix systems")
}

func unlockDir(f *os.File) error { return nil }
