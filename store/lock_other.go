//go:build !unix || solaris || aix

package store

import (
	"errors"
	"os"
)

// lockDir refuses: without flock(2) the broker cannot keep a second one off
// the same directory (nor, on Windows, sync a directory), so persistence is
// offered on Linux, macOS and the BSDs only.
func lockDir(dir string) (*os.File, error) {
	return nil, errors.New("persistence (Config.DataDir, --data) is supported on Linux, macOS and the BSDs only")
}

func unlockDir(f *os.File) error { return nil }
